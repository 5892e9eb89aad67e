"""The pure rules of the agentic fire: what hooks may return (decisions, before-fire plans), usage accounting,
tool messages and ``write_state`` entries. No I/O: :mod:`amsg.engine.fire` and :mod:`amsg.engine.fire_services`
apply them."""

from __future__ import annotations

import math
import uuid as uuid_lib
from collections.abc import Callable, Mapping
from typing import Any

from amsg.domain.client_state import (
    DEFAULT_MAX_STATE_VALUE_BYTES,
    MAX_KEY_CHARS,
    MAX_NAMESPACE_CHARS,
    MAX_STATE_ENTRIES,
    StateEntry,
    has_reserved_chars,
)
from amsg.domain.jsvalues import is_plain_object
from amsg.domain.ownership import GUARD_FIELD
from amsg.domain.timezones import canonical_tz, is_valid_tz
from amsg.failures import DeliveryFailure
from amsg.jsonio import JsonObject
from amsg.task_payload import StoredPayload
from amsg.timeutil import iso_from_ms, parse_iso_ms

MAX_DEFER_MS = 86_400_000
MIN_FOLLOW_UP_LEAD_MS = 60_000
DECISIONS = ("finish", "tool-request", "continue", "skip-push")
FOLLOW_UP_NAMESPACE = uuid_lib.UUID("6f1c0a52-9d8e-4b57-a3c1-5e2f7d9b0c41")
BEFORE_FIRE_FORMS = (
    'None, {"skip": True}, {"defer": {"after_ms": n}} with 0 < n <= 86400000, a list of messages, or '
    '{"messages": [...], "max_tool_iterations"?, "total_timeout_ms"?, "tools"?, "tool_choice"?}'
)


def config_error(message: str, code: str) -> DeliveryFailure:
    """A deployment problem: retryable (the task heals once the deployment is fixed)."""
    return DeliveryFailure(f"{code}: {message}", code=code)


def contract_error(code: str, message: str) -> DeliveryFailure:
    """A contract violation by a hook: permanent, retrying cannot fix it."""
    return DeliveryFailure(f"{code}: {message}", code=code, permanent=True)


def first_positive_int(*values: Any) -> int:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 5


def first_positive_number(*values: Any) -> int:
    for value in values:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            return int(value)
    return 240_000


def first_message(response: Mapping[str, Any]) -> JsonObject:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    return dict(message) if isinstance(message, dict) else {"role": "assistant", "content": ""}


