"""Exactly once under faults, on DynamoDB Local (docs/delivery.md): a push answered after the sender's timeout is
never sent again, a superseded run touches nothing of the new claim's, a settlement that failed after the pushes
is finished by a later run, and a gone endpoint gets no second push."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import pytest
from amsg.adapters.webpush_sender import WebPushSender
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tick import run_tick
from amsg.errors import StoreUnavailable
from amsg.vapid import generate_vapid_keys

from tests.support.ddb_engine import (
    T0_MS,
    Killed,
    MemoryQueue,
    RecordingPushSender,
    ddb_context,
    seed_fixed_task,
    with_fakes,
)
from tests.support.fake_push import FakePushService

pytestmark = pytest.mark.ddb_local
DUE_MS = T0_MS + 60_000


def _task(ctx, user: str, message: str, recurrence: str = "none", subscription: dict | None = None) -> str:
    return seed_fixed_task(ctx, user, message, recurrence=recurrence, due_ms=DUE_MS, subscription=subscription)


def _drain(ctx, queue: MemoryQueue, owner: str = "c") -> list[dict[str, Any]]:
    results = []
    while not queue.items.empty():
        message = parse_task_message(json.dumps(queue.items.get_nowait()))
        results.append(run_message(ctx, message, remaining_ms=lambda: 100_000, owner=owner))
    return results


def _outbox_ids(ctx, user: str) -> list[str]:
    return [row.message_id for row in ctx.outbox.list_unacked(user, 0, 50, ctx.now_ms())]


# ---- a push whose answer came too late ----------------------------------------------------------------------


def test_a_push_accepted_but_answered_after_the_timeout_is_never_sent_again(ddb_local_endpoint, ddb_local_table):
    public, private = generate_vapid_keys()
    with FakePushService(vapid_public_key=public) as service:
        sub = service.subscribe()
        service.set_delay(sub.endpoint_id, 0.6)  # the service takes every push, and answers after the timeout
        ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
        queue = MemoryQueue()
        with WebPushSender(private, public, "ops@example.test", timeout_s=0.2) as sender:
            with_fakes(ctx, sender, queue)  # type: ignore[arg-type]
            user = str(uuid.uuid4())
            task_uuid = _task(ctx, user, "第一句。第二句！", subscription=sub.to_json())
            task_id = ctx.tasks.find_task(task_uuid).id
            ctx.clock.current_ms = T0_MS + 61_000
            for _ in range(4):  # the run, and every tick that could retry it
                run_tick(ctx)
                _drain(ctx, queue)
                ctx.clock.advance(10 * 60_000)
            received = [push.payload["messageId"] for push in service.received if push.payload]
        first = f"msg_task_{task_id}@{DUE_MS}_0"
        assert received == [first]  # sent once; its outcome unknown, nothing more goes to that endpoint
        assert ctx.tasks.find_task(task_uuid) is None  # settled: both segments are in the outbox for the pull
        both = [first, f"msg_task_{task_id}@{DUE_MS}_1"]
        assert _outbox_ids(ctx, user) == both
        (unconfirmed, waiting) = ctx.outbox.list_for_task(user, task_uuid, named=both)  # the task named them
        assert unconfirmed.unconfirmed_at is not None and unconfirmed.delivered_at is None
        assert waiting.sending_at is None and waiting.delivered_at is None


# ---- a superseded run ---------------------------------------------------------------------------------------


def test_a_stale_run_cancelled_after_a_new_claim_touches_no_row(ddb_local_endpoint, ddb_local_table):
    """The run's sandbox dies after the first push; the SQS message comes back while the tick claims the task
    again (claim version 2): the stale run reads the task under version 1, its adoption fails, and its
    cancellation must not delete the rows the new claim works."""
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    user = str(uuid.uuid4())
    task_uuid = _task(ctx, user, "一。二。")
    task_id = ctx.tasks.find_task(task_uuid).id
    ids = [f"msg_task_{task_id}@{DUE_MS}_{i}" for i in range(2)]
    sender.kill_after.add(ids[0])

    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    stale = parse_task_message(json.dumps(queue.items.get_nowait()))
    with pytest.raises(Killed):
        run_message(ctx, stale, remaining_ms=lambda: 100_000, owner="doomed")
    ctx.clock.advance(ctx.settings.tick_claim_lease_ms + 1_000)  # every lease has expired

    opened = ctx.claims.open_run

    def open_then_lose_the_claim(*args: Any, **kwargs: Any):
        snapshot = opened(*args, **kwargs)  # the stale run read the task under version 1 ...
        ctx.claims.open_run = opened
        assert run_tick(ctx)["claimedTasks"] == 1  # ... and the tick claims it again (version 2)
        return snapshot

    ctx.claims.open_run = open_then_lose_the_claim
    result = run_message(ctx, stale, remaining_ms=lambda: 100_000, owner="redelivered")
    assert result["details"]["cancelledTasks"]  # its adoption failed: it stopped
    assert _outbox_ids(ctx, user) == ids  # and deleted nothing

    _drain(ctx, queue, owner="new-claim")
    counts = sender.counts()
    assert set(counts.values()) == {1}  # nothing pushed twice
    assert _outbox_ids(ctx, user) == ids  # nothing lost: every segment pushed or waiting for the pull
    assert ctx.tasks.find_task(task_uuid) is None


def test_a_superseded_run_does_not_discard_a_row_the_new_claim_took(ddb_local_endpoint, ddb_local_table):
    """The stale run's cancellation comes while the new claim holds a send claim on a row: the row stays."""
    from amsg.engine.outcomes import record_cancelled
    from amsg.engine.summary import DeliverySummary

    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    user = str(uuid.uuid4())
    task_uuid = _task(ctx, user, "一。二。")
    ctx.clock.current_ms = T0_MS + 61_000
    lease = ctx.now_ms() + 300_000
    old = ctx.claims.claim(
        user, task_uuid, expected_next_send_at_ms=DUE_MS, now_ms=ctx.now_ms(), lease_until_ms=lease, owner="t"
    )
    assert old is not None
    from amsg.engine.sending import outbox_rows

    rows = outbox_rows(ctx, old, [{"messageId": "a"}, {"messageId": "b"}], ctx.codec(user))
    assert ctx.claims.append_batch(old, rows, now_ms=ctx.now_ms(), lease_until_ms=None, owner="t")
    ctx.clock.current_ms = lease + 1
    new = ctx.claims.claim(
        user,
        task_uuid,
        expected_next_send_at_ms=DUE_MS,
        now_ms=ctx.now_ms(),
        lease_until_ms=lease + 300_000,
        owner="t2",
    )
    assert new is not None and new.claim_version == old.claim_version + 1
    taken = ctx.outbox.claim_send(user, "a", task_uuid=task_uuid, claim_version=new.claim_version, now_ms=ctx.now_ms())
    assert taken
    record_cancelled(ctx, old, DeliverySummary(total_tasks=1), "cancelled_mid_delivery")
    assert [r.message_id for r in ctx.outbox.list_for_task(user, task_uuid)] == ["a", "b"]


