"""PUT /update-message validation and merge."""

import math

import pytest
from amsg.domain.update_validation import UpdatePatch, validate_update_patch
from amsg.errors import ApiError

UPDATE_MSG = "更新数据格式错误"


def error_of(patch) -> ApiError:
    with pytest.raises(ApiError) as info:
        validate_update_patch(patch)
    return info.value


def assert_error(patch, invalid, message=UPDATE_MSG, code="INVALID_UPDATE_DATA"):
    err = error_of(patch)
    assert (err.status, err.code, err.details) == (400, code, {"invalidFields": invalid})
    assert err.message == message
    return err


def stored(**extra):
    base = {
        "contactName": "Rei",
        "avatarUrl": "https://old.example/a.png",
        "messageType": "prompted",
        "messageSubtype": "chat",
        "userMessage": "old",
        "firstSendTime": "2030-01-01T00:00:00.000Z",
        "recurrenceType": "daily",
        "tzId": "Asia/Tokyo",
        "apiUrl": "https://old.example/v1",
        "apiKey": "old-key",
        "primaryModel": "old-model",
        "credRefs": None,
        "completePrompt": "old prompt",
        "messages": None,
        "maxTokens": 100,
        "temperature": 0.3,
        "splitPattern": "\\n",
        "llmExtraBody": {"a": 1},
        "metadata": {"charId": "c1"},
    }
    base.update(extra)
    return base


def merge(patch, original=None):
    original = stored() if original is None else original
    before = repr(original)
    result = validate_update_patch(patch).apply(original)
    assert repr(original) == before, "apply must not mutate the stored payload"
    return result


# ---- non-object ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [None, [], "x", 1])
def test_not_an_object(body):
    err = error_of(body)
    assert (err.code, err.message, err.details) == ("INVALID_UPDATE_DATA", UPDATE_MSG, None)


def test_empty_patch_changes_nothing():
    new, applied = merge({})
    assert new == stored()
    assert applied == []


# ---- per-field validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["tomorrow", 12345, True, "2030-02-30", ["2030-01-01"]])
def test_next_send_at_invalid(value):
    assert_error({"nextSendAt": value}, ["nextSendAt"])


@pytest.mark.parametrize("value", [None, "", 0, False])
def test_next_send_at_falsy_ignored(value):
    patch = validate_update_patch({"nextSendAt": value})
    assert patch.next_send_at_ms is None and patch.next_send_at is None
    assert patch.updated_fields(next_send_at_changed=False) == []


def test_next_send_at_past_allowed_and_normalised():
    patch = validate_update_patch({"nextSendAt": "2000-01-01T09:00:00+09:00"})
    assert patch.next_send_at == "2000-01-01T00:00:00.000Z"
    assert patch.next_send_at_ms == 946684800000
    new, applied = patch.apply(stored())
    assert new["firstSendTime"] == "2030-01-01T00:00:00.000Z"  # payload firstSendTime untouched
    assert applied == []
    assert patch.updated_fields(next_send_at_changed=True) == ["nextSendAt"]
    assert patch.updated_fields(next_send_at_changed=False) == []


@pytest.mark.parametrize("value", [None, "", "   ", "\u3000\ufeff", 5, ["R"]])
def test_contact_name_non_empty_string(value):
    assert_error({"contactName": value}, ["contactName"], "contactName 必须是非空字符串")


def test_contact_name_kept_verbatim():
    new, applied = merge({"contactName": " New "})
    assert new["contactName"] == " New "
    assert applied == ["contactName"]


@pytest.mark.parametrize("value", [1, True, [], {}])
def test_user_message_must_be_string(value):
    assert_error({"userMessage": value}, ["userMessage"], "userMessage 必须是字符串")


@pytest.mark.parametrize("value", [1, False, [], {}])
def test_message_subtype_must_be_string(value):
    assert_error({"messageSubtype": value}, ["messageSubtype"], "messageSubtype 必须是字符串")


@pytest.mark.parametrize("value", [[], "x", 0, True])
def test_llm_extra_body_plain_object(value):
    assert_error({"llmExtraBody": value}, ["llmExtraBody"], "llmExtraBody 必须是普通对象")


@pytest.mark.parametrize("value", ["monthly", 1, True, ["daily"]])
def test_recurrence_type_invalid(value):
    assert_error({"recurrenceType": value}, ["recurrenceType"])