def _token(usage: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
            return int(value)
    return None


def accumulate_usage(total: dict[str, int] | None, usage: Mapping[str, Any] | None) -> dict[str, int] | None:
    if not usage:
        return total
    prompt = _token(usage, "prompt_tokens", "input_tokens")
    completion = _token(usage, "completion_tokens", "output_tokens")
    whole = _token(usage, "total_tokens")
    if whole is None and prompt is not None and completion is not None:
        whole = prompt + completion
    if prompt is None and completion is None and whole is None:
        return total
    out = dict(total or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
    for name, value in (("prompt_tokens", prompt), ("completion_tokens", completion), ("total_tokens", whole)):
        if value is not None:
            out[name] = out.get(name, 0) + value
    return out


def validate_decision(decision: Any) -> None:
    def bad(message: str) -> DeliveryFailure:
        return contract_error("AGENTIC_BAD_DECISION", message)

    if not isinstance(decision, dict):
        raise bad("on_llm_output must return a dict with a 'decision' key")
    kind = decision.get("decision")
    if kind not in DECISIONS:
        raise bad(f"decision must be one of {', '.join(DECISIONS)}")
    if "push_payload" in decision or "pushPayload" in decision:
        raise bad("use push_payloads (a list), not push_payload")
    if kind == "continue":
        if not isinstance(decision.get("next_history"), list):
            raise bad("continue needs a next_history list")
        return
    if kind == "skip-push":
        return
    if kind == "tool-request" and "tool_calls" in decision:
        calls = decision["tool_calls"]
        if not isinstance(calls, list) or not calls or not all(is_plain_object(call) for call in calls):
            raise bad("tool_calls must be a non-empty list of dicts")
        return
    _check_push_payloads(kind, decision.get("push_payloads"), bad)


def _check_push_payloads(kind: str, payloads: Any, bad: Callable[[str], DeliveryFailure]) -> None:
    if not isinstance(payloads, list) or not payloads or not all(is_plain_object(p) for p in payloads):
        raise bad(f"{kind} needs push_payloads: a non-empty list of dicts")
    for index, push in enumerate(payloads):
        if "splitPattern" in push:
            raise bad(f"push_payloads[{index}] must not carry splitPattern")
        if "messageId" in push and (not isinstance(push["messageId"], str) or not push["messageId"]):
            raise bad(f"push_payloads[{index}].messageId must be a non-empty string")


def requested_calls(decision: JsonObject) -> list[JsonObject]:
    calls = decision.get("tool_calls")
    if isinstance(calls, list) and calls:
        return list(calls)
    out: list[JsonObject] = []
    for push in decision.get("push_payloads") or []:
        embedded = push.get("toolCalls") if isinstance(push, dict) else None
        if isinstance(embedded, list):
            out.extend(embedded)
    return out


def failed_tools(calls: list[JsonObject], message: str) -> list[JsonObject]:
    return [
        {"tool_call_id": str(call.get("id") or ""), "role": "tool", "content": f"Tool execution failed: {message}"}
        for call in calls
    ]


def with_tool_calls(assistant: JsonObject, calls: list[JsonObject]) -> JsonObject:
    found = assistant.get("tool_calls")
    native: list[Any] = found if isinstance(found, list) else []
    ids = {call.get("id") for call in native if isinstance(call, dict)}
    synthesized = [call for call in calls if call.get("id") not in ids]
    if not synthesized:
        return assistant
    return {**assistant, "tool_calls": [*native, *synthesized]}


def state_entries(namespace: Any, entries: Any, now_ms: int) -> list[StateEntry]:
    if not isinstance(namespace, str) or not namespace.strip():
        raise TypeError("write_state(namespace, entries) requires a non-empty string namespace")
    if len(namespace) > MAX_NAMESPACE_CHARS or has_reserved_chars(namespace):
        raise TypeError(f"write_state: namespace must be 1-{MAX_NAMESPACE_CHARS} characters without control characters")
    if not isinstance(entries, list):
        raise TypeError("write_state(namespace, entries) requires a list of {key, value}")
    if len(entries) > MAX_STATE_ENTRIES:
        raise ValueError(f"write_state: at most {MAX_STATE_ENTRIES} entries per call")
    checked = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise TypeError(f"write_state: entries[{index}] must be a dict")
        key = entry.get("key")
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_CHARS or has_reserved_chars(key):
            raise TypeError(f"write_state: entries[{index}].key must be 1-{MAX_KEY_CHARS} characters")
        value = entry.get("value")
        if value is not None and not isinstance(value, str):
            raise TypeError(f"write_state: entries[{index}].value must be a string (serialize it) or None")
        if isinstance(value, str) and len(value.encode("utf-8")) > DEFAULT_MAX_STATE_VALUE_BYTES:
            raise ValueError(f"write_state: entries[{index}].value is too large")
        updated_at = entry.get("updatedAt", now_ms)
        version = entry.get("version")
        for name, number in (("updatedAt", updated_at), ("version", version)):
            if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number <= 0):
                raise TypeError(f"write_state: entries[{index}].{name} must be a positive integer")
        checked.append(StateEntry(index, namespace, key, value, int(updated_at), version))
    return checked


def follow_up(options: Mapping[str, Any], parent: StoredPayload, now_ms: int) -> tuple[int, str, StoredPayload]:
    """Check a ``schedule_task`` call's options against the firing task's payload (``parent``, whose settings a
    follow-up inherits) and build the follow-up's stored payload: (first send ms, message type, payload). Raises
    the ``TypeError``/``ValueError`` the hook sees, in the order of the checks."""
    first_ms = _follow_up_first_ms(options, now_ms)
    message_type = _follow_up_type(options, parent)
    recurrence = options.get("recurrenceType") or "none"
    if recurrence not in ("none", "daily", "weekly"):
        raise TypeError("schedule_task: recurrenceType must be none, daily or weekly")
    tz_id = _follow_up_tz(options, parent)
    contact_name = options["contactName"] if "contactName" in options else parent.get("contactName")
    if not isinstance(contact_name, str) or not contact_name.strip():
        raise TypeError("schedule_task: contactName must be a non-empty string")
    user_message = options["userMessage"] if "userMessage" in options else parent.get("userMessage")
    if message_type == "fixed" and (not isinstance(user_message, str) or not user_message):
        raise TypeError("schedule_task: a fixed task needs a non-empty userMessage")
    metadata = options["metadata"] if "metadata" in options else (parent.get("metadata") or {})
    if not is_plain_object(metadata):
        raise TypeError("schedule_task: metadata must be a dict")
    refs = parent.get("credRefs") if isinstance(parent.get("credRefs"), dict) else None
    by_ref = bool(refs and isinstance(refs.get("chat"), str) and refs["chat"])
    stored: StoredPayload = {
        "contactName": contact_name,
        "avatarUrl": (options.get("avatarUrl") or None) if "avatarUrl" in options else parent.get("avatarUrl") or None,
        "messageType": message_type,
        "messageSubtype": options.get("messageSubtype") or parent.get("messageSubtype") or "chat",
        "userMessage": user_message or None,
        "firstSendTime": iso_from_ms(first_ms),
        "recurrenceType": recurrence,
        "tzId": tz_id,
        "apiUrl": None if by_ref else parent.get("apiUrl") or None,
        "apiKey": None if by_ref else parent.get("apiKey") or None,
        "primaryModel": None if by_ref else parent.get("primaryModel") or None,
        "credRefs": dict(refs) if refs else None,
        "completePrompt": None,
        "messages": None,
        "maxTokens": parent.get("maxTokens"),
        "temperature": parent.get("temperature"),
        "splitPattern": parent.get("splitPattern"),
        "llmExtraBody": parent.get("llmExtraBody"),
        "metadata": metadata,
    }
    if GUARD_FIELD in parent:  # a follow-up is guarded by its parent's owner
        stored[GUARD_FIELD] = parent[GUARD_FIELD]
    return first_ms, message_type, stored


def _follow_up_first_ms(options: Mapping[str, Any], now_ms: int) -> int:
    first = options.get("firstSendTime")
    first_ms = parse_iso_ms(first) if isinstance(first, str) and first.strip() else None
    if first_ms is None:
        raise TypeError("schedule_task: firstSendTime must be an ISO 8601 date-time string")
    if first_ms < now_ms + MIN_FOLLOW_UP_LEAD_MS:
        raise ValueError("schedule_task: firstSendTime must be at least 60 seconds in the future")
    return first_ms


def _follow_up_type(options: Mapping[str, Any], parent: Mapping[str, Any]) -> str:
    message_type = options.get("messageType")
    if message_type is None:
        message_type = parent.get("messageType")
    if message_type == "instant":
        raise TypeError("schedule_task: messageType 'instant' cannot be scheduled from a hook")
    if message_type not in ("auto", "prompted", "fixed"):
        raise TypeError("schedule_task: messageType must be auto, prompted or fixed")
    return str(message_type)


def _follow_up_tz(options: Mapping[str, Any], parent: Mapping[str, Any]) -> Any:
    if "tzId" not in options:
        return parent.get("tzId")
    if options.get("tzId") in (None, ""):
        return None
    if is_valid_tz(options["tzId"]):
        return canonical_tz(options["tzId"])
    raise TypeError("schedule_task: tzId must be a valid IANA time zone")