# ---- a settlement that failed after the pushes ----------------------------------------------------------------


class FailingSettle:
    """The settlement write fails through every retry (an outage) the first ``times`` calls, then applies."""

    def __init__(self, settle: Any, times: int) -> None:
        self.settle, self.times = settle, times

    def __call__(self, *args: Any, **kwargs: Any) -> bool:
        if self.times > 0:
            self.times -= 1
            raise StoreUnavailable("DynamoDB unavailable")
        return self.settle(*args, **kwargs)


@pytest.mark.parametrize(
    ("recurrence", "outage_ms"), [("none", 0), ("daily", 0), ("none", 7_200_000), ("daily", 7_200_000)]
)
def test_a_settlement_failed_after_the_pushes_is_finished_later(
    ddb_local_endpoint, ddb_local_table, recurrence, outage_ms
):
    """Also when the outage outlasts the stale window (an hour): the task is finished as delivered, not expired."""
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    user = str(uuid.uuid4())
    task_uuid = _task(ctx, user, "甲。乙。", recurrence=recurrence)
    sender.statuses = [201, 503]  # an earlier round fails: the task carries a lastError
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    _drain(ctx, queue)
    assert ctx.tasks.find_task(task_uuid).last_error is not None

    ctx.clock.advance(120_000)
    ctx.claims.settle = FailingSettle(ctx.claims.settle, times=1)  # the pushes go out, the settlement fails
    run_tick(ctx)
    _drain(ctx, queue)
    assert len(sender.sent) == 2

    ctx.clock.advance(outage_ms)
    for _ in range(3):  # later ticks and runs finish it
        ctx.clock.advance(10 * 60_000)
        run_tick(ctx)
        _drain(ctx, queue)
    assert [p["message"] for p in sender.sent] == ["甲。", "乙。"]  # nothing pushed again
    row = ctx.tasks.find_task(task_uuid)
    if recurrence == "none":
        assert row is None  # a one-shot is deleted, not left `sent`
    else:
        assert row is not None and row.status == "pending" and row.next_send_at_ms == DUE_MS + 86_400_000
        assert row.last_error is None and row.retry_count == 0
        payload = ctx.codec(user).decrypt_payload(row.encrypted_payload)
        assert "lastError" not in payload