@pytest.mark.parametrize("value", ["", "Mars/Base", 5, True])
def test_tz_invalid(value):
    assert_error({"tzId": value}, ["tzId"], "tzId 必须是可用的 IANA 时区 id（如 Asia/Tokyo），或 null 表示按 UTC 推进")


@pytest.mark.parametrize("value", [0, -3, 2.5, "5", True, math.inf])
def test_max_tokens_invalid(value):
    assert_error({"maxTokens": value}, ["maxTokens"])


def test_prompt_both():
    assert_error(
        {"completePrompt": "p", "messages": [{"role": "user", "content": "x"}]},
        ["completePrompt", "messages"],
        "completePrompt 与 messages 不能同时更新（二选一）",
    )
    # invalid messages with a truthy prompt: the one-of error wins
    assert_error(
        {"completePrompt": "p", "messages": []},
        ["completePrompt", "messages"],
        "completePrompt 与 messages 不能同时更新（二选一）",
    )


def test_prompt_falsy_complete_prompt_with_messages_is_not_both():
    new, applied = merge({"completePrompt": "", "messages": [{"role": "user", "content": "x"}]})
    assert new["messages"] == [{"role": "user", "content": "x"}]
    assert new["completePrompt"] is None
    assert applied == ["completePrompt", "messages"]


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "messages must be a non-empty array"),
        ("x", "messages must be a non-empty array"),
        ([{"role": "user", "content": ""}], "messages[0].content must be a non-empty string"),
        ([{"role": "x", "content": "y"}], "messages[0].role must be one of system / user / assistant / tool"),
    ],
)
def test_messages_invalid(messages, message):
    assert_error({"messages": messages}, ["messages"], message)


@pytest.mark.parametrize("value", ["0.5", True, math.nan, math.inf, []])
def test_temperature_invalid(value):
    assert_error({"temperature": value}, ["temperature"])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("(", "splitPattern 不是有效正则表达式"),
        (["a"] * 11, "splitPattern 数组最多 10 项"),
        (3, "splitPattern 必须是字符串"),
    ],
)
def test_split_pattern_invalid(value, message):
    assert_error({"splitPattern": value}, ["splitPattern"], message)


@pytest.mark.parametrize("value", [None, {}, {"endpoint": "x"}])
def test_push_subscription_rejected(value):
    err = error_of({"pushSubscription": value})
    assert (err.code, err.status, err.details) == (
        "PUSH_SUBSCRIPTION_NOT_ACCEPTED",
        400,
        {"invalidFields": ["pushSubscription"]},
    )


@pytest.mark.parametrize(
    ("refs", "message"),
    [
        ({}, "credRefs 不能是空对象（不需要就别带这个字段）"),
        ([], "credRefs 必须是 { <purpose>: <credId> } 形状的普通对象"),
        ("c", "credRefs 必须是 { <purpose>: <credId> } 形状的普通对象"),
        (0, "credRefs 必须是 { <purpose>: <credId> } 形状的普通对象"),
        ({f"k{i}": "c" for i in range(17)}, "credRefs 最多 16 个条目"),
        ({"chat": ""}, "credRefs['chat'] 必须是 1–128 字符、不含控制字符的 cred_id"),
        ({"chat": "x" * 129}, "credRefs['chat'] 必须是 1–128 字符、不含控制字符的 cred_id"),
        ({"p" * 65: "c"}, "credRefs 的 purpose 键不能超过 64 字符、不能含控制字符"),
        ({"a\tb": "c"}, "credRefs 的 purpose 键不能超过 64 字符、不能含控制字符"),
    ],
)
def test_cred_refs_shape(refs, message):
    assert_error({"credRefs": refs}, ["credRefs"], message)


@pytest.mark.parametrize("inline", ["apiUrl", "apiKey", "primaryModel"])
def test_cred_refs_with_truthy_inline(inline):
    assert_error(
        {"credRefs": {"chat": "c"}, inline: "v"},
        ["credRefs", "apiUrl", "apiKey", "primaryModel"],
        "credRefs 与内联 apiUrl / apiKey / primaryModel 不能同时更新（二选一）",
    )


def test_cred_refs_with_falsy_inline_ok():
    patch = validate_update_patch({"credRefs": {"chat": "c", "other": "c", "x": "d"}, "apiKey": "", "apiUrl": None})
    assert patch.cred_ref_ids == ["c", "d"]
    assert patch.inline_credential_keys == []


