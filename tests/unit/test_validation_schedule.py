"""POST /schedule-message validation: every row, the order, JS truthiness, the stored payload."""

import json
import math

import pytest
from amsg.crypto import compact_json
from amsg.domain.urls import avatar_url_error, is_absolute_url
from amsg.domain.validation import (
    MAX_TASK_PAYLOAD_BYTES,
    ScheduleRequest,
    cred_refs_error,
    has_chat_cred_ref,
    payload_byte_length,
    payload_too_large_error,
    validate_cred_id,
    validate_cred_refs,
    validate_schedule_payload,
)
from amsg.errors import ApiError
from amsg.timeutil import parse_iso_ms

NOW = parse_iso_ms("2030-01-01T00:00:00.000Z")
FUTURE = "2030-01-02T00:00:00.000Z"
FUTURE_MS = parse_iso_ms(FUTURE)
UUID_A = "11111111-1111-4111-8111-111111111111"
UUID_B = "22222222-2222-1222-9222-222222222222"
DEFAULT_MSG = "缺少必需参数或参数格式错误"
INLINE = {"apiUrl": "https://llm.example/v1", "apiKey": "sk-x", "primaryModel": "m"}


def fixed(**extra):
    return {"contactName": "Rei", "messageType": "fixed", "firstSendTime": FUTURE, "userMessage": "hi", **extra}


def prompted(**extra):
    return {"contactName": "Rei", "messageType": "prompted", "firstSendTime": FUTURE, "completePrompt": "p", **extra}


def validate(payload, now=NOW):
    return validate_schedule_payload(payload, now_ms=now, new_uuid=lambda: UUID_A)


def error_of(payload, now=NOW) -> ApiError:
    with pytest.raises(ApiError) as info:
        validate(payload, now)
    return info.value


def assert_error(payload, code, details, message=None, status=400):
    err = error_of(payload)
    assert (err.status, err.code, err.details) == (status, code, details)
    if message is not None:
        assert err.message == message
    return err


# ---- contactName -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", 0, False, 123, ["Rei"], {"a": 1}, True])
def test_contact_name_missing_or_not_string(value):
    payload = fixed(contactName=value)
    assert_error(payload, "INVALID_PARAMETERS", {"missingFields": ["contactName"]}, DEFAULT_MSG)


def test_contact_name_absent():
    payload = fixed()
    del payload["contactName"]
    assert_error(payload, "INVALID_PARAMETERS", {"missingFields": ["contactName"]})


def test_contact_name_whitespace_is_truthy():
    assert validate(fixed(contactName=" ")).contact_name == " "


# ---- messageType -----------------------------------------------------------------------------------------------

ALLOWED = ["fixed", "prompted", "auto", "instant"]


@pytest.mark.parametrize("value", ["", "FIXED", "other", 1, None, ["fixed"]])
def test_message_type_invalid(value):
    err = assert_error(
        fixed(messageType=value), "INVALID_MESSAGE_TYPE", {"providedType": value, "allowedTypes": ALLOWED}
    )
    assert err.message == "消息类型无效"


def test_message_type_absent_omits_provided_type():
    payload = fixed()
    del payload["messageType"]
    assert_error(payload, "INVALID_MESSAGE_TYPE", {"allowedTypes": ALLOWED})


# ---- immediate -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, 1, 0, "true", "", []])
def test_immediate_must_be_boolean(value):
    assert_error(
        fixed(immediate=value), "INVALID_PARAMETERS", {"invalidFields": ["immediate"]}, "immediate 必须是布尔值"
    )


def test_immediate_with_instant_rejected():
    payload = {"contactName": "R", "messageType": "instant", "immediate": True, "userMessage": "x"}
    assert_error(payload, "INVALID_PARAMETERS", {"invalidFields": ["immediate"]})


def test_immediate_false_with_instant_is_fine():
    req = validate(
        {"contactName": "R", "messageType": "instant", "immediate": False, "firstSendTime": FUTURE, "userMessage": "x"}
    )
    assert req.immediate is False
    assert req.next_send_at_ms == FUTURE_MS


def test_immediate_without_first_send_time_uses_now():
    payload = fixed(immediate=True)
    del payload["firstSendTime"]
    req = validate(payload)
    assert req.immediate is True
    assert req.next_send_at_ms == NOW
    assert req.next_send_at == "2030-01-01T00:00:00.000Z"


@pytest.mark.parametrize("value", [None, "2000-01-01T00:00:00Z", FUTURE])
def test_immediate_accepts_any_parsable_or_null_first_send_time(value):
    req = validate(fixed(immediate=True, firstSendTime=value))
    assert req.next_send_at_ms == NOW  # the past is fine too: only the format is checked


