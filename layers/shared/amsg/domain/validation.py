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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
from amsg.domain.timezones import canonical_tz
from amsg.domain.urls import avatar_url_error
from amsg.errors import ApiError, api_error, invalid_parameters
from amsg.timeutil import iso_from_ms, parse_iso_ms

# ---- limits (the reference's) --------------------------------------------------------------------------------

MESSAGE_TYPES = ("fixed", "prompted", "auto", "instant")
RECURRENCE_TYPES = ("none", "daily", "weekly")
LLM_MESSAGE_ROLES = ("system", "user", "assistant", "tool")

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


def validate_messages_array(value: Any) -> str | None:
    """The push-subscription shape rules; returns the reference's English message for the first problem, or None."""
    if not isinstance(value, list) or not value:
        return "messages must be a non-empty array"
    for i, message in enumerate(value):
        if not is_plain_object(message):
            return f"messages[{i}] must be an object"
        role = message.get("role")
        if not isinstance(role, str) or role not in LLM_MESSAGE_ROLES:
            return f"messages[{i}].role must be one of system / user / assistant / tool"
        tool_calls = message.get("tool_calls")
        if role == "assistant" and isinstance(tool_calls, list) and tool_calls:
            # An assistant turn that carries tool calls may have empty content (agentic replay).
            for j, call in enumerate(tool_calls):
                if (
                    not is_plain_object(call)
                    or not isinstance(call.get("id"), str)
                    or not js_truthy(call.get("function"))
                ):
                    return (
                        f"messages[{i}].tool_calls[{j}] is malformed "
                        "(expected { id, type:'function', function:{ name, arguments } })"
                    )
            continue
        content = message.get("content")
        if role == "tool":
            # Empty tool output is legitimate (a search with no hits), but the reference id is mandatory.
            if not isinstance(content, str | list):
                return f"messages[{i}].content (tool) must be a string or an array"
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                return f"messages[{i}].tool_call_id is required (tool messages must reference a prior tool_call)"
            continue
        if isinstance(content, str):
            if not content:
                return f"messages[{i}].content must be a non-empty string"
        elif isinstance(content, list):
            if not content:
                return f"messages[{i}].content array must be non-empty"
        else:
            return f"messages[{i}].content must be a non-empty string or a non-empty array"
    return None


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