# ---- a gone endpoint ------------------------------------------------------------------------------------------


def test_a_gone_endpoint_is_marked_once_and_never_pushed_again(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    user = str(uuid.uuid4())
    first = _task(ctx, user, "一。二。")
    second = _task(ctx, user, "三。")
    attempts: list[str] = []
    send = sender.send

    def gone(subscription: Any, payload: bytes | str, **kw: Any) -> int:
        attempts.append(json.loads(payload)["messageId"])
        sender.statuses = [410]
        return send(subscription, payload, **kw)

    sender.send = gone  # type: ignore[method-assign]
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    _drain(ctx, queue)
    assert len(attempts) == 1  # one 410, then nothing more to that endpoint (the other task included)
    for task_uuid in (first, second):
        row = ctx.tasks.find_task(task_uuid)
        assert row.status == "failed"
    stored = ctx.subscriptions.get_push_subscription(user)
    assert stored is not None and stored.gone
    ctx.subscriptions.put_push_subscription(user, stored.encrypted_subscription, 2)  # the client subscribes again
    assert not ctx.subscriptions.get_push_subscription(user).gone


def test_a_sandbox_killed_between_the_410_and_its_writes_sends_nothing_more(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    user = str(uuid.uuid4())
    task_uuid = _task(ctx, user, "一。二。")
    attempts: list[str] = []

    def gone_then_die(subscription: Any, payload: bytes | str, **kw: Any) -> int:
        attempts.append(json.loads(payload)["messageId"])
        raise Killed("the 410 arrived; the sandbox died before writing anything")

    sender.send = gone_then_die  # type: ignore[method-assign]
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    with pytest.raises(Killed):
        _drain(ctx, queue)
    for _ in range(3):
        ctx.clock.advance(10 * 60_000)
        run_tick(ctx)
        _drain(ctx, queue)
    assert len(attempts) == 1  # the takeover does not push to an endpoint whose last answer is unknown
    assert ctx.tasks.find_task(task_uuid) is None or ctx.tasks.find_task(task_uuid).status != "pending"
    assert len(_outbox_ids(ctx, user)) == 2  # both segments wait for the pull


def test_late_answers_in_racing_batches_push_nothing_twice(ddb_local_endpoint, ddb_local_table):
    """Racing ticks and consumers with duplicated SQS deliveries, a late answer on some first segments: every
    segment is pushed at most once, and every one is pushed or waiting in the outbox."""
    from tests.support.ddb_engine import race

    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    users = [str(uuid.uuid4()) for _ in range(6)]
    tasks = [(user, _task(ctx, user, "甲。乙。")) for user in users for _ in range(4)]
    for index, (_, task_uuid) in enumerate(tasks):
        if index % 3 == 0:
            sender.late.add(f"msg_task_{ctx.tasks.find_task(task_uuid).id}@{DUE_MS}_0")
    ctx.clock.current_ms = T0_MS + 61_000
    race(ctx, queue, ticks=2, consumers=2, duplicate=True)
    counts = sender.counts()
    assert set(counts.values()) == {1}
    for user in users:  # nothing lost: every task's two rows wait in the outbox
        per_task = Counter(row.task_uuid for row in ctx.outbox.list_unacked(user, 0, 50, ctx.now_ms()))
        assert sorted(per_task.values()) == [2, 2, 2, 2]
    for _, task_uuid in tasks:
        assert ctx.tasks.find_task(task_uuid) is None  # all settled
    late_tasks = {t for i, (_, t) in enumerate(tasks) if i % 3 == 0}
    assert {key.split("/")[0] for key in counts} == {t for _, t in tasks}
    assert sum(1 for key in counts if key.split("/")[0] in late_tasks) == len(late_tasks)  # the second waits
