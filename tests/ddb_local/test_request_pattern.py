"""The folded request pattern of run_task on DynamoDB Local: one read (task, subscription, outbox counter), one
transaction that appends the batch, adopts the claim and claims the first push, one transaction that settles the
task and marks the last push delivered — and the fallbacks that keep exactly-once when a fold does not apply."""

from __future__ import annotations

import json
import uuid

import pytest
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tick import run_tick

from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, seed_fixed_task, with_fakes

pytestmark = pytest.mark.ddb_local


def _seed(ctx, message: str, recurrence: str = "none") -> tuple[str, str]:
    user = str(uuid.uuid4())
    return user, seed_fixed_task(ctx, user, message, recurrence=recurrence)


def _tick_and_run(ctx, queue: MemoryQueue) -> list[dict]:
    run_tick(ctx)
    results = []
    while not queue.items.empty():
        message = parse_task_message(json.dumps(queue.items.get_nowait()))
        results.append(run_message(ctx, message, remaining_ms=lambda: 100_000, owner="c"))
    return results


def _rows(ctx, user: str) -> list[dict]:
    return list(ctx.outbox.db.query_prefix(f"U#{user}", "O#"))


def _run_batch_of_five(ctx, queue: MemoryQueue) -> tuple[list[dict], list[str]]:
    """Tick at the due time, then run the five enqueued messages together as the run_task handler runs one SQS
    batch (a generous wait makes the merges deterministic here; production waits at most 20 ms for a sibling):
    their results and the DynamoDB operations they sent."""
    from amsg.adapters.dynamo.coalescing import DynamoCoalescer
    from amsg.engine.run_task import run_together

    from tests.support.aws_calls import record_aws_calls

    ctx.coalescer = DynamoCoalescer(ctx.claims.db, max_wait_s=2.0)
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    messages = [parse_task_message(json.dumps(queue.items.get_nowait())) for _ in range(5)]
    jobs = [
        lambda m=m, i=i: run_message(ctx, m, remaining_ms=lambda: 100_000, owner=f"run:{i}")
        for i, m in enumerate(messages)
    ]
    with record_aws_calls() as recorder:
        results = run_together(ctx, jobs, keys=[m.user_id for m in messages])
    return results, [c.operation for c in recorder.calls if c.service == "dynamodb"]


