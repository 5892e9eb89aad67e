"""Quiet hours and frequency caps through the real handlers on moto: the route (validation, encryption,
round trip) and the delivery chain (tick → SQS → run_task) deferring fires without losing or doubling any."""

from __future__ import annotations

import uuid

import pytest
from amsg.crypto import decrypt_from_storage

from tests.conftest import T0_MS  # 2029-12-31T00:00:00Z, a whole hour
from tests.support.scenario import FIRST, at, schedule

# the route's tests need storage semantics only (the in-memory fakes); the `engine` tests stay on moto
pytestmark = pytest.mark.memory_store

HOUR = 3_600_000
NIGHT = {"quietHours": {"start": "23:00", "end": "07:00", "tzId": "UTC"}, "caps": []}


# ---- the route ----------------------------------------------------------------------------------------------


def test_round_trip_encrypted_and_canonical(api, ctx):
    assert api.get_delivery_policy().data == {
        "exists": False,
        "policy": {"quietHours": None, "caps": []},
        "updatedAt": None,
    }
    policy = {
        "quietHours": {"start": "22:30", "end": "06:45", "tzId": "asia/shanghai"},
        "caps": [{"scope": "character", "max": 3, "windowMinutes": 1440}],
    }
    put = api.put_delivery_policy(policy)
    assert put.status == 200, put.text
    expected = {**policy, "quietHours": {**policy["quietHours"], "tzId": "Asia/Shanghai"}}
    assert put.data["policy"] == expected
    got = api.get_delivery_policy()
    assert got.body["encrypted"] is True  # the response is encrypted under the user key
    assert got.data == {"exists": True, "policy": expected, "updatedAt": put.data["updatedAt"]}
    stored = ctx.policies.get_policy(api.user_id)
    assert "Shanghai" not in stored.encrypted_policy  # stored encrypted
    assert "Asia/Shanghai" in decrypt_from_storage(stored.encrypted_policy, api.user_key)
    for prefix in ("", "/api/v1"):
        assert api.request("GET", prefix + "/delivery-policy").status == 200
    assert api.delete_delivery_policy().data == {"deleted": True}
    assert api.delete_delivery_policy().data == {"deleted": False}
    assert api.get_delivery_policy().data["exists"] is False


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"quietHours": {"start": "23:00", "end": "7:00", "tzId": "UTC"}}, "INVALID_QUIET_HOURS", "quietHours.end"),
        (
            {"quietHours": {"start": "23:00", "end": "07:00", "tzId": "Nowhere/City"}},
            "INVALID_QUIET_HOURS",
            "quietHours.tzId",
        ),
        ({"caps": [{"scope": "user", "max": 0, "windowMinutes": 60}]}, "INVALID_DELIVERY_CAP", "caps[0].max"),
        ({"quietHours": None, "extra": 1}, "INVALID_DELIVERY_POLICY", "extra"),
    ],
)
def test_bad_policies_are_documented_400s_and_change_nothing(api, body, code, field):
    assert api.put_delivery_policy(NIGHT).status == 200
    resp = api.put_delivery_policy(body)
    assert resp.status == 400 and resp.code == code, resp.text
    assert resp.body["error"]["details"] == {"field": field}
    assert api.get_delivery_policy().data["policy"] == NIGHT


def test_the_route_needs_an_encrypted_body_and_a_user(api):
    resp = api.request(
        "PUT", "/delivery-policy", body=b'{"quietHours": null}', headers={"Content-Type": "application/json"}
    )
    assert resp.status == 400 and resp.code == "ENCRYPTION_REQUIRED", resp.text
    resp = api.request("GET", "/delivery-policy", headers={"X-User-Id": ""})
    assert resp.status == 400


# ---- the delivery chain ---------------------------------------------------------------------------------------


def test_quiet_hours_defer_to_the_window_end_keeping_the_occurrence(engine):
    assert engine.api.put_delivery_policy(NIGHT).status == 200
    created = schedule(engine)
    at(engine, T0_MS + 61_000)  # 00:01 UTC: inside 23:00–07:00
    summary = engine.harness.tick_and_drain()
    assert summary["claimedTasks"] == 1
    assert engine.push.payloads() == []
    task = engine.api.get_message(created["uuid"]).data["task"]
    assert task["deferredUntil"] == "2029-12-31T07:00:00.000Z"
    assert task["retryCount"] == 0 and task["status"] == "pending"
    at(engine, T0_MS + 7 * HOUR - 1000)
    assert engine.harness.tick_and_drain()["claimedTasks"] == 0  # not before the window ends
    at(engine, T0_MS + 7 * HOUR)
    engine.harness.tick_and_drain()
    payloads = engine.push.payloads()
    assert [p["message"] for p in payloads] == ["hi"]
    # the occurrence kept its identity: the push id names the original minute
    assert payloads[0]["occurrenceMs"] == T0_MS + 60_000
    assert payloads[0]["messageId"] == f"msg_task_{created['id']}@{T0_MS + 60_000}_0"
    assert engine.api.get_message(created["uuid"]).code == "TASK_NOT_FOUND"  # a delivered one-shot is gone


