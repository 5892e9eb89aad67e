"""POST /schedule-message validation: every row, the order, JS truthiness, the stored payload."""

import math

import pytest
from amsg.domain.validation import (
    cred_refs_error,
)

from tests.support.schedule_cases import (
    ALLOWED,
    DEFAULT_MSG,
    FUTURE,
    FUTURE_MS,
    INLINE,
    NOW,
    UUID_A,
    UUID_B,
    assert_error,
    error_of,
    fixed,
    instant,
    prompted,
    validate,
)

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