@pytest.fixture
def wired(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    return ctx, sender, queue


@pytest.mark.parametrize("recurrence", ["none", "daily"])
def test_every_pushed_row_is_marked_delivered_and_nothing_stays_claimed(wired, recurrence):
    ctx, sender, queue = wired
    user, task_uuid = _seed(ctx, "一。二。三。", recurrence)
    ctx.clock.current_ms = T0_MS + 61_000
    (result,) = _tick_and_run(ctx, queue)
    assert result["successCount"] == 1
    rows = _rows(ctx, user)
    assert len(rows) == 3 and len(sender.sent) == 3
    assert all(row.get("delivered_at") and row.get("sending_at") for row in rows)
    task = ctx.tasks.find_task(task_uuid)
    if recurrence == "none":
        assert task is None
    else:
        assert task.outbox_occurrence_ms == T0_MS + 60_000 and task.lease_until_ms is None


def test_a_batch_already_in_the_outbox_without_the_task_marker_is_not_sent_twice(wired):
    """Rows appended without the occurrence marker (an earlier version, or the general append path): the folded
    append conflicts on the existing rows and the run falls back to the batch found in the outbox."""
    ctx, sender, queue = wired
    user, task_uuid = _seed(ctx, "甲。乙。")
    sender.statuses = [201, 503]  # first row out, second refused: a retry with the batch in the outbox
    ctx.clock.current_ms = T0_MS + 61_000
    (first,) = _tick_and_run(ctx, queue)
    assert first["details"]["failedTasks"][0]["retryCount"] == 1
    ctx.outbox.db.table.update_item(Key={"PK": f"U#{user}", "SK": f"T#{task_uuid}"}, UpdateExpression="REMOVE ob_occ")
    assert ctx.tasks.find_task(task_uuid).outbox_occurrence_ms is None
    ctx.clock.advance(120_000)
    (second,) = _tick_and_run(ctx, queue)
    assert second["details"]["redeliveredTasks"][0]["pushedCount"] == 1
    assert [p["message"] for p in sender.sent] == ["甲。", "乙。"]
    assert ctx.tasks.find_task(task_uuid) is None


def test_a_payload_updated_during_delivery_still_settles_and_marks_delivered(wired):
    """The folded settle is conditioned on the payload revision read with the task; an update-message in
    between makes it fall back to the general delete, which still marks the pushed row delivered."""
    ctx, sender, queue = wired
    user, task_uuid = _seed(ctx, "原文")
    key = ctx.user_key(user)
    original = sender.send

    def send_and_update(subscription, payload, **kw):
        status = original(subscription, payload, **kw)
        row = ctx.tasks.find_task(task_uuid)
        updated = {"contactName": "Rei", "messageType": "fixed", "userMessage": "新文"}
        assert ctx.tasks.update_pending_task(
            user,
            task_uuid,
            encrypted_payload=encrypt_for_storage(compact_json(updated), key),
            next_send_at_ms=None,
            now_ms=ctx.now_ms(),
            expected_rev=row.rev,
        )
        return status

    sender.send = send_and_update
    ctx.clock.current_ms = T0_MS + 61_000
    (result,) = _tick_and_run(ctx, queue)
    assert result["successCount"] == 1
    assert ctx.tasks.find_task(task_uuid) is None
    (row,) = _rows(ctx, user)
    assert row.get("delivered_at")


def test_a_stale_message_reads_once_and_writes_nothing(wired):
    ctx, sender, queue = wired
    user, task_uuid = _seed(ctx, "只一次")
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    body = queue.items.get_nowait()
    message = parse_task_message(json.dumps(body))
    assert run_message(ctx, message, remaining_ms=lambda: 100_000, owner="a")["successCount"] == 1
    again = run_message(ctx, message, remaining_ms=lambda: 100_000, owner="b")
    assert again == {"skipped": "claim_not_current", "taskUuid": task_uuid}
    assert len(sender.sent) == 1 and len(_rows(ctx, user)) == 1


def test_a_batch_of_five_shares_one_read_and_one_transaction(wired):
    """Five users' one-shot tasks in one SQS batch, run together as the run_task handler does: one merged
    read, one merged append, then each settlement's single writes (the row's delivered mark, the task's delete, the
    uuid registry entry's delete: half the write units of one transaction, docs/decisions.md 38), every push exactly
    once and every row marked delivered. The marks of the five, the tasks' deletes of the five and the registry
    deletes of the five travel as one ``BatchExecuteStatement`` each (statements on, the default; decisions.md 43)."""
    ctx, sender, queue = wired
    seeded = [_seed(ctx, "早上好") for _ in range(5)]
    results, operations = _run_batch_of_five(ctx, queue)
    assert [r["successCount"] for r in results] == [1] * 5
    # the five marks, then the five tasks' fenced deletes, then the five registry entries' deletes: one statement
    # batch each
    assert sorted(operations) == ["BatchExecuteStatement"] * 3 + ["BatchGetItem", "TransactWriteItems"]
    assert sorted(sender.counts().values()) == [1] * 5
    for user, task_uuid in seeded:
        assert ctx.tasks.find_task(task_uuid) is None
        assert all(row.get("delivered_at") for row in _rows(ctx, user))


def test_a_batch_of_owned_tasks_checks_its_owners_in_one_read(wired):
    """Before firing, each owned task reads its owner (a retired owner's task never fires); the records of a
    batch make that read at the same point, so the five travel as one ``BatchGetItem`` (one per task before)."""
    from amsg.ports import NewTask, OwnerClaim

    ctx, sender, queue = wired
    for n in range(5):
        user = str(uuid.uuid4())
        key = ctx.user_key(user)
        sub = {"endpoint": "https://push.invalid/x", "keys": {}}
        ctx.subscriptions.put_push_subscription(user, encrypt_for_storage(compact_json(sub), key), 1)
        payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": f"早上好{n}"}
        claim = OwnerClaim(ref=f"ref-{n}", generation=0, meta=encrypt_for_storage("{}", key))
        stored = encrypt_for_storage(compact_json(payload), key)
        ctx.tasks.create_task(NewTask(user, str(uuid.uuid4()), stored, "fixed", T0_MS + 60_000, T0_MS, owner=claim))
    results, operations = _run_batch_of_five(ctx, queue)
    assert [r["successCount"] for r in results] == [1] * 5
    assert "GetItem" not in operations
    assert operations.count("BatchGetItem") == 2  # the run's read, then the owners' guard reads
    assert sorted(sender.counts().values()) == [1] * 5