@pytest.mark.parametrize("value", ["", "tomorrow", 12345, "2030-13-01"])
def test_immediate_still_format_checks(value):
    assert_error(
        fixed(immediate=True, firstSendTime=value), "INVALID_TIMESTAMP", {"field": "firstSendTime"}, "时间格式无效"
    )


# ---- firstSendTime ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [None, "", 0, "not a date", 1893456000000, "Tue, 01 Jan 2030 00:00:00 GMT", "2030-02-30"]
)
def test_first_send_time_format(value):
    assert_error(fixed(firstSendTime=value), "INVALID_TIMESTAMP", {"field": "firstSendTime"}, "时间格式无效")


def test_first_send_time_absent():
    payload = fixed()
    del payload["firstSendTime"]
    assert_error(payload, "INVALID_TIMESTAMP", {"field": "firstSendTime"})


@pytest.mark.parametrize("value", ["2030-01-01T00:00:00.000Z", "2029-12-31T23:59:59.999Z", "2030-01-01T08:00:00+08:00"])
def test_first_send_time_must_be_strictly_future(value):
    assert_error(
        fixed(firstSendTime=value),
        "INVALID_TIMESTAMP",
        {"field": "firstSendTime", "reason": "must be in the future"},
        "时间必须在未来",
    )


def test_first_send_time_future_applies_to_instant():
    payload = {"contactName": "R", "messageType": "instant", "firstSendTime": "2029-01-01", "userMessage": "x"}
    assert_error(payload, "INVALID_TIMESTAMP", {"field": "firstSendTime", "reason": "must be in the future"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2030-01-01T00:00:00.001Z", "2030-01-01T00:00:00.001Z"),
        ("2030-01-01T09:00:00.001+09:00", "2030-01-01T00:00:00.001Z"),
        ("2030-01-02", "2030-01-02T00:00:00.000Z"),
        ("2030-01-02T03:04:05", "2030-01-02T03:04:05.000Z"),
        ("2030-01-02T03:04:05.123456Z", "2030-01-02T03:04:05.123Z"),
    ],
)
def test_first_send_time_normalised(value, expected):
    req = validate(fixed(firstSendTime=value))
    assert req.next_send_at == expected
    assert req.build_stored_payload(NOW)["firstSendTime"] == expected


# ---- supersedesUuid --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "nope", 123, ["x"], UUID_A + "0", "g" * 8 + UUID_A[8:], UUID_A + "\n"])
def test_supersedes_uuid_format(value):
    assert_error(fixed(supersedesUuid=value), "INVALID_PARAMETERS", {"invalidFields": ["supersedesUuid"]})


def test_supersedes_uuid_same_as_uuid():
    assert_error(fixed(uuid=UUID_A, supersedesUuid=UUID_A), "INVALID_PARAMETERS", {"invalidFields": ["supersedesUuid"]})


def test_supersedes_uuid_any_version_and_case():
    req = validate(fixed(uuid=UUID_A, supersedesUuid=UUID_B.upper()))
    assert req.supersedes_uuid == UUID_B.upper()


def test_supersedes_uuid_case_differs_from_uuid_is_allowed():
    # strict string equality, as in the reference
    lower = "abcdefab-cdef-4abc-8def-abcdefabcdef"
    assert validate(fixed(uuid=lower, supersedesUuid=lower.upper())).supersedes_uuid == lower.upper()


def test_supersedes_null_ignored():
    assert validate(fixed(supersedesUuid=None)).supersedes_uuid is None


# ---- pushSubscription ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, {}, {"endpoint": "https://push"}, ""])
def test_push_subscription_must_be_absent(value):
    assert_error(
        fixed(pushSubscription=value), "PUSH_SUBSCRIPTION_NOT_ACCEPTED", {"invalidFields": ["pushSubscription"]}
    )


# ---- recurrenceType --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["monthly", "Daily", 1, True, ["daily"]])
def test_recurrence_type_invalid(value):
    assert_error(fixed(recurrenceType=value), "INVALID_PARAMETERS", {"invalidFields": ["recurrenceType"]}, DEFAULT_MSG)


@pytest.mark.parametrize("value", [None, "", 0, False])
def test_recurrence_type_falsy_means_none(value):
    assert validate(fixed(recurrenceType=value)).build_stored_payload(NOW)["recurrenceType"] == "none"


def test_recurrence_type_missing_means_none():
    assert validate(fixed()).recurrence_type == "none"


