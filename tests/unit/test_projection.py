"""TaskProjection and last_error parsing."""

import json

import pytest
from amsg.domain.projection import parse_last_error, project_task
from amsg.ports import TaskRow
from amsg.timeutil import parse_iso_ms

KEYS = [
    "id",
    "uuid",
    "contactName",
    "messageType",
    "messageSubtype",
    "nextSendAt",
    "recurrenceType",
    "tzId",
    "status",
    "retryCount",
    "createdAt",
    "updatedAt",
    "charId",
    "clientTaskId",
    "credRefs",
]

LAST_ERROR = {"at": "2030-01-01T00:01:00.000Z", "occurrence": "2030-01-01T00:00:00.000Z", "reason": "boom"}


def row(**extra):
    base = {
        "user_id": "550e8400-e29b-41d4-a716-446655440000",
        "uuid": "11111111-1111-4111-8111-111111111111",
        "id": 7,
        "encrypted_payload": "aa:bb:cc",
        "message_type": "prompted",
        "next_send_at_ms": parse_iso_ms("2030-01-01T00:00:00.000Z"),
        "status": "pending",
        "retry_count": 2,
        "last_error": None,
        "created_at_ms": parse_iso_ms("2029-12-31T00:00:00.000Z"),
        "updated_at_ms": parse_iso_ms("2029-12-31T01:00:00.000Z"),
    }
    base.update(extra)
    return TaskRow(**base)


def payload(**extra):
    base = {
        "contactName": "Rei",
        "avatarUrl": "https://a.example/x.png",
        "messageType": "auto",
        "messageSubtype": "moment",
        "userMessage": "secret text",
        "recurrenceType": "daily",
        "tzId": "Asia/Tokyo",
        "apiUrl": "https://llm.example",
        "apiKey": "sk-secret",
        "primaryModel": "m",
        "credRefs": {"chat": "global/chat"},
        "completePrompt": "frozen-prompt-text",
        "metadata": {"charId": "c1", "amsgClientTaskId": "t1", "other": True},
        "pushSubscription": {"endpoint": "https://push"},
        "lastError": {"reason": "payload copy must never be read"},
    }
    base.update(extra)
    return base


def test_list_projection_shape_and_order():
    out = project_task(row(), payload(), include_metadata=False)
    assert list(out) == [*KEYS, "lastError"]
    assert out == {
        "id": 7,
        "uuid": "11111111-1111-4111-8111-111111111111",
        "contactName": "Rei",
        "messageType": "prompted",  # row wins over payload
        "messageSubtype": "moment",
        "nextSendAt": "2030-01-01T00:00:00.000Z",
        "recurrenceType": "daily",
        "tzId": "Asia/Tokyo",
        "status": "pending",
        "retryCount": 2,
        "createdAt": "2029-12-31T00:00:00.000Z",
        "updatedAt": "2029-12-31T01:00:00.000Z",
        "charId": "c1",
        "clientTaskId": "t1",
        "credRefs": {"chat": "global/chat"},
        "lastError": None,
    }


def test_single_projection_includes_metadata_before_last_error():
    out = project_task(row(last_error=json.dumps(LAST_ERROR)), payload(), include_metadata=True)
    assert list(out) == [*KEYS, "metadata", "lastError"]
    assert out["metadata"] == {"charId": "c1", "amsgClientTaskId": "t1", "other": True}
    assert out["lastError"] == LAST_ERROR


def test_no_secrets_leak():
    text = json.dumps(project_task(row(), payload(), include_metadata=True))
    for secret in (
        "sk-secret",
        "https://llm.example",
        "secret text",
        "frozen-prompt-text",
        "https://push",
        "avatarUrl",
    ):
        assert secret not in text


def test_last_error_only_from_row():
    out = project_task(row(last_error=None), payload(), include_metadata=False)
    assert out["lastError"] is None  # the payload's copy is ignored


def test_defaults_for_minimal_payload():
    out = project_task(row(message_type="", retry_count=0), {"contactName": "R"}, include_metadata=True)
    assert out["messageType"] is None
    assert out["messageSubtype"] is None
    assert out["recurrenceType"] == "none"  # missing means none
    assert out["tzId"] is None
    assert out["charId"] is None
    assert out["clientTaskId"] is None
    assert out["credRefs"] is None
    assert out["metadata"] is None
    assert out["retryCount"] == 0


def test_message_type_falls_back_to_payload():
    assert project_task(row(message_type=""), payload(), include_metadata=False)["messageType"] == "auto"


def test_null_subtype_after_update_stays_null():
    assert project_task(row(), payload(messageSubtype=None), include_metadata=False)["messageSubtype"] is None


@pytest.mark.parametrize("metadata", [None, [], "s", 5])
def test_non_object_metadata(metadata):
    out = project_task(row(), payload(metadata=metadata), include_metadata=True)
    assert (out["charId"], out["clientTaskId"]) == (None, None)
    assert out["metadata"] == metadata


def test_empty_row_timestamps_become_null():
    out = project_task(
        row(created_at_ms=None, updated_at_ms=None, next_send_at_ms=0), payload(), include_metadata=False
    )
    assert (out["createdAt"], out["updatedAt"], out["nextSendAt"]) == (None, None, None)


def test_non_dict_payload_tolerated():
    out = project_task(row(), None, include_metadata=False)  # type: ignore[arg-type]
    assert out["contactName"] is None and out["uuid"] == row().uuid


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),
        ("", None),
        (json.dumps(LAST_ERROR), LAST_ERROR),
        ('{"at":"x","reason":"stale","skippedCount":3}', {"at": "x", "reason": "stale", "skippedCount": 3}),
        ("not json", {"reason": "not json"}),
        ("{broken", {"reason": "{broken"}),
        ("NaN", {"reason": "NaN"}),
        ('{"a": Infinity}', {"reason": '{"a": Infinity}'}),
        ("null", None),
    ],
)
def test_parse_last_error(text, expected):
    assert parse_last_error(text) == expected


def test_unparsable_row_last_error_in_projection():
    assert project_task(row(last_error="oops"), payload(), include_metadata=False)["lastError"] == {"reason": "oops"}
