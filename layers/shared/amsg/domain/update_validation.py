"""Validation and merge of ``PUT /update-message`` bodies, in the reference's order, codes and merge rules."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

from amsg.domain.jsvalues import is_finite_number, is_plain_object, is_positive_integer, js_trim, js_truthy
from amsg.domain.llm_messages import validate_messages_array
from amsg.domain.timezones import canonical_tz
from amsg.domain.urls import avatar_url_error
from amsg.domain.validation import (
    API_KEY_HEADER_MESSAGE,
    INLINE_CREDENTIAL_FIELDS,
    RECURRENCE_TYPES,
    api_key_error,
    cred_refs_error,
    distinct_cred_ids,
    normalize_int,
    split_pattern_error,
)
from amsg.errors import api_error, invalid_update
from amsg.jsonio import JsonObject
from amsg.task_payload import StoredPayload
from amsg.timeutil import iso_from_ms, parse_iso_ms


@dataclass
class UpdatePatch:
    """A validated update: the payload changes to merge plus what the handler needs around the write.

    ``changes`` holds exactly the keys the merge writes (in the reference's merge order); it depends only on
    the request, so ``updated_fields`` can be computed before the task is loaded.
    """

    request_keys: list[str]
    changes: JsonObject
    next_send_at_ms: int | None = None
    inline_credential_keys: list[str] = field(default_factory=list)
    cred_ref_ids: list[str] = field(default_factory=list)

    @property
    def next_send_at(self) -> str | None:
        """The new row ``next_send_at`` (``toISOString`` form), or None when the row column is not touched."""
        return None if self.next_send_at_ms is None else iso_from_ms(self.next_send_at_ms)

    def applied_keys(self) -> list[str]:
        """Request keys (request order) whose values land in the payload."""
        return [key for key in self.request_keys if key in self.changes]

    def updated_fields(self, *, next_send_at_changed: bool) -> list[str]:
        """``data.updatedFields``: applied payload keys plus ``nextSendAt`` when the row column was written."""
        return [
            key for key in self.request_keys if key in self.changes or (key == "nextSendAt" and next_send_at_changed)
        ]

    def apply(self, stored_payload: StoredPayload) -> tuple[StoredPayload, list[str]]:
        """Merge into a copy of ``stored_payload``; returns ``(new_payload, applied_keys_in_request_order)``.

        Cloud ownership (``owner``, ``ownerGeneration``, ``metadata.cloudOwner``) always stays as it was: an
        update can never move a task to another owner.
        """
        merged: JsonObject = {**stored_payload, **self.changes}
        if "metadata" in self.changes and is_plain_object(merged["metadata"]):
            metadata = dict(merged["metadata"])
            original = stored_payload.get("metadata")
            if is_plain_object(original) and "cloudOwner" in original:
                metadata["cloudOwner"] = original["cloudOwner"]
            else:
                metadata.pop("cloudOwner", None)
            merged["metadata"] = metadata
        for key in ("owner", "ownerGeneration"):
            if key in stored_payload:
                merged[key] = stored_payload[key]
            else:
                merged.pop(key, None)
        return cast(StoredPayload, merged), self.applied_keys()  # the changes are checked payload keys


@dataclass
class _Update:
    """What the rules of one update request have established so far."""

    u: JsonObject
    next_send_at_ms: int | None = None
    tz_id: str | None = None
    avatar_ok: bool = False


def _rule_next_send_at(s: _Update) -> None:
    if js_truthy(s.u.get("nextSendAt")):
        s.next_send_at_ms = parse_iso_ms(s.u["nextSendAt"])
        if s.next_send_at_ms is None:
            raise invalid_update(["nextSendAt"])


def _rule_contact_name(s: _Update) -> None:
    if "contactName" in s.u and (not isinstance(s.u["contactName"], str) or not js_trim(s.u["contactName"])):
        raise invalid_update(["contactName"], "contactName 必须是非空字符串")


def _rule_strings(s: _Update) -> None:
    for key in ("userMessage", "messageSubtype"):
        if s.u.get(key) is not None and not isinstance(s.u[key], str):
            raise invalid_update([key], f"{key} 必须是字符串")


def _rule_extra_body(s: _Update) -> None:
    if s.u.get("llmExtraBody") is not None and not is_plain_object(s.u["llmExtraBody"]):
        raise invalid_update(["llmExtraBody"], "llmExtraBody 必须是普通对象")


def _rule_recurrence(s: _Update) -> None:
    recurrence = s.u.get("recurrenceType")
    if js_truthy(recurrence) and (not isinstance(recurrence, str) or recurrence not in RECURRENCE_TYPES):
        raise invalid_update(["recurrenceType"])


def _rule_tz(s: _Update) -> None:
    if s.u.get("tzId") is not None:
        s.tz_id = canonical_tz(s.u["tzId"])
        if s.tz_id is None:
            raise invalid_update(["tzId"], "tzId 必须是可用的 IANA 时区 id（如 Asia/Tokyo），或 null 表示按 UTC 推进")


def _rule_max_tokens(s: _Update) -> None:
    if s.u.get("maxTokens") is not None and not is_positive_integer(s.u["maxTokens"]):
        raise invalid_update(["maxTokens"])


def _rule_prompt(s: _Update) -> None:
    messages = s.u.get("messages")
    if js_truthy(s.u.get("completePrompt")) and messages is not None:
        raise invalid_update(["completePrompt", "messages"], "completePrompt 与 messages 不能同时更新（二选一）")
    if messages is not None:
        messages_error = validate_messages_array(messages)
        if messages_error:
            raise invalid_update(["messages"], messages_error)


def _rule_temperature(s: _Update) -> None:
    if s.u.get("temperature") is not None and not is_finite_number(s.u["temperature"]):
        raise invalid_update(["temperature"])


def _rule_split_pattern(s: _Update) -> None:
    if "splitPattern" in s.u:
        split_error = split_pattern_error(s.u["splitPattern"])
        if split_error:
            raise invalid_update(["splitPattern"], split_error)


def _rule_avatar(s: _Update) -> None:
    # A bad avatar is dropped from the patch (old avatar kept), never an error (the reference's soft strip).
    s.avatar_ok = "avatarUrl" in s.u and avatar_url_error(s.u["avatarUrl"]) is None


def _rule_no_push_subscription(s: _Update) -> None:
    if "pushSubscription" in s.u:
        raise api_error(
            "PUSH_SUBSCRIPTION_NOT_ACCEPTED",
            "pushSubscription 不再随任务更新，改用 PUT /push-subscription 覆盖用户级订阅",
            {"invalidFields": ["pushSubscription"]},
        )


def _rule_cred_refs(s: _Update) -> None:
    cred_refs = s.u.get("credRefs")
    if cred_refs is None:
        return
    refs_error = cred_refs_error(cred_refs)
    if refs_error:
        raise invalid_update(["credRefs"], refs_error)
    if any(js_truthy(s.u.get(name)) for name in INLINE_CREDENTIAL_FIELDS):
        raise invalid_update(
            ["credRefs", *INLINE_CREDENTIAL_FIELDS],
            "credRefs 与内联 apiUrl / apiKey / primaryModel 不能同时更新（二选一）",
        )


def _rule_api_key(s: _Update) -> None:
    if api_key_error(s.u.get("apiKey")):
        raise invalid_update(["apiKey"], API_KEY_HEADER_MESSAGE)


# The reference's order (the first failing rule answers); the apiKey header check is ours and comes last.
UPDATE_RULES: tuple[Callable[[_Update], None], ...] = (
    _rule_next_send_at,
    _rule_contact_name,
    _rule_strings,
    _rule_extra_body,
    _rule_recurrence,
    _rule_tz,
    _rule_max_tokens,
    _rule_prompt,
    _rule_temperature,
    _rule_split_pattern,
    _rule_avatar,
    _rule_no_push_subscription,
    _rule_cred_refs,
    _rule_api_key,
)


def validate_update_patch(patch: JsonObject) -> UpdatePatch:
    """Validate a decrypted update body in the reference's order; raise the first error."""
    if not is_plain_object(patch):
        raise api_error("INVALID_UPDATE_DATA")
    state = _Update(patch)
    for rule in UPDATE_RULES:
        rule(state)
    u = patch
    return UpdatePatch(
        request_keys=list(u.keys()),
        changes=_update_changes(u, tz_id=state.tz_id, avatar_ok=state.avatar_ok),
        next_send_at_ms=state.next_send_at_ms,
        inline_credential_keys=[k for k in u if k in INLINE_CREDENTIAL_FIELDS and js_truthy(u[k])],
        cred_ref_ids=distinct_cred_ids(u.get("credRefs")),
    )


def _update_changes(u: JsonObject, *, tz_id: str | None, avatar_ok: bool) -> JsonObject:
    """The reference's merge rule per field: key-present-replace, truthy-replace, or null-ignored per field."""
    changes: JsonObject = {}
    if js_truthy(u.get("completePrompt")):
        changes["completePrompt"] = u["completePrompt"]
        changes["messages"] = None
    elif u.get("messages") is not None:
        changes["messages"] = u["messages"]
        changes["completePrompt"] = None
    if "contactName" in u:
        changes["contactName"] = u["contactName"]
    _set_if_truthy(changes, u, ("userMessage", "recurrenceType"))
    if "tzId" in u:
        changes["tzId"] = tz_id
    if avatar_ok:
        _set_if_truthy(changes, u, ("avatarUrl",))
    _set_if_truthy(changes, u, ("metadata", *INLINE_CREDENTIAL_FIELDS, "credRefs"))
    if "maxTokens" in u:
        changes["maxTokens"] = normalize_int(u["maxTokens"])
    for key in ("temperature", "splitPattern", "messageSubtype", "llmExtraBody"):
        if key in u:
            changes[key] = u[key]
    return changes


def _set_if_truthy(changes: JsonObject, source: JsonObject, keys: Iterable[str]) -> None:
    for key in keys:
        if js_truthy(source.get(key)):
            changes[key] = source[key]