@pytest.mark.parametrize("value", ["none", "daily", "weekly"])
def test_recurrence_type_valid(value):
    assert validate(fixed(recurrenceType=value)).recurrence_type == value


# ---- tzId ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "Nowhere/Fake", 9, True, ["UTC"]])
def test_tz_invalid(value):
    assert_error(fixed(tzId=value), "INVALID_PARAMETERS", {"invalidFields": ["tzId"]})


def test_tz_canonicalised():
    assert validate(fixed(tzId="asia/TOKYO")).build_stored_payload(NOW)["tzId"] == "Asia/Tokyo"


def test_tz_null():
    assert validate(fixed(tzId=None)).tz_id is None


# ---- maxTokens -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 1.5, "10", True, False, math.inf, math.nan, [], {}])
def test_max_tokens_invalid(value):
    assert_error(fixed(maxTokens=value), "INVALID_PARAMETERS", {"invalidFields": ["maxTokens"]})


@pytest.mark.parametrize(("value", "stored"), [(1, 1), (4096, 4096), (5.0, 5), (None, None)])
def test_max_tokens_valid(value, stored):
    out = validate(fixed(maxTokens=value)).build_stored_payload(NOW)["maxTokens"]
    assert out == stored
    assert type(out) is type(stored)


# ---- userMessage -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, True, ["x"], {"t": 1}, 0, False])
def test_user_message_must_be_string(value):
    assert_error(fixed(userMessage=value), "INVALID_PARAMETERS", {"invalidFields": ["userMessage (must be a string)"]})


@pytest.mark.parametrize("value", ["", None])
def test_fixed_requires_truthy_user_message(value):
    assert_error(
        fixed(userMessage=value), "INVALID_PARAMETERS", {"missingFields": ["userMessage (required for fixed type)"]}
    )


def test_fixed_user_message_absent():
    payload = fixed()
    del payload["userMessage"]
    assert_error(payload, "INVALID_PARAMETERS", {"missingFields": ["userMessage (required for fixed type)"]})


# ---- completePrompt / messages ---------------------------------------------------------------------------------


def test_prompt_both_present():
    err = assert_error(
        prompted(messages=[{"role": "user", "content": "x"}], **INLINE),
        "INVALID_PARAMETERS",
        {"invalidFields": ["completePrompt", "messages"]},
    )
    assert "exactly one of `completePrompt` or `messages`" in err.message


def test_empty_complete_prompt_counts_as_absent():
    req = validate(prompted(completePrompt="", messages=[{"role": "user", "content": "x"}], **INLINE))
    stored = req.build_stored_payload(NOW)
    assert stored["completePrompt"] is None
    assert stored["messages"] == [{"role": "user", "content": "x"}]


def test_both_checked_even_for_fixed():
    assert_error(
        fixed(completePrompt="p", messages=[]), "INVALID_PARAMETERS", {"invalidFields": ["completePrompt", "messages"]}
    )


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "messages must be a non-empty array"),
        ({"role": "user"}, "messages must be a non-empty array"),
        ("hi", "messages must be a non-empty array"),
        ([None], "messages[0] must be an object"),
        ([{"role": "user", "content": "a"}, []], "messages[1] must be an object"),
        ([{"role": "bot", "content": "a"}], "messages[0].role must be one of system / user / assistant / tool"),
        ([{"content": "a"}], "messages[0].role must be one of system / user / assistant / tool"),
        ([{"role": "user", "content": ""}], "messages[0].content must be a non-empty string"),
        ([{"role": "user", "content": []}], "messages[0].content array must be non-empty"),
        ([{"role": "system"}], "messages[0].content must be a non-empty string or a non-empty array"),
        (
            [{"role": "assistant", "content": None}],
            "messages[0].content must be a non-empty string or a non-empty array",
        ),
        (
            [{"role": "tool", "content": None, "tool_call_id": "c"}],
            "messages[0].content (tool) must be a string or an array",
        ),
        (
            [{"role": "tool", "content": ""}],
            "messages[0].tool_call_id is required (tool messages must reference a prior tool_call)",
        ),
        (
            [{"role": "tool", "content": "x", "tool_call_id": ""}],
            "messages[0].tool_call_id is required (tool messages must reference a prior tool_call)",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c1", "function": {}}, {"id": 5, "function": {"name": "f"}}]}],
            "messages[0].tool_calls[1] is malformed (expected { id, type:'function', function:{ name, arguments } })",
        ),
    ],
)
def test_messages_shape_errors(messages, message):
    payload = prompted(messages=messages, **INLINE)
    del payload["completePrompt"]
    assert_error(payload, "INVALID_PARAMETERS", {"invalidFields": ["messages"]}, message)


