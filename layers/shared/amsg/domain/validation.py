"""Request validation for ``POST /schedule-message`` (the reference's codes), and the predicates the update
validation (:mod:`amsg.domain.update_validation`) shares with it.

The checks run in the reference's order because clients observe *which* error wins when several fields are
bad. Conditions use JS semantics (truthiness, UTF-16 lengths, ``key in`` for ``hasOwnProperty``) so that the
same request is accepted or rejected exactly as the JS server would. All functions are pure: the caller
supplies ``now_ms``; stores, keys and HTTP stay in the handlers.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from amsg.crypto import compact_json
from amsg.domain.jsvalues import (
    has_control_chars,
    is_finite_number,
    is_header_safe,
    is_plain_object,
    is_positive_integer,
    is_well_formed,
    js_truthy,
    utf16_len,
)
from amsg.domain.llm_messages import validate_messages_array
from amsg.domain.timezones import canonical_tz
from amsg.domain.urls import avatar_url_error
from amsg.errors import ApiError, api_error, invalid_parameters
from amsg.jsonio import JsonObject
from amsg.task_payload import StoredPayload
from amsg.timeutil import iso_from_ms, parse_iso_ms

# ---- limits (the reference's) --------------------------------------------------------------------------------

MESSAGE_TYPES = ("fixed", "prompted", "auto", "instant")
RECURRENCE_TYPES = ("none", "daily", "weekly")

# floor((2_000_000 - 4_096 - 66) / 2) - 2_048: the reference's D1 row budget; kept for wire parity.
MAX_TASK_PAYLOAD_BYTES = 995_871
SPLIT_PATTERN_MAX_ITEMS = 10
SPLIT_PATTERN_MAX_LENGTH = 200
CRED_ID_MAX_LENGTH = 128
CRED_REFS_MAX_ENTRIES = 16
CRED_REFS_KEY_MAX_LENGTH = 64
TASK_UUID_MAX_LENGTH = 256  # keeps uuids well inside DynamoDB key limits

DEFAULT_PARAMS_MESSAGE = "缺少必需参数或参数格式错误"
INLINE_CREDENTIAL_FIELDS = ("apiUrl", "apiKey", "primaryModel")

_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


# ---- small shared predicates -----------------------------------------------------------------------------------


def is_valid_uuid(value: Any) -> bool:
    """8-4-4-4-12 hex, any version, any case (the reference's ``isValidUUID``)."""
    return isinstance(value, str) and _UUID_RE.fullmatch(value) is not None


def validate_cred_id(value: Any) -> bool:
    """A credId: well-formed string of 1–128 UTF-16 units without U+0000–U+001F / U+007F."""
    return (
        isinstance(value, str)
        and 1 <= utf16_len(value) <= CRED_ID_MAX_LENGTH
        and not has_control_chars(value)
        and is_well_formed(value)
    )


def cred_refs_error(value: Any) -> str | None:
    """Why ``value`` is not a valid ``credRefs`` map, or None. Shared by schedule, update and hooks."""
    if not is_plain_object(value):
        return "credRefs 必须是 { <purpose>: <credId> } 形状的普通对象"
    if not value:
        return "credRefs 不能是空对象（不需要就别带这个字段）"
    if len(value) > CRED_REFS_MAX_ENTRIES:
        return f"credRefs 最多 {CRED_REFS_MAX_ENTRIES} 个条目"
    for purpose, cred_id in value.items():
        if utf16_len(purpose) > CRED_REFS_KEY_MAX_LENGTH or has_control_chars(purpose):
            return f"credRefs 的 purpose 键不能超过 {CRED_REFS_KEY_MAX_LENGTH} 字符、不能含控制字符"
        if not validate_cred_id(cred_id):
            return f"credRefs['{purpose}'] 必须是 1–{CRED_ID_MAX_LENGTH} 字符、不含控制字符的 cred_id"
    return None


def validate_cred_refs(value: Any) -> bool:
    """Whether ``value`` is a well-formed ``credRefs`` map (≤16 entries, purpose ≤64 units, valid credIds)."""
    return cred_refs_error(value) is None


def has_chat_cred_ref(payload: Any) -> bool:
    """A stored or requested payload references a ``chat`` credential (drives TASK_USES_CRED_REFS and fire)."""
    refs = payload.get("credRefs") if is_plain_object(payload) else None
    return is_plain_object(refs) and isinstance(refs.get("chat"), str) and refs["chat"] != ""


def distinct_cred_ids(cred_refs: Any) -> list[str]:
    """Referenced credIds, de-duplicated in first-occurrence order (for the existence check)."""
    if not is_plain_object(cred_refs):
        return []
    return list(dict.fromkeys(v for v in cred_refs.values() if isinstance(v, str)))


def _pattern_compiles(source: str) -> bool:
    # Imported lazily: the JS→Python regex translator is its own module and only needed here.
    from amsg.domain.jsregex import compile_js_pattern

    try:
        compile_js_pattern(source)
    except Exception:
        return False
    return True


def split_pattern_error(value: Any) -> str | None:
    """Why ``value`` is not an acceptable ``splitPattern`` (string | string[] | null), or None.

    Rejecting untranslatable patterns here keeps fire time free of regex surprises.
    """
    if value is None:
        return None
    is_array = isinstance(value, list)
    items = value if is_array else [value]
    if is_array and not items:
        return None  # [] means "use the default splitter"
    if len(items) > SPLIT_PATTERN_MAX_ITEMS:
        return f"splitPattern 数组最多 {SPLIT_PATTERN_MAX_ITEMS} 项"
    for i, item in enumerate(items):
        label = f"splitPattern[{i}]" if is_array else "splitPattern"
        if not isinstance(item, str):
            return f"{label} 必须是字符串"
        if utf16_len(item) > SPLIT_PATTERN_MAX_LENGTH:
            return f"{label} 不能超过 {SPLIT_PATTERN_MAX_LENGTH} 字符"
        if not _pattern_compiles(item):
            return f"{label} 不是有效正则表达式"
    return None


def validate_split_pattern(value: Any) -> bool:
    """Whether ``value`` is an acceptable ``splitPattern`` (≤10 items × ≤200 UTF-16 units, each compiles)."""
    return split_pattern_error(value) is None


API_KEY_HEADER_MESSAGE = "apiKey 只能包含可打印 ASCII 字符（它作为 HTTP 头发送）"


def api_key_error(value: Any) -> bool:
    """An inline ``apiKey`` that could never be sent: not a string, or not a valid HTTP header value."""
    return js_truthy(value) and not (isinstance(value, str) and is_header_safe(value))


# ---- size gate ---------------------------------------------------------------------------------------------------


def payload_byte_length(payload: Mapping[str, Any]) -> int:
    """UTF-8 size of the compact JSON the payload is stored as (the size gate's ruler)."""
    return len(compact_json(payload).encode("utf-8", errors="surrogatepass"))


def payload_too_large_error(nbytes: int) -> ApiError:
    """400 TASK_PAYLOAD_TOO_LARGE with the reference's message and ``{bytes, maxBytes}``."""
    return api_error(
        "TASK_PAYLOAD_TOO_LARGE",
        f"任务内容 {nbytes} 字节，超过 {MAX_TASK_PAYLOAD_BYTES} 字节上限",
        {"bytes": nbytes, "maxBytes": MAX_TASK_PAYLOAD_BYTES},
    )


# ---- schedule-message ------------------------------------------------------------------------------------------


def _new_uuid() -> str:
    return str(uuidlib.uuid4())


def normalize_int(value: Any) -> Any:
    # JSON.stringify prints 5.0 as 5; keep stored integers integral.
    return int(value) if isinstance(value, float) and value.is_integer() else value


@dataclass
class ScheduleRequest:
    """A validated schedule request: what the handler needs for its later checks, the row and the payload."""

    uuid: str
    uuid_given: bool
    supersedes_uuid: str | None
    message_type: str
    next_send_at_ms: int
    immediate: bool
    cred_ref_ids: list[str]
    contact_name: str
    avatar_url: str | None = None
    message_subtype: str = "chat"
    user_message: str | None = None
    recurrence_type: str = "none"
    tz_id: str | None = None
    api_url: Any = None
    api_key: Any = None
    primary_model: Any = None
    cred_refs: JsonObject | None = None
    complete_prompt: Any = None
    messages: list[Any] | None = None
    max_tokens: Any = None
    temperature: Any = None
    split_pattern: Any = None
    llm_extra_body: JsonObject | None = None
    ownership: JsonObject = field(default_factory=dict)
    metadata: Any = field(default_factory=dict)

    @property
    def next_send_at(self) -> str:
        """The row's ``next_send_at`` in ``toISOString`` form."""
        return iso_from_ms(self.next_send_at_ms)

    @property
    def has_chat_cred_ref(self) -> bool:
        return self.cred_refs is not None and has_chat_cred_ref({"credRefs": self.cred_refs})

    @property
    def uses_llm(self) -> bool:
        """Whether delivery asks an LLM for the text (a prompt and credentials) instead of sending ``userMessage``."""
        has_prompt = js_truthy(self.complete_prompt) or bool(self.messages)
        all_inline = all(js_truthy(v) for v in (self.api_url, self.api_key, self.primary_model))
        return has_prompt and (self.has_chat_cred_ref or all_inline)

    def effective_send_ms(self, now_ms: int) -> int:
        """``now`` for ``immediate`` tasks, else the validated ``firstSendTime``."""
        return now_ms if self.immediate else self.next_send_at_ms

    def build_stored_payload(self, now_ms: int) -> StoredPayload:
        """The stored task payload, keys in the reference's order.

        Pass the same ``now_ms`` that was used for validation so ``firstSendTime`` equals the row's
        ``next_send_at`` for immediate tasks.
        """
        payload: StoredPayload = {
            "contactName": self.contact_name,
            "avatarUrl": self.avatar_url,
            "messageType": self.message_type,
            "messageSubtype": self.message_subtype,
            "userMessage": self.user_message,
            "firstSendTime": iso_from_ms(self.effective_send_ms(now_ms)),
            "recurrenceType": self.recurrence_type,
            "tzId": self.tz_id,
            "apiUrl": self.api_url,
            "apiKey": self.api_key,
            "primaryModel": self.primary_model,
            "credRefs": self.cred_refs,
            "completePrompt": self.complete_prompt,
            "messages": self.messages,
            "maxTokens": self.max_tokens,
            "temperature": self.temperature,
            "splitPattern": self.split_pattern,
            "llmExtraBody": self.llm_extra_body,
        }
        if "owner" in self.ownership:  # the client's explicit ownership, in its order
            payload["owner"] = self.ownership["owner"]
        if "kind" in self.ownership:
            payload["kind"] = self.ownership["kind"]
        if "ownerGeneration" in self.ownership:
            payload["ownerGeneration"] = self.ownership["ownerGeneration"]
        payload["metadata"] = self.metadata
        return payload


def _params_error(invalid: list[str], message: str = DEFAULT_PARAMS_MESSAGE) -> ApiError:
    return invalid_parameters(invalid=invalid, message=message)


@dataclass
class _Schedule:
    """What the rules of one schedule request have established so far (later rules read earlier results)."""

    p: JsonObject
    now_ms: int
    message_type: str = ""
    immediate: bool = False
    next_send_at_ms: int = 0
    recurrence_type: str = "none"
    tz_id: str | None = None
    has_prompt: bool = False
    has_chat_ref: bool = False
    inline: JsonObject = field(default_factory=dict)
    avatar_url: str | None = None


def _rule_contact_name(s: _Schedule) -> None:
    contact_name = s.p.get("contactName")
    if not js_truthy(contact_name) or not isinstance(contact_name, str):
        raise invalid_parameters(missing=["contactName"], message=DEFAULT_PARAMS_MESSAGE)


def _rule_message_type(s: _Schedule) -> None:
    message_type = s.p.get("messageType")
    if not isinstance(message_type, str) or message_type not in MESSAGE_TYPES:
        details: JsonObject = {}
        if "messageType" in s.p:  # JSON.stringify drops an undefined providedType
            details["providedType"] = message_type
        details["allowedTypes"] = list(MESSAGE_TYPES)
        raise api_error("INVALID_MESSAGE_TYPE", "消息类型无效", details)
    s.message_type = message_type


def _rule_immediate(s: _Schedule) -> None:
    if "immediate" in s.p and not isinstance(s.p["immediate"], bool):
        raise _params_error(["immediate"], "immediate 必须是布尔值")
    s.immediate = s.p.get("immediate") is True
    if s.immediate and s.message_type == "instant":
        raise _params_error(["immediate"], "messageType 'instant' 本就立即投递，不能再带 immediate")


def _rule_first_send_time(s: _Schedule) -> None:
    first_send = s.p.get("firstSendTime")
    if s.immediate:
        # Only the format is checked: the client's local wish, not a schedule.
        if first_send is not None and parse_iso_ms(first_send) is None:
            raise api_error("INVALID_TIMESTAMP", "时间格式无效", {"field": "firstSendTime"})
        s.next_send_at_ms = s.now_ms
        return
    parsed = parse_iso_ms(first_send) if js_truthy(first_send) else None
    if parsed is None:
        raise api_error("INVALID_TIMESTAMP", "时间格式无效", {"field": "firstSendTime"})
    if parsed <= s.now_ms:
        raise api_error(
            "INVALID_TIMESTAMP", "时间必须在未来", {"field": "firstSendTime", "reason": "must be in the future"}
        )
    s.next_send_at_ms = parsed


def _rule_supersedes(s: _Schedule) -> None:
    supersedes = s.p.get("supersedesUuid")
    if supersedes is None:
        return
    if not is_valid_uuid(supersedes):
        raise _params_error(["supersedesUuid"], "supersedesUuid 必须是合法 UUID")
    if js_truthy(s.p.get("uuid")) and supersedes == s.p.get("uuid"):
        raise _params_error(["supersedesUuid"], "supersedesUuid 不能与本条任务的 uuid 相同")


def _rule_no_push_subscription(s: _Schedule) -> None:
    if "pushSubscription" in s.p:
        raise api_error(
            "PUSH_SUBSCRIPTION_NOT_ACCEPTED",
            "pushSubscription 不再随任务提交，改用 PUT /push-subscription 登记一份用户级订阅",
            {"invalidFields": ["pushSubscription"]},
        )


def _rule_recurrence(s: _Schedule) -> None:
    recurrence = s.p.get("recurrenceType")
    if js_truthy(recurrence) and (not isinstance(recurrence, str) or recurrence not in RECURRENCE_TYPES):
        raise _params_error(["recurrenceType"])
    s.recurrence_type = (
        recurrence if isinstance(recurrence, str) and js_truthy(recurrence) else "none"
    )  # missing means none, on every path


def _rule_tz(s: _Schedule) -> None:
    if s.p.get("tzId") is not None:
        s.tz_id = canonical_tz(s.p["tzId"])
        if s.tz_id is None:
            raise _params_error(["tzId"], "tzId 必须是可用的 IANA 时区 id（如 Asia/Tokyo）")


def _rule_max_tokens(s: _Schedule) -> None:
    max_tokens = s.p.get("maxTokens")
    if max_tokens is not None and not is_positive_integer(max_tokens):
        raise _params_error(["maxTokens"])


def _rule_user_message(s: _Schedule) -> None:
    user_message = s.p.get("userMessage")
    if user_message is not None and not isinstance(user_message, str):
        raise _params_error(["userMessage (must be a string)"])
    if s.message_type == "fixed" and not js_truthy(user_message):
        raise invalid_parameters(missing=["userMessage (required for fixed type)"], message=DEFAULT_PARAMS_MESSAGE)


def _rule_prompt(s: _Schedule) -> None:
    complete_prompt, messages = s.p.get("completePrompt"), s.p.get("messages")
    has_complete_prompt = complete_prompt is not None and complete_prompt != ""
    has_messages = messages is not None
    if has_complete_prompt and has_messages:
        raise _params_error(
            ["completePrompt", "messages"],
            "exactly one of `completePrompt` or `messages` must be provided（两者不能同时出现）",
        )
    if has_messages:
        messages_error = validate_messages_array(messages)
        if messages_error:
            raise _params_error(["messages"], messages_error)
    s.has_prompt = has_complete_prompt or has_messages


def _rule_credentials(s: _Schedule) -> None:
    cred_refs = s.p.get("credRefs")
    if cred_refs is not None:
        refs_error = cred_refs_error(cred_refs)
        if refs_error:
            raise _params_error(["credRefs"], refs_error)
    s.has_chat_ref = has_chat_cred_ref(s.p)
    s.inline = {name: s.p.get(name) for name in INLINE_CREDENTIAL_FIELDS}
    if s.has_chat_ref and any(js_truthy(v) for v in s.inline.values()):
        raise _params_error(
            ["credRefs.chat", *INLINE_CREDENTIAL_FIELDS],
            "credRefs.chat 与内联 apiUrl / apiKey / primaryModel 不能同时提供（二选一）",
        )


def _rule_ai_config(s: _Schedule) -> None:
    if s.message_type not in ("prompted", "auto"):
        return
    missing: list[str] = []
    if not s.has_prompt:
        missing.append("completePrompt or messages")
    if not s.has_chat_ref:
        if not any(js_truthy(v) for v in s.inline.values()):
            missing.append("credRefs.chat or (apiUrl + apiKey + primaryModel)")
        else:
            missing.extend(name for name, v in s.inline.items() if not js_truthy(v))
    if missing:
        raise invalid_parameters(missing=missing, message=DEFAULT_PARAMS_MESSAGE)


def _rule_instant(s: _Schedule) -> None:
    if s.message_type != "instant":
        return
    recurrence = s.p.get("recurrenceType")
    if js_truthy(recurrence) and recurrence != "none":
        raise _params_error(
            ['recurrenceType (must be "none" for instant type)'], "instant 类型的 recurrenceType 必须为 none"
        )
    has_ai_config = s.has_prompt and (s.has_chat_ref or all(js_truthy(v) for v in s.inline.values()))
    if not has_ai_config and not js_truthy(s.p.get("userMessage")):
        raise invalid_parameters(
            missing=["userMessage or ((completePrompt | messages) + (credRefs.chat | apiUrl + apiKey + primaryModel))"],
            message="instant 类型必须提供 userMessage 或完整的 AI 配置",
        )


def _rule_temperature(s: _Schedule) -> None:
    temperature = s.p.get("temperature")
    if temperature is not None and not is_finite_number(temperature):
        raise _params_error(["temperature (must be a finite number)"])


def _rule_avatar(s: _Schedule) -> None:
    avatar = s.p.get("avatarUrl")
    s.avatar_url = avatar if avatar_url_error(avatar) is None and js_truthy(avatar) else None  # soft strip


def _rule_uuid(s: _Schedule) -> None:
    given = s.p.get("uuid")
    if js_truthy(given) and not (is_valid_uuid(given) and utf16_len(str(given)) <= TASK_UUID_MAX_LENGTH):
        raise _params_error(["uuid (invalid UUID format)"])


def _rule_subtype(s: _Schedule) -> None:
    subtype = s.p.get("messageSubtype")
    if subtype is not None and not isinstance(subtype, str):
        raise _params_error(["messageSubtype"])


def _rule_split_pattern(s: _Schedule) -> None:
    split_error = split_pattern_error(s.p.get("splitPattern"))
    if split_error:
        raise _params_error(["splitPattern"], split_error)


def _rule_extra_body(s: _Schedule) -> None:
    extra_body = s.p.get("llmExtraBody")
    if extra_body is not None and not is_plain_object(extra_body):
        raise _params_error(["llmExtraBody"], "llmExtraBody 必须是普通对象")


def _rule_api_key(s: _Schedule) -> None:
    if api_key_error(s.inline.get("apiKey")):
        raise _params_error(["apiKey"], API_KEY_HEADER_MESSAGE)


# The reference's order: clients observe which error wins when several fields are bad. Rules past the reference's
# (the apiKey header check) come last so they never change which error an existing request gets.
SCHEDULE_RULES: tuple[Callable[[_Schedule], None], ...] = (
    _rule_contact_name,
    _rule_message_type,
    _rule_immediate,
    _rule_first_send_time,
    _rule_supersedes,
    _rule_no_push_subscription,
    _rule_recurrence,
    _rule_tz,
    _rule_max_tokens,
    _rule_user_message,
    _rule_prompt,
    _rule_credentials,
    _rule_ai_config,
    _rule_instant,
    _rule_temperature,
    _rule_avatar,
    _rule_uuid,
    _rule_subtype,
    _rule_split_pattern,
    _rule_extra_body,
    _rule_api_key,
)


def validate_schedule_payload(
    payload: JsonObject,
    *,
    now_ms: int,
    new_uuid: Callable[[], str] = _new_uuid,
) -> ScheduleRequest:
    """Validate a decrypted schedule request in the reference's order; raise the first error."""
    if not is_plain_object(payload):
        raise api_error("INVALID_PAYLOAD_FORMAT")
    state = _Schedule(payload, now_ms)
    for rule in SCHEDULE_RULES:
        rule(state)
    return _schedule_request(state, new_uuid)


def _truthy_or_none(value: Any) -> Any:
    return value if js_truthy(value) else None


def _schedule_request(s: _Schedule, new_uuid: Callable[[], str]) -> ScheduleRequest:
    p, inline = s.p, s.inline
    given_uuid, messages, metadata = p.get("uuid"), p.get("messages"), p.get("metadata")
    cred_refs = p.get("credRefs")
    return ScheduleRequest(
        uuid=str(given_uuid) if js_truthy(given_uuid) else new_uuid(),
        uuid_given=js_truthy(given_uuid),
        supersedes_uuid=_truthy_or_none(p.get("supersedesUuid")),
        message_type=s.message_type,
        next_send_at_ms=s.next_send_at_ms,
        immediate=s.immediate,
        cred_ref_ids=distinct_cred_ids(cred_refs),
        contact_name=p["contactName"],
        avatar_url=s.avatar_url,
        message_subtype=cast(str, p.get("messageSubtype")) if js_truthy(p.get("messageSubtype")) else "chat",
        user_message=_truthy_or_none(p.get("userMessage")),
        recurrence_type=s.recurrence_type,
        tz_id=s.tz_id,
        api_url=_truthy_or_none(inline["apiUrl"]),
        api_key=_truthy_or_none(inline["apiKey"]),
        primary_model=_truthy_or_none(inline["primaryModel"]),
        cred_refs=cred_refs,
        complete_prompt=_truthy_or_none(p.get("completePrompt")),
        messages=messages if isinstance(messages, list) else None,
        max_tokens=normalize_int(p.get("maxTokens")),
        temperature=p.get("temperature"),
        split_pattern=p.get("splitPattern"),
        llm_extra_body=p.get("llmExtraBody"),
        ownership={key: p[key] for key in ("owner", "kind", "ownerGeneration") if key in p},
        metadata=metadata if js_truthy(metadata) else {},
    )