def test_moving_a_deferred_task_ends_the_deferral_and_it_fires_at_its_new_time(engine):
    # held by quiet hours until 07:00, then moved by the user to 09:00 the next day: the old deferral must not
    # make it look 26 hours late (it would be expired as stale instead of sent)
    assert engine.api.put_delivery_policy(NIGHT).status == 200
    created = schedule(engine)
    at(engine, T0_MS + 61_000)
    engine.harness.tick_and_drain()
    assert engine.api.get_message(created["uuid"]).data["task"]["deferredUntil"] == "2029-12-31T07:00:00.000Z"
    moved = engine.api.update(created["uuid"], {"nextSendAt": "2030-01-01T09:00:00.000Z", "userMessage": "later"})
    assert moved.status == 200, moved.text
    task = engine.api.get_message(created["uuid"]).data["task"]
    assert "deferredUntil" not in task and task["nextSendAt"] == "2030-01-01T09:00:00.000Z"
    at(engine, T0_MS + 7 * HOUR)
    assert engine.harness.tick_and_drain()["claimedTasks"] == 0  # the old wake-up is gone
    at(engine, T0_MS + 33 * HOUR)
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["later"]
    assert engine.api.get_message(created["uuid"]).code == "TASK_NOT_FOUND"


def test_editing_a_deferred_task_keeps_its_deferral(engine):
    assert engine.api.put_delivery_policy(NIGHT).status == 200
    created = schedule(engine)
    at(engine, T0_MS + 61_000)
    engine.harness.tick_and_drain()
    edited = engine.api.update(created["uuid"], {"userMessage": "edited"})
    assert edited.status == 200, edited.text
    task = engine.api.get_message(created["uuid"]).data["task"]
    assert task["deferredUntil"] == "2029-12-31T07:00:00.000Z" and task["status"] == "pending"
    at(engine, T0_MS + 7 * HOUR)
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["edited"]


def test_instant_messages_are_exempt(engine):
    assert engine.api.put_delivery_policy(NIGHT).status == 200  # T0 is 00:00 UTC: inside the quiet hours
    resp = engine.api.schedule(
        {"contactName": "Rei", "messageType": "instant", "userMessage": "now", "firstSendTime": FIRST}
    )
    assert resp.status == 200, resp.text
    assert [p["message"] for p in engine.push.payloads()] == ["now"]


def test_recurring_task_deferred_past_its_next_occurrence_is_fast_forwarded(engine):
    # a cap of one fire a week: the second day's occurrence is reached while the first is still deferred
    assert engine.api.put_delivery_policy({"caps": [{"scope": "user", "max": 1, "windowMinutes": 10080}]}).status == 200
    schedule(engine, userMessage="first", firstSendTime="2029-12-31T00:00:30.000Z")
    daily = schedule(engine, userMessage="daily", recurrenceType="daily")
    at(engine, T0_MS + 61_000)
    summary = engine.harness.tick_and_drain()
    assert summary["claimedTasks"] == 2
    assert [p["message"] for p in engine.push.payloads()] == ["first"]
    task = engine.api.get_message(daily["uuid"]).data["task"]
    # the stale rules moved it to its next occurrence instead of letting it pile up behind the cap
    assert task["nextSendAt"] == "2030-01-01T00:01:00.000Z"
    assert task["lastError"]["reason"] == "stale"
    assert "deferredUntil" not in task


def test_cap_two_per_hour_five_due_none_lost_none_twice(engine):
    assert engine.api.put_delivery_policy({"caps": [{"scope": "user", "max": 2, "windowMinutes": 60}]}).status == 200
    for i in range(5):
        schedule(engine, userMessage=f"m{i}")
    at(engine, T0_MS + 61_000)
    engine.harness.tick_and_drain()
    assert len(engine.push.payloads()) == 2
    for hour in (1, 2):
        at(engine, T0_MS + hour * HOUR)
        engine.harness.tick_and_drain()
        assert len(engine.push.payloads()) == min(5, 2 + 2 * hour)
    messages = sorted(p["message"] for p in engine.push.payloads())
    assert messages == [f"m{i}" for i in range(5)]
    assert engine.api.list_messages().data["pagination"]["total"] == 0


def test_character_caps_count_per_character(engine):
    assert (
        engine.api.put_delivery_policy({"caps": [{"scope": "character", "max": 1, "windowMinutes": 60}]}).status == 200
    )
    for char in ("a", "a", "b"):
        schedule(engine, userMessage=char, metadata={"charId": char})
    schedule(engine, userMessage="none")  # no character: not limited by a character cap
    at(engine, T0_MS + 61_000)
    engine.harness.tick_and_drain()
    assert sorted(p["message"] for p in engine.push.payloads()) == ["a", "b", "none"]
    at(engine, T0_MS + HOUR)
    engine.harness.tick_and_drain()
    assert sorted(p["message"] for p in engine.push.payloads()) == ["a", "a", "b", "none"]


def test_capabilities_list_delivery_policy(api):
    assert "delivery-policy" in api.capabilities().body["features"]
    assert uuid.UUID(api.user_id)