def test_cred_refs_non_chat_with_inline_also_conflicts():
    # update rule: any non-null credRefs together with a truthy inline field
    assert_error(
        {"credRefs": {"summary": "s"}, "apiUrl": "u"},
        ["credRefs", "apiUrl", "apiKey", "primaryModel"],
        "credRefs 与内联 apiUrl / apiKey / primaryModel 不能同时更新（二选一）",
    )


# ---- order -----------------------------------------------------------------------------------------------------

ORDER = [
    ({"nextSendAt": "bad", "contactName": ""}, ["nextSendAt"]),
    ({"contactName": "", "userMessage": 1}, ["contactName"]),
    ({"userMessage": 1, "messageSubtype": 1}, ["userMessage"]),
    ({"messageSubtype": 1, "llmExtraBody": []}, ["messageSubtype"]),
    ({"llmExtraBody": [], "recurrenceType": "x"}, ["llmExtraBody"]),
    ({"recurrenceType": "x", "tzId": "bad"}, ["recurrenceType"]),
    ({"tzId": "bad", "maxTokens": 0}, ["tzId"]),
    ({"maxTokens": 0, "messages": []}, ["maxTokens"]),
    ({"messages": [], "temperature": "x"}, ["messages"]),
    ({"temperature": "x", "splitPattern": 1}, ["temperature"]),
    ({"splitPattern": 1, "pushSubscription": {}}, ["splitPattern"]),
    ({"pushSubscription": {}, "credRefs": []}, ["pushSubscription"]),
    ({"avatarUrl": "data:x", "credRefs": []}, ["credRefs"]),
]


@pytest.mark.parametrize(("patch", "invalid"), ORDER)
def test_order_earlier_check_wins(patch, invalid):
    assert error_of(patch).details == {"invalidFields": invalid}


def test_order_independent_of_request_key_order():
    # the check order is fixed, not the order keys appear in the request
    assert error_of({"temperature": "x", "contactName": ""}).details == {"invalidFields": ["contactName"]}


# ---- merge semantics -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        # key present → replace (null clears / resets)
        ("tzId", None, None),
        ("tzId", "europe/paris", "Europe/Paris"),
        ("maxTokens", None, None),
        ("maxTokens", 7.0, 7),
        ("temperature", None, None),
        ("temperature", 0, 0),
        ("splitPattern", None, None),
        ("splitPattern", [], []),
        ("messageSubtype", None, None),
        ("messageSubtype", "", ""),
        ("llmExtraBody", None, None),
        ("llmExtraBody", {}, {}),
    ],
)
def test_key_present_replace(key, value, expected):
    new, applied = merge({key: value})
    assert new[key] == expected
    assert type(new[key]) is type(expected)
    assert applied == [key]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("userMessage", None),
        ("userMessage", ""),
        ("recurrenceType", None),
        ("recurrenceType", ""),
        ("avatarUrl", None),
        ("avatarUrl", ""),
        ("metadata", None),
        ("metadata", 0),
        ("metadata", ""),
        ("apiUrl", None),
        ("apiKey", ""),
        ("primaryModel", 0),
        ("credRefs", None),
        ("completePrompt", None),
        ("completePrompt", ""),
        ("messages", None),
    ],
)
def test_null_or_falsy_ignored(key, value):
    new, applied = merge({key: value})
    assert new == stored()
    assert applied == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("userMessage", "new"),
        ("recurrenceType", "weekly"),
        ("recurrenceType", "none"),
        ("avatarUrl", "https://new.example/b.png"),
        ("metadata", {"x": 1}),
        ("metadata", []),
        ("apiUrl", "https://new.example/v1"),
        ("apiKey", "new-key"),
        ("primaryModel", "new-model"),
        ("credRefs", {"chat": "global/chat"}),
    ],
)
def test_truthy_replace(key, value):
    new, applied = merge({key: value})
    assert new[key] == value
    assert applied == [key]


def test_metadata_whole_replace_no_deep_merge():
    new, _ = merge({"metadata": {"amsgClientTaskId": "t"}})
    assert new["metadata"] == {"amsgClientTaskId": "t"}


def test_complete_prompt_sets_and_nulls_messages():
    original = stored(completePrompt=None, messages=[{"role": "user", "content": "old"}])
    new, applied = merge({"completePrompt": "fresh"}, original)
    assert (new["completePrompt"], new["messages"]) == ("fresh", None)
    assert applied == ["completePrompt"]


