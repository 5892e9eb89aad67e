"""Quiet hours and frequency caps end to end over real HTTP: the local stack (gateway → real handlers →
DynamoDB → tick → SQS → run_task) with its offset clock (``POST /_local/clock``), a loopback push service that
decrypts every push, and an independent wire client."""

from __future__ import annotations

import uuid

import pytest
from amsg.timeutil import iso_from_ms, parse_iso_ms
from amsg_local.cli import LocalStack

from tests.support.wire_client import WireClient, http_transport

pytestmark = pytest.mark.e2e
MINUTE = 60_000
HOUR = 60 * MINUTE


@pytest.fixture
def world(shared_stack: dict) -> dict:
    return shared_stack


def clock(stack: LocalStack, **body: int) -> int:
    return stack.post_local("/_local/clock", body)["nowMs"]


def tick(stack: LocalStack) -> dict:
    return stack.post_local("/_local/tick")


@pytest.fixture
def user(world) -> WireClient:
    client = WireClient(http_transport(world["stack"].base_url), str(uuid.uuid4()))
    client.init()
    subscription = world["push"].subscribe()
    assert client.put_subscription(subscription.to_json()).status == 200
    client.endpoint_id = subscription.endpoint_id  # type: ignore[attr-defined]
    return client


def messages(world, user) -> list[str]:
    return [p["message"] for p in world["push"].payloads(user.endpoint_id)]


def test_due_at_two_in_quiet_hours_is_pushed_at_seven(world, user):
    stack = world["stack"]
    # Tokyo (UTC+9): 02:00 local on 2030-04-02 is 17:00Z on 04-01; 07:00 local is 22:00Z
    put = user.put_delivery_policy({"quietHours": {"start": "23:00", "end": "07:00", "tzId": "Asia/Tokyo"}})
    assert put.status == 200, put.text
    due = parse_iso_ms("2030-04-01T17:00:00Z")
    clock(stack, nowMs=due - 5 * MINUTE)
    created = user.schedule(
        {"contactName": "Rei", "messageType": "fixed", "userMessage": "おはよう", "firstSendTime": iso_from_ms(due)}
    )
    assert created.status == 201, created.text
    task_id, task_uuid = created.data["id"], created.data["uuid"]
    clock(stack, nowMs=due + 30_000)
    tick(stack)
    assert messages(world, user) == []
    task = user.get_message(task_uuid).data["task"]
    assert task["deferredUntil"] == "2030-04-01T22:00:00.000Z" and task["retryCount"] == 0
    clock(stack, nowMs=parse_iso_ms("2030-04-01T21:59:00Z"))
    tick(stack)
    assert messages(world, user) == []
    clock(stack, nowMs=parse_iso_ms("2030-04-01T22:00:10Z"))
    tick(stack)
    (push,) = world["push"].payloads(user.endpoint_id)
    assert push["message"] == "おはよう"
    assert push["messageId"] == f"msg_task_{task_id}@{due}_0" and push["occurrenceMs"] == due
    assert user.get_message(task_uuid).code == "TASK_NOT_FOUND"


def test_cap_two_per_hour_with_five_due_tasks(world, user):
    stack = world["stack"]
    assert user.put_delivery_policy({"caps": [{"scope": "user", "max": 2, "windowMinutes": 60}]}).status == 200
    hour = parse_iso_ms("2030-05-01T10:00:00Z")
    clock(stack, nowMs=hour)
    for i in range(5):
        resp = user.schedule(
            {
                "contactName": "Rei",
                "messageType": "fixed",
                "userMessage": f"m{i}",
                "firstSendTime": iso_from_ms(hour + MINUTE),
            }
        )
        assert resp.status == 201, resp.text
    clock(stack, nowMs=hour + MINUTE + 1000)
    tick(stack)
    assert len(messages(world, user)) == 2
    deferred = [t for t in user.list_messages().data["tasks"]]
    assert len(deferred) == 3
    for task in deferred:
        assert user.get_message(task["uuid"]).data["task"]["deferredUntil"] == "2030-05-01T11:00:00.000Z"
    clock(stack, nowMs=hour + HOUR + 1000)
    tick(stack)
    assert len(messages(world, user)) == 4
    clock(stack, nowMs=hour + 2 * HOUR + 1000)
    tick(stack)
    got = messages(world, user)
    assert sorted(got) == [f"m{i}" for i in range(5)]  # none lost, none twice
    assert user.list_messages().data["pagination"]["total"] == 0
    assert "delivery-policy" in user.capabilities().body["features"]