def test_messages_agentic_replay_shapes_accepted():
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
        {"role": "tool", "content": "", "tool_call_id": "c1"},
        {"role": "assistant", "content": "done"},
    ]
    payload = prompted(messages=messages, **INLINE)
    del payload["completePrompt"]
    assert validate(payload).build_stored_payload(NOW)["messages"] == messages


# ---- credRefs --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "refs",
    [
        {},
        [],
        "chat",
        0,
        False,
        {"chat": ""},
        {"chat": 5},
        {"chat": "x" * 129},
        {"chat": "a\x00b"},
        {"chat": "a\x1fb"},
        {"chat": "a\x7fb"},
        {"x" * 65: "id"},
        {"pur\npose": "id"},
        {f"p{i}": "id" for i in range(17)},
        {"chat": "😀" * 65},  # 130 UTF-16 units
    ],
)
def test_cred_refs_shape(refs):
    err = assert_error(prompted(credRefs=refs), "INVALID_PARAMETERS", {"invalidFields": ["credRefs"]})
    assert err.message == cred_refs_error(refs)


def test_cred_refs_limits_inclusive():
    refs = {f"p{i}": f"id{i % 3}" for i in range(14)} | {"x" * 64: "y" * 128, "": "😀" * 64}
    assert len(refs) == 16
    req = validate(fixed(credRefs=refs))
    assert req.cred_ref_ids == ["id0", "id1", "id2", "y" * 128, "😀" * 64]
    assert req.build_stored_payload(NOW)["credRefs"] is refs


def test_cred_refs_chat_with_inline_conflict():
    for name in ("apiUrl", "apiKey", "primaryModel"):
        assert_error(
            prompted(credRefs={"chat": "global/chat"}, **{name: "v"}),
            "INVALID_PARAMETERS",
            {"invalidFields": ["credRefs.chat", "apiUrl", "apiKey", "primaryModel"]},
        )


def test_non_chat_refs_with_inline_ok():
    req = validate(prompted(credRefs={"summary": "g/sum"}, **INLINE))
    assert req.cred_ref_ids == ["g/sum"]
    assert not req.has_chat_cred_ref


def test_cred_refs_chat_with_falsy_inline_ok():
    req = validate(prompted(credRefs={"chat": "c"}, apiUrl="", apiKey=None, primaryModel=0))
    stored = req.build_stored_payload(NOW)
    assert (stored["apiUrl"], stored["apiKey"], stored["primaryModel"]) == (None, None, None)
    assert req.has_chat_cred_ref


def test_cred_refs_null_ignored():
    req = validate(fixed(credRefs=None))
    assert req.cred_ref_ids == []
    assert req.build_stored_payload(NOW)["credRefs"] is None


# ---- prompted / auto requirement -------------------------------------------------------------------------------


@pytest.mark.parametrize("mtype", ["prompted", "auto"])
def test_ai_nothing_given(mtype):
    payload = {"contactName": "R", "messageType": mtype, "firstSendTime": FUTURE}
    assert_error(
        payload,
        "INVALID_PARAMETERS",
        {"missingFields": ["completePrompt or messages", "credRefs.chat or (apiUrl + apiKey + primaryModel)"]},
        DEFAULT_MSG,
    )


def test_ai_partial_inline_lists_individual_fields():
    assert_error(prompted(apiKey="k"), "INVALID_PARAMETERS", {"missingFields": ["apiUrl", "primaryModel"]})
    assert_error(prompted(apiUrl="u", apiKey="", primaryModel="m"), "INVALID_PARAMETERS", {"missingFields": ["apiKey"]})


def test_ai_prompt_missing_only():
    payload = prompted(**INLINE)
    del payload["completePrompt"]
    assert_error(payload, "INVALID_PARAMETERS", {"missingFields": ["completePrompt or messages"]})


def test_ai_with_chat_ref():
    req = validate(
        {
            "contactName": "R",
            "messageType": "auto",
            "firstSendTime": FUTURE,
            "completePrompt": "p",
            "credRefs": {"chat": "c"},
        }
    )
    assert req.cred_ref_ids == ["c"]


def test_ai_with_non_chat_ref_still_needs_inline():
    assert_error(
        prompted(credRefs={"other": "c"}),
        "INVALID_PARAMETERS",
        {"missingFields": ["credRefs.chat or (apiUrl + apiKey + primaryModel)"]},
    )


