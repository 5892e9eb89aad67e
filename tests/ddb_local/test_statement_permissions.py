"""Least privilege for the PartiQL statements (functions/permissions.toml): the moto journeys of
tests/template/test_iam.py run the table's single writes one request each (moto runs no conditional PartiQL), so
here, on DynamoDB Local with statements on (the default), the deliveries of run_task (one-shot, recurring, two
segments, in an SQS batch run together) and an instant delivery of the schedule route make their calls: each
must be granted to that function, and every PartiQL action granted must be used."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from amsg.adapters.dynamo.coalescing import DynamoCoalescer
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.engine.instant import deliver_instant
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message, run_together
from amsg.engine.tick import run_tick
from amsg.ports import NewTask

from tests.support.aws_calls import Call, record_aws_calls
from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, seed_fixed_task, with_fakes
from tests.support.iam_needs import STATEMENT_PERMISSIONS, load_permissions, needs_of, permissions_of_call

pytestmark = pytest.mark.ddb_local


def _granted_and_used(function: str, calls: list[Call]) -> None:
    needs = needs_of(load_permissions()[function])
    used = set().union(*(permissions_of_call(c) for c in calls if c.service == "dynamodb"))
    assert used - needs == set(), f"{function} calls what functions/permissions.toml does not grant"
    assert needs & STATEMENT_PERMISSIONS == used & STATEMENT_PERMISSIONS, f"{function}'s PartiQL grants and uses"


@pytest.fixture
def wired(ddb_local_endpoint: str, ddb_local_table: str) -> tuple[Any, RecordingPushSender, MemoryQueue]:
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    return ctx, sender, queue


def test_run_task_statements_are_granted(wired: tuple[Any, RecordingPushSender, MemoryQueue]) -> None:
    ctx, sender, queue = wired
    ctx.coalescer = DynamoCoalescer(ctx.claims.db, max_wait_s=2.0)
    for text, recurrence in (("一。", "none"), ("二。", "daily"), ("三。四。", "none")):
        seed_fixed_task(ctx, str(uuid.uuid4()), text, recurrence=recurrence)
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    messages = [parse_task_message(json.dumps(queue.items.get_nowait())) for _ in range(3)]
    jobs = [lambda m=m: run_message(ctx, m, remaining_ms=lambda: 100_000, owner="run") for m in messages]
    with record_aws_calls() as recorder:
        results = run_together(ctx, jobs, keys=[m.user_id for m in messages])
    assert [r["successCount"] for r in results] == [1, 1, 1] and len(sender.sent) == 4
    assert any(c.operation == "BatchExecuteStatement" for c in recorder.calls)
    _granted_and_used("RunTaskFunction", recorder.calls)


def test_instant_delivery_statements_are_granted(wired: tuple[Any, RecordingPushSender, MemoryQueue]) -> None:
    ctx, sender, _ = wired
    user, task_uuid = str(uuid.uuid4()), str(uuid.uuid4())
    key = ctx.user_key(user)
    sub = {"endpoint": "https://push.invalid/x", "keys": {}}
    ctx.subscriptions.put_push_subscription(user, encrypt_for_storage(compact_json(sub), key), 1)
    payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": "现在。", "metadata": {}}
    stored = encrypt_for_storage(compact_json(payload), key)
    ctx.tasks.create_task(NewTask(user, task_uuid, stored, "fixed", T0_MS, T0_MS))
    with record_aws_calls() as recorder:
        deliver_instant(ctx, user, task_uuid, payload)
    assert len(sender.sent) == 1 and ctx.tasks.find_task(task_uuid) is None
    _granted_and_used("ScheduleMessageFunction", recorder.calls)
