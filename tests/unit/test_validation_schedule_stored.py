"""POST /schedule-message validation, continued: avatarUrl, uuid, the other fields, the check order, the stored
payload, the size gate, the credential helpers and splitPattern."""

import json

import pytest
from amsg.crypto import compact_json
from amsg.domain.urls import avatar_url_error, is_absolute_url
from amsg.domain.validation import (
    MAX_TASK_PAYLOAD_BYTES,
    ScheduleRequest,
    has_chat_cred_ref,
    payload_byte_length,
    payload_too_large_error,
    validate_cred_id,
    validate_cred_refs,
    validate_schedule_payload,
)

from tests.support.schedule_cases import (
    ALLOWED,
    DEFAULT_MSG,
    FUTURE,
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