def test_complete_prompt_zero_counts_as_given_quirk():
    # 0 !== '' so the reference treats it as a prompt; stored as null (|| null)
    req = validate(prompted(completePrompt=0, **INLINE))
    assert req.build_stored_payload(NOW)["completePrompt"] is None


# ---- instant ---------------------------------------------------------------------------------------------------


def instant(**extra):
    return {"contactName": "R", "messageType": "instant", "firstSendTime": FUTURE, **extra}


@pytest.mark.parametrize("value", ["daily", "weekly"])
def test_instant_recurrence_must_be_none(value):
    assert_error(
        instant(userMessage="x", recurrenceType=value),
        "INVALID_PARAMETERS",
        {"invalidFields": ['recurrenceType (must be "none" for instant type)']},
    )


def test_instant_needs_user_message_or_ai():
    err = assert_error(
        instant(),
        "INVALID_PARAMETERS",
        {
            "missingFields": [
                "userMessage or ((completePrompt | messages) + (credRefs.chat | apiUrl + apiKey + primaryModel))"
            ]
        },
    )
    assert err.message == "instant 类型必须提供 userMessage 或完整的 AI 配置"
    # partial AI config does not count
    assert error_of(instant(completePrompt="p", apiUrl="u", apiKey="k")).code == "INVALID_PARAMETERS"
    assert error_of(instant(**INLINE)).code == "INVALID_PARAMETERS"


def test_instant_variants_ok():
    assert validate(instant(userMessage="x")).message_type == "instant"
    assert validate(instant(completePrompt="p", **INLINE)).message_type == "instant"
    assert validate(instant(messages=[{"role": "user", "content": "x"}], credRefs={"chat": "c"})).cred_ref_ids == ["c"]


# ---- temperature -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, False, "0.5", math.inf, -math.inf, math.nan, [], {}, 10**400])
def test_temperature_invalid(value):
    assert_error(
        fixed(temperature=value), "INVALID_PARAMETERS", {"invalidFields": ["temperature (must be a finite number)"]}
    )


@pytest.mark.parametrize("value", [0, 0.0, 1, 0.7, -1.5, None])
def test_temperature_valid(value):
    assert validate(fixed(temperature=value)).build_stored_payload(NOW)["temperature"] == value


# ---- avatarUrl (soft strip) ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "data:image/png;base64,AAAA",
        "DATA:image/png;base64,AAAA",
        "not a url",
        "/relative/path.png",
        "https://",
        "https://exa mple.com/a.png",
        123,
        ["https://a.example/x.png"],
        "https://a.example/" + "x" * 2031,  # 2049 units
        "https://a.example/" + "😀" * 1016,  # 18 + 2032 = 2050 units although only 1034 code points
        "",
    ],
)
def test_avatar_soft_stripped(value):
    req = validate(fixed(avatarUrl=value))
    assert req.avatar_url is None
    assert req.build_stored_payload(NOW)["avatarUrl"] is None


@pytest.mark.parametrize(
    "value",
    [
        "https://cdn.example.com/a.png",
        "http://localhost:8080/a.png",
        "https://a.example/" + "x" * 2030,  # exactly 2048 units
        "ftp://files.example/a.png",
        "mailto:someone@example.com",
    ],
)
def test_avatar_kept(value):
    assert validate(fixed(avatarUrl=value)).avatar_url == value


def test_avatar_error_precedes_nothing():
    # soft strip never raises, so a later error still wins
    assert_error(
        fixed(avatarUrl="data:x", uuid="bad"), "INVALID_PARAMETERS", {"invalidFields": ["uuid (invalid UUID format)"]}
    )


def test_avatar_url_error_messages():
    assert avatar_url_error(None) is None
    assert avatar_url_error(5) == "avatarUrl 必须是字符串"
    assert "data:" in avatar_url_error(" data:image/png;base64,AA")
    assert avatar_url_error("https://a.example/" + "😀" * 1016).startswith("头像 URL 长度 2050 字符")
    assert avatar_url_error("nope") == "avatarUrl 不是合法 URL"


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://example.com/a.png", True),
        ("http:example.com", True),
        ("localhost:8080", True),
        ("http://[::1]:80/", True),
        ("http://1.2.3.4/", True),
        ("http://1.2.3.999/", False),
        ("http://[::1/", False),
        ("http://a:99999/", False),
        ("http://a:8x/", False),
        ("https://例子.测试/a", True),
        ("http://%zz/", False),
        ("foo://x y", False),
        ("https:///", False),
        ("file:///tmp/a.png", True),
        ("1http://x", False),
        ("", False),
    ],
)
def test_is_absolute_url(url, ok):
    assert is_absolute_url(url) is ok