def test_messages_sets_and_nulls_complete_prompt():
    new, applied = merge({"messages": [{"role": "user", "content": "x"}]})
    assert new["messages"] == [{"role": "user", "content": "x"}]
    assert new["completePrompt"] is None
    assert applied == ["messages"]


def test_complete_prompt_with_null_messages_reports_both():
    # the merge writes messages: null, so the request's messages key counts as applied
    new, applied = merge({"messages": None, "completePrompt": "p2"})
    assert (new["completePrompt"], new["messages"]) == ("p2", None)
    assert applied == ["messages", "completePrompt"]


def test_cred_refs_leave_inline_intact():
    new, _ = merge({"credRefs": {"chat": "c"}})
    assert (new["apiUrl"], new["apiKey"], new["primaryModel"]) == ("https://old.example/v1", "old-key", "old-model")


@pytest.mark.parametrize("bad", ["data:image/png;base64,AA", "nope", 5, "https://a.example/" + "x" * 2031])
def test_invalid_avatar_silently_removed(bad):
    patch = validate_update_patch({"avatarUrl": bad, "userMessage": "u"})
    new, applied = patch.apply(stored())
    assert new["avatarUrl"] == "https://old.example/a.png"
    assert applied == ["userMessage"]
    assert patch.updated_fields(next_send_at_changed=False) == ["userMessage"]


def test_unknown_keys_ignored():
    new, applied = merge({"foo": 1, "firstSendTime": "2040-01-01", "messageType": "fixed", "owner": {"type": "x"}})
    assert new == stored()
    assert applied == []


def test_missing_keys_in_legacy_payload_are_added():
    legacy = {"contactName": "Rei", "messageType": "fixed", "userMessage": "a"}
    new, applied = merge({"llmExtraBody": {"k": 1}, "tzId": None, "splitPattern": "x"}, legacy)
    assert list(new) == ["contactName", "messageType", "userMessage", "tzId", "splitPattern", "llmExtraBody"]
    assert applied == ["llmExtraBody", "tzId", "splitPattern"]


def test_updated_fields_request_order_with_next_send_at():
    patch = validate_update_patch(
        {
            "temperature": 0.9,
            "nextSendAt": "2031-01-01T00:00:00Z",
            "foo": 1,
            "userMessage": None,
            "contactName": "N",
            "avatarUrl": "data:x",
        }
    )
    assert patch.updated_fields(next_send_at_changed=True) == ["temperature", "nextSendAt", "contactName"]
    assert patch.updated_fields(next_send_at_changed=False) == ["temperature", "contactName"]
    assert patch.applied_keys() == ["temperature", "contactName"]


def test_inline_credential_keys_request_order_truthy_only():
    patch = validate_update_patch({"primaryModel": "m", "apiUrl": "", "apiKey": "k"})
    assert patch.inline_credential_keys == ["primaryModel", "apiKey"]
    assert patch.cred_ref_ids == []


# ---- cloud ownership is preserved ------------------------------------------------------------------------------


def test_metadata_cloud_owner_restored():
    owner = {"type": "character", "id": "c1"}
    original = stored(metadata={"charId": "c1", "cloudOwner": owner}, owner=owner, ownerGeneration=2, kind="k")
    new, applied = merge({"metadata": {"charId": "c2", "cloudOwner": {"type": "character", "id": "evil"}}}, original)
    assert new["metadata"] == {"charId": "c2", "cloudOwner": owner}
    assert (new["owner"], new["ownerGeneration"], new["kind"]) == (owner, 2, "k")
    assert applied == ["metadata"]


def test_metadata_cloud_owner_cannot_be_added():
    new, _ = merge({"metadata": {"cloudOwner": {"type": "x", "id": "y"}, "a": 1}})
    assert new["metadata"] == {"a": 1}


def test_metadata_cloud_owner_restore_does_not_mutate_request():
    body = {"metadata": {"cloudOwner": {"type": "x", "id": "y"}}}
    patch = validate_update_patch(body)
    patch.apply(stored())
    assert body["metadata"] == {"cloudOwner": {"type": "x", "id": "y"}}


def test_patch_is_a_dataclass():
    assert isinstance(validate_update_patch({}), UpdatePatch)