def payload_byte_length(payload: dict[str, Any]) -> int:
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
    cred_refs: dict[str, Any] | None = None
    complete_prompt: Any = None
    messages: list[Any] | None = None
    max_tokens: Any = None
    temperature: Any = None
    split_pattern: Any = None
    llm_extra_body: dict[str, Any] | None = None
    ownership: dict[str, Any] = field(default_factory=dict)
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

    def build_stored_payload(self, now_ms: int) -> dict[str, Any]:
        """The stored task payload, keys in the reference's order.

        Pass the same ``now_ms`` that was used for validation so ``firstSendTime`` equals the row's
        ``next_send_at`` for immediate tasks.
        """
        payload: dict[str, Any] = {
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
        payload.update(self.ownership)
        payload["metadata"] = self.metadata
        return payload


def _params_error(invalid: list[str], message: str = DEFAULT_PARAMS_MESSAGE) -> ApiError:
    return invalid_parameters(invalid=invalid, message=message)


def validate_schedule_payload(
    payload: dict[str, Any],
    *,
    now_ms: int,
    new_uuid: Callable[[], str] = _new_uuid,
) -> ScheduleRequest:
    """Validate a decrypted schedule request in the reference's order; raise the first error."""
    if not is_plain_object(payload):
        raise api_error("INVALID_PAYLOAD_FORMAT")
    p = payload

    contact_name = p.get("contactName")
    if not js_truthy(contact_name) or not isinstance(contact_name, str):
        raise invalid_parameters(missing=["contactName"], message=DEFAULT_PARAMS_MESSAGE)

    message_type = p.get("messageType")
    if not isinstance(message_type, str) or message_type not in MESSAGE_TYPES:
        details: dict[str, Any] = {}
        if "messageType" in p:  # JSON.stringify drops an undefined providedType
            details["providedType"] = message_type
        details["allowedTypes"] = list(MESSAGE_TYPES)
        raise api_error("INVALID_MESSAGE_TYPE", "消息类型无效", details)

    if "immediate" in p and not isinstance(p["immediate"], bool):
        raise _params_error(["immediate"], "immediate 必须是布尔值")
    immediate = p.get("immediate") is True
    if immediate and message_type == "instant":
        raise _params_error(["immediate"], "messageType 'instant' 本就立即投递，不能再带 immediate")

    first_send = p.get("firstSendTime")
    if immediate:
        # Only the format is checked: the client's local wish, not a schedule.
        if first_send is not None and parse_iso_ms(first_send) is None:
            raise api_error("INVALID_TIMESTAMP", "时间格式无效", {"field": "firstSendTime"})
        next_send_at_ms = now_ms
    else:
        parsed = parse_iso_ms(first_send) if js_truthy(first_send) else None
        if parsed is None:
            raise api_error("INVALID_TIMESTAMP", "时间格式无效", {"field": "firstSendTime"})
        if parsed <= now_ms:
            raise api_error(
                "INVALID_TIMESTAMP",
                "时间必须在未来",
                {"field": "firstSendTime", "reason": "must be in the future"},
            )
        next_send_at_ms = parsed

    supersedes = p.get("supersedesUuid")
    if supersedes is not None:
        if not is_valid_uuid(supersedes):
            raise _params_error(["supersedesUuid"], "supersedesUuid 必须是合法 UUID")
        if js_truthy(p.get("uuid")) and supersedes == p.get("uuid"):
            raise _params_error(["supersedesUuid"], "supersedesUuid 不能与本条任务的 uuid 相同")

    if "pushSubscription" in p:
        raise api_error(
            "PUSH_SUBSCRIPTION_NOT_ACCEPTED",
            "pushSubscription 不再随任务提交，改用 PUT /push-subscription 登记一份用户级订阅",
            {"invalidFields": ["pushSubscription"]},
        )

    recurrence = p.get("recurrenceType")
    if js_truthy(recurrence) and (not isinstance(recurrence, str) or recurrence not in RECURRENCE_TYPES):
        raise _params_error(["recurrenceType"])
    recurrence_type = recurrence if js_truthy(recurrence) else "none"  # missing means none, on every path

    tz_id: str | None = None
    if p.get("tzId") is not None:
        tz_id = canonical_tz(p["tzId"])
        if tz_id is None:
            raise _params_error(["tzId"], "tzId 必须是可用的 IANA 时区 id（如 Asia/Tokyo）")

    max_tokens = p.get("maxTokens")
    if max_tokens is not None and not is_positive_integer(max_tokens):
        raise _params_error(["maxTokens"])

    user_message = p.get("userMessage")
    if user_message is not None and not isinstance(user_message, str):
        raise _params_error(["userMessage (must be a string)"])
    if message_type == "fixed" and not js_truthy(user_message):
        raise invalid_parameters(missing=["userMessage (required for fixed type)"], message=DEFAULT_PARAMS_MESSAGE)

    complete_prompt = p.get("completePrompt")
    messages = p.get("messages")
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
    has_prompt = has_complete_prompt or has_messages

    cred_refs = p.get("credRefs")
    if cred_refs is not None:
        refs_error = cred_refs_error(cred_refs)
        if refs_error:
            raise _params_error(["credRefs"], refs_error)
    has_chat_ref = has_chat_cred_ref(p)
    inline = {name: p.get(name) for name in INLINE_CREDENTIAL_FIELDS}
    any_inline = any(js_truthy(v) for v in inline.values())
    all_inline = all(js_truthy(v) for v in inline.values())
    if has_chat_ref and any_inline:
        raise _params_error(
            ["credRefs.chat", *INLINE_CREDENTIAL_FIELDS],
            "credRefs.chat 与内联 apiUrl / apiKey / primaryModel 不能同时提供（二选一）",
        )

    if message_type in ("prompted", "auto"):
        missing: list[str] = []
        if not has_prompt:
            missing.append("completePrompt or messages")
        if not has_chat_ref:
            if not any_inline:
                missing.append("credRefs.chat or (apiUrl + apiKey + primaryModel)")
            else:
                missing.extend(name for name, v in inline.items() if not js_truthy(v))
        if missing:
            raise invalid_parameters(missing=missing, message=DEFAULT_PARAMS_MESSAGE)

    if message_type == "instant":
        if js_truthy(recurrence) and recurrence != "none":
            raise _params_error(
                ['recurrenceType (must be "none" for instant type)'], "instant 类型的 recurrenceType 必须为 none"
            )
        has_ai_config = has_prompt and (has_chat_ref or all_inline)
        if not has_ai_config and not js_truthy(user_message):
            raise invalid_parameters(
                missing=[
                    "userMessage or ((completePrompt | messages) + (credRefs.chat | apiUrl + apiKey + primaryModel))"
                ],
                message="instant 类型必须提供 userMessage 或完整的 AI 配置",
            )

    temperature = p.get("temperature")
    if temperature is not None and not is_finite_number(temperature):
        raise _params_error(["temperature (must be a finite number)"])

    avatar = p.get("avatarUrl")
    avatar_url = avatar if avatar_url_error(avatar) is None and js_truthy(avatar) else None  # soft strip

    given_uuid = p.get("uuid")
    if js_truthy(given_uuid) and not (is_valid_uuid(given_uuid) and utf16_len(given_uuid) <= TASK_UUID_MAX_LENGTH):
        raise _params_error(["uuid (invalid UUID format)"])

    subtype = p.get("messageSubtype")
    if subtype is not None and not isinstance(subtype, str):
        raise _params_error(["messageSubtype"])

    split_error = split_pattern_error(p.get("splitPattern"))
    if split_error:
        raise _params_error(["splitPattern"], split_error)

    extra_body = p.get("llmExtraBody")
    if extra_body is not None and not is_plain_object(extra_body):
        raise _params_error(["llmExtraBody"], "llmExtraBody 必须是普通对象")

    if api_key_error(inline["apiKey"]):
        raise _params_error(["apiKey"], API_KEY_HEADER_MESSAGE)

    metadata = p.get("metadata")
    return ScheduleRequest(
        uuid=given_uuid if js_truthy(given_uuid) else new_uuid(),
        uuid_given=js_truthy(given_uuid),
        supersedes_uuid=supersedes if js_truthy(supersedes) else None,
        message_type=message_type,
        next_send_at_ms=next_send_at_ms,
        immediate=immediate,
        cred_ref_ids=distinct_cred_ids(cred_refs),
        contact_name=contact_name,
        avatar_url=avatar_url,
        message_subtype=subtype if js_truthy(subtype) else "chat",
        user_message=user_message if js_truthy(user_message) else None,
        recurrence_type=recurrence_type,
        tz_id=tz_id,
        api_url=inline["apiUrl"] if js_truthy(inline["apiUrl"]) else None,
        api_key=inline["apiKey"] if js_truthy(inline["apiKey"]) else None,
        primary_model=inline["primaryModel"] if js_truthy(inline["primaryModel"]) else None,
        cred_refs=cred_refs,
        complete_prompt=complete_prompt if js_truthy(complete_prompt) else None,
        messages=messages if isinstance(messages, list) else None,
        max_tokens=normalize_int(max_tokens),
        temperature=temperature,
        split_pattern=p.get("splitPattern"),
        llm_extra_body=extra_body,
        ownership={key: p[key] for key in ("owner", "kind", "ownerGeneration") if key in p},
        metadata=metadata if js_truthy(metadata) else {},
    )