# ---- uuid ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", UUID_A[:-1], UUID_A + "a", "x" * 300, 123, ["x"], True])
def test_uuid_invalid(value):
    assert_error(fixed(uuid=value), "INVALID_PARAMETERS", {"invalidFields": ["uuid (invalid UUID format)"]})


@pytest.mark.parametrize("value", [None, "", 0, False])
def test_uuid_falsy_generates(value):
    req = validate(fixed(uuid=value))
    assert (req.uuid, req.uuid_given) == (UUID_A, False)


def test_uuid_given_any_version():
    req = validate(fixed(uuid=UUID_B))
    assert (req.uuid, req.uuid_given) == (UUID_B, True)


def test_uuid_default_factory_is_v4():
    req = validate_schedule_payload(fixed(), now_ms=NOW)
    assert req.uuid[14] == "4" and len(req.uuid) == 36 and not req.uuid_given


# ---- messageSubtype / llmExtraBody / metadata / ownership ------------------------------------------------------


@pytest.mark.parametrize("value", [1, True, ["chat"], {}])
def test_message_subtype_must_be_string(value):
    assert_error(fixed(messageSubtype=value), "INVALID_PARAMETERS", {"invalidFields": ["messageSubtype"]}, DEFAULT_MSG)


@pytest.mark.parametrize(("value", "stored"), [(None, "chat"), ("", "chat"), ("forum", "forum"), ("自定义", "自定义")])
def test_message_subtype_default(value, stored):
    assert validate(fixed(messageSubtype=value)).build_stored_payload(NOW)["messageSubtype"] == stored


@pytest.mark.parametrize("value", [[], "x", 1, True, [{"a": 1}]])
def test_llm_extra_body_must_be_object(value):
    assert_error(
        fixed(llmExtraBody=value),
        "INVALID_PARAMETERS",
        {"invalidFields": ["llmExtraBody"]},
        "llmExtraBody 必须是普通对象",
    )


def test_llm_extra_body_ok():
    assert validate(fixed(llmExtraBody={"thinking": {"type": "off"}})).llm_extra_body == {"thinking": {"type": "off"}}
    assert validate(fixed(llmExtraBody=None)).llm_extra_body is None


@pytest.mark.parametrize(
    ("value", "stored"), [(None, {}), (0, {}), ("", {}), (False, {}), ({"a": 1}, {"a": 1}), ([1], [1]), ("s", "s")]
)
def test_metadata_default(value, stored):
    assert validate(fixed(metadata=value)).build_stored_payload(NOW)["metadata"] == stored


# ---- order: the earlier check wins -----------------------------------------------------------------------------

ORDER_CASES = [
    # (bad fields applied together, expected code, expected details)
    ({"contactName": "", "messageType": "x"}, "INVALID_PARAMETERS", {"missingFields": ["contactName"]}),
    ({"messageType": "x", "immediate": "yes"}, "INVALID_MESSAGE_TYPE", {"providedType": "x", "allowedTypes": ALLOWED}),
    ({"immediate": "yes", "firstSendTime": "bad"}, "INVALID_PARAMETERS", {"invalidFields": ["immediate"]}),
    ({"firstSendTime": "bad", "supersedesUuid": "bad"}, "INVALID_TIMESTAMP", {"field": "firstSendTime"}),
    ({"supersedesUuid": "bad", "pushSubscription": {}}, "INVALID_PARAMETERS", {"invalidFields": ["supersedesUuid"]}),
    (
        {"pushSubscription": {}, "recurrenceType": "x"},
        "PUSH_SUBSCRIPTION_NOT_ACCEPTED",
        {"invalidFields": ["pushSubscription"]},
    ),
    ({"recurrenceType": "x", "tzId": "bad"}, "INVALID_PARAMETERS", {"invalidFields": ["recurrenceType"]}),
    ({"tzId": "bad", "maxTokens": -1}, "INVALID_PARAMETERS", {"invalidFields": ["tzId"]}),
    ({"maxTokens": -1, "userMessage": 5}, "INVALID_PARAMETERS", {"invalidFields": ["maxTokens"]}),
    ({"userMessage": 5, "messages": []}, "INVALID_PARAMETERS", {"invalidFields": ["userMessage (must be a string)"]}),
    (
        {"userMessage": "", "messages": []},
        "INVALID_PARAMETERS",
        {"missingFields": ["userMessage (required for fixed type)"]},
    ),
    ({"messages": [], "credRefs": []}, "INVALID_PARAMETERS", {"invalidFields": ["messages"]}),
    ({"credRefs": [], "temperature": "x"}, "INVALID_PARAMETERS", {"invalidFields": ["credRefs"]}),
    (
        {"credRefs": {"chat": "c"}, "apiKey": "k", "temperature": "x"},
        "INVALID_PARAMETERS",
        {"invalidFields": ["credRefs.chat", "apiUrl", "apiKey", "primaryModel"]},
    ),
    (
        {"temperature": "x", "uuid": "bad"},
        "INVALID_PARAMETERS",
        {"invalidFields": ["temperature (must be a finite number)"]},
    ),
    ({"uuid": "bad", "messageSubtype": 1}, "INVALID_PARAMETERS", {"invalidFields": ["uuid (invalid UUID format)"]}),
    ({"messageSubtype": 1, "splitPattern": 5}, "INVALID_PARAMETERS", {"invalidFields": ["messageSubtype"]}),
    ({"splitPattern": 5, "llmExtraBody": []}, "INVALID_PARAMETERS", {"invalidFields": ["splitPattern"]}),
]


