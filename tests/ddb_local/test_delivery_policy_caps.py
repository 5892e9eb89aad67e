"""Frequency caps are exact under racing consumers, decided by DynamoDB Local's transactions (moto's conditional
writes are not atomic under threads, so only this proves it): the cap counter is conditionally incremented in
the same transaction as the send claim, fenced by the task claim."""

from __future__ import annotations

import uuid

import pytest
from amsg.adapters.dynamo import keys
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.ports import NewTask

from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, race, with_fakes

pytestmark = pytest.mark.ddb_local
HOUR = 3_600_000
DUE_MS = T0_MS + 60_000
CAP = 3
TASKS = 16


def seed(ctx, user: str, count: int, characters: list[str]) -> list[str]:
    key = ctx.user_key(user)
    ctx.subscriptions.put_push_subscription(
        user, encrypt_for_storage(compact_json({"endpoint": "https://push.invalid/x", "keys": {}}), key), 1
    )
    policy = {"quietHours": None, "caps": [{"scope": "user", "max": CAP, "windowMinutes": 60}]}
    ctx.policies.put_policy(user, encrypt_for_storage(compact_json(policy), key), T0_MS)
    uuids = []
    for index in range(count):
        task_uuid = str(uuid.uuid4())
        payload = {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": f"第{index}条。第二句！",  # two pushes per fire: counted once
            "recurrenceType": "none",
            "metadata": {"charId": characters[index % len(characters)]},
        }
        ctx.tasks.create_task(
            NewTask(user, task_uuid, encrypt_for_storage(compact_json(payload), key), "fixed", DUE_MS, T0_MS)
        )
        uuids.append(task_uuid)
    return uuids


def fires(sender: RecordingPushSender) -> dict[str, int]:
    """Pushes per occurrence (task uuid), from what the push service accepted."""
    counts: dict[str, int] = {}
    for push in sender.sent:
        counts[push["taskUuid"]] = counts.get(push["taskUuid"], 0) + 1
    return counts


def test_racing_consumers_never_exceed_a_cap_and_lose_nothing(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    user = str(uuid.uuid4())
    tasks = seed(ctx, user, TASKS, ["a", "b"])

    window = 0
    while len(fires(sender)) < TASKS:
        assert window < TASKS, "tasks were lost"
        ctx.clock.current_ms = T0_MS + 61_000 + window * HOUR
        before = len(fires(sender))
        race(ctx, queue, ticks=1, consumers=4, duplicate=True)
        counts = fires(sender)
        # never more than the cap in one window, and each window that had work used all of it
        assert len(counts) - before == min(CAP, TASKS - before), (window, len(counts) - before)
        assert set(counts.values()) == {2}  # both pushes of each fire, each exactly once
        window += 1
        start = (T0_MS + window * HOUR) - (T0_MS + window * HOUR) % HOUR
        counter = ctx.policies.db.get(keys.cap_counter_key(user, f"u#60#{start - HOUR}"))
        assert counter is not None and len(counter["occ"]) == min(CAP, TASKS - before)
        assert int(counter["ttl"]) == start // 1000 + 86_400
    assert sorted(fires(sender)) == sorted(tasks)
    assert window == -(-TASKS // CAP)
    assert all(ctx.tasks.find_task(task_uuid) is None for task_uuid in tasks)  # one-shots delivered and deleted