@pytest.mark.parametrize(("bad", "code", "details"), ORDER_CASES)
def test_order_earlier_check_wins(bad, code, details):
    assert_error(fixed(**bad), code, details)


def test_order_prompted_requirement_before_instant_and_temperature():
    payload = {"contactName": "R", "messageType": "prompted", "firstSendTime": FUTURE, "temperature": "x"}
    assert error_of(payload).details == {
        "missingFields": ["completePrompt or messages", "credRefs.chat or (apiUrl + apiKey + primaryModel)"]
    }


def test_order_instant_recurrence_before_content_requirement():
    assert error_of(instant(recurrenceType="daily", temperature="x")).details == {
        "invalidFields": ['recurrenceType (must be "none" for instant type)']
    }


# ---- stored payload --------------------------------------------------------------------------------------------

PAYLOAD_KEYS = [
    "contactName",
    "avatarUrl",
    "messageType",
    "messageSubtype",
    "userMessage",
    "firstSendTime",
    "recurrenceType",
    "tzId",
    "apiUrl",
    "apiKey",
    "primaryModel",
    "credRefs",
    "completePrompt",
    "messages",
    "maxTokens",
    "temperature",
    "splitPattern",
    "llmExtraBody",
]


def test_stored_payload_defaults_and_order():
    stored = validate(fixed(unknownField=1, supersedesUuid=None)).build_stored_payload(NOW)
    assert list(stored) == [*PAYLOAD_KEYS, "metadata"]
    assert stored == {
        "contactName": "Rei",
        "avatarUrl": None,
        "messageType": "fixed",
        "messageSubtype": "chat",
        "userMessage": "hi",
        "firstSendTime": FUTURE,
        "recurrenceType": "none",
        "tzId": None,
        "apiUrl": None,
        "apiKey": None,
        "primaryModel": None,
        "credRefs": None,
        "completePrompt": None,
        "messages": None,
        "maxTokens": None,
        "temperature": None,
        "splitPattern": None,
        "llmExtraBody": None,
        "metadata": {},
    }


def test_stored_payload_full_and_ownership_order():
    request = prompted(
        avatarUrl="https://a.example/x.png",
        messageSubtype="moment",
        userMessage="fallback",
        recurrenceType="weekly",
        tzId="europe/london",
        maxTokens=100,
        temperature=0.5,
        llmExtraBody={"k": 1},
        metadata={"charId": "c1"},
        kind="character",
        owner={"type": "character", "id": "c1"},
        ownerGeneration=3,
        **INLINE,
    )
    stored = validate(request).build_stored_payload(NOW)
    assert list(stored) == [*PAYLOAD_KEYS, "owner", "kind", "ownerGeneration", "metadata"]
    assert stored["owner"] == {"type": "character", "id": "c1"}
    assert stored["kind"] == "character"
    assert stored["ownerGeneration"] == 3
    assert stored["tzId"] == "Europe/London"
    assert stored["apiKey"] == "sk-x"
    assert stored["completePrompt"] == "p"
    assert stored["messages"] is None


def test_ownership_only_when_provided_null_counts():
    stored = validate(fixed(owner=None)).build_stored_payload(NOW)
    assert "owner" in stored and stored["owner"] is None
    assert "kind" not in stored and "ownerGeneration" not in stored


def test_stored_payload_immediate_first_send_time_is_now():
    req = validate(fixed(immediate=True, firstSendTime="2000-01-01T00:00:00Z"))
    assert req.build_stored_payload(NOW)["firstSendTime"] == "2030-01-01T00:00:00.000Z"
    assert req.build_stored_payload(NOW + 5)["firstSendTime"] == "2030-01-01T00:00:00.005Z"


def test_stored_payload_is_json_serialisable():
    req = validate(fixed(metadata={"emoji": "😀", "中文": "值"}))
    text = compact_json(req.build_stored_payload(NOW))
    assert json.loads(text)["metadata"] == {"emoji": "😀", "中文": "值"}


def test_request_is_a_dataclass():
    assert isinstance(validate(fixed()), ScheduleRequest)


# ---- size gate -------------------------------------------------------------------------------------------------


def test_payload_too_large_error():
    err = payload_too_large_error(1_000_000)
    assert (err.status, err.code) == (400, "TASK_PAYLOAD_TOO_LARGE")
    assert err.message == "任务内容 1000000 字节，超过 995871 字节上限"
    assert err.details == {"bytes": 1_000_000, "maxBytes": 995_871}
    assert MAX_TASK_PAYLOAD_BYTES == 995_871


def test_payload_byte_length_is_utf8_of_compact_json():
    payload = {"a": "中", "b": [1, 2]}
    assert payload_byte_length(payload) == len('{"a":"中","b":[1,2]}'.encode())


# ---- shared cred helpers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("a", True),
        ("x" * 128, True),
        ("😀" * 64, True),
        ("😀" * 64 + "a", False),
        ("x" * 129, False),
        ("", False),
        ("char:a/chat", True),
        ("tab\there", False),
        ("del\x7f", False),
        ("nbsp\u00a0ok", True),
        ("\u0080c1-control-is-allowed", True),
        (5, False),
        (None, False),
    ],
)
def test_validate_cred_id(value, ok):
    assert validate_cred_id(value) is ok


def test_validate_cred_refs_and_chat_helper():
    assert validate_cred_refs({"chat": "c"})
    assert not validate_cred_refs({})
    assert not validate_cred_refs(None)
    assert has_chat_cred_ref({"credRefs": {"chat": "c"}})
    assert not has_chat_cred_ref({"credRefs": {"chat": ""}})
    assert not has_chat_cred_ref({"credRefs": {"other": "c"}})
    assert not has_chat_cred_ref({"credRefs": None})
    assert not has_chat_cred_ref(None)


# ---- splitPattern ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("(", "splitPattern 不是有效正则表达式"),
        ("[", "splitPattern 不是有效正则表达式"),
        ("*", "splitPattern 不是有效正则表达式"),
        ("\\p{L}", "splitPattern 不是有效正则表达式"),  # needs the u flag: untranslatable → 400
        ("x" * 201, "splitPattern 不能超过 200 字符"),
        ("😀" * 101, "splitPattern 不能超过 200 字符"),  # 202 UTF-16 units
        (5, "splitPattern 必须是字符串"),
        ({"source": "\\n"}, "splitPattern 必须是字符串"),
        (True, "splitPattern 必须是字符串"),
        (["\\n"] * 11, "splitPattern 数组最多 10 项"),
        ([5] * 11, "splitPattern 数组最多 10 项"),  # the count is checked before the items
        (["\\n", 5], "splitPattern[1] 必须是字符串"),
        (["\\n", "("], "splitPattern[1] 不是有效正则表达式"),
        (["x" * 201], "splitPattern[0] 不能超过 200 字符"),
    ],
)
def test_split_pattern_invalid(value, message):
    assert_error(fixed(splitPattern=value), "INVALID_PARAMETERS", {"invalidFields": ["splitPattern"]}, message)


@pytest.mark.parametrize(
    "value",
    [
        *(
            None,
            [],
            "\\n",
            "[。！？!?]+",
            "([。！？!?]+)",
            "(?<sep>\\n)",
            "a{2",
            "x" * 200,
            "😀" * 100,
            ["\\n"] * 10,
            "",
        ),
        # what JavaScript accepts: variable-width look-behind, nullable repeated groups, bounded fixed nesting
        *("(?<=[。！？]+)", "(。??[\\s,]??|[^\\s]{0,3})?", "(a|)+", "(?:。{2}){2}"),
    ],
)
def test_split_pattern_valid(value):
    assert validate(fixed(splitPattern=value)).build_stored_payload(NOW)["splitPattern"] == value


def test_validate_split_pattern_bool():
    from amsg.domain.validation import validate_split_pattern

    assert validate_split_pattern(None) is True
    assert validate_split_pattern(["a", "b"]) is True
    assert validate_split_pattern("(") is False
    assert validate_split_pattern([1]) is False
