"""Exactly-once delivery under racing ticks, duplicate SQS deliveries and a consumer killed mid-delivery,
decided by DynamoDB Local's conditional writes (moto cannot prove this: its conditions are not atomic)."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from amsg.adapters.dynamo.keys import due_shard
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tick import run_tick
from amsg.ports import NewTask

from tests.support.ddb_engine import (
    T0_MS,
    Killed,
    MemoryQueue,
    RecordingPushSender,
    ddb_context,
    race,
    seed_fixed_task,
    with_fakes,
)
from tests.support.ddb_limits import table_clients

pytestmark = pytest.mark.ddb_local
DUE_MS = T0_MS + 60_000


def seed(ctx, users: int, per_user: int, message: str, recurrence: str = "none") -> list[tuple[str, str]]:
    tasks = []
    for _ in range(users):
        user = str(uuid.uuid4())
        for _ in range(per_user):
            tasks.append((user, seed_fixed_task(ctx, user, message, recurrence=recurrence, due_ms=DUE_MS)))
    return tasks


def test_two_ticks_and_two_consumers_push_every_occurrence_exactly_once(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    tasks = seed(ctx, users=12, per_user=10, message="第一句。第二句！")
    ctx.clock.current_ms = T0_MS + 61_000

    summaries = race(ctx, queue, ticks=2, consumers=2, duplicate=True)

    counts = sender.counts()
    assert len(counts) == 2 * len(tasks)
    assert set(counts.values()) == {1}, [m for m, c in counts.items() if c > 1][:5]
    assert sum(s["claimedTasks"] for s in summaries) == len(tasks)  # each task claimed by exactly one tick
    assert all(ctx.tasks.find_task(task_uuid) is None for _, task_uuid in tasks)  # one-shots deleted


@pytest.mark.parametrize("kill", ["before_send", "after_send"])
def test_consumer_killed_mid_delivery_is_taken_over_without_duplicates(ddb_local_endpoint, ddb_local_table, kill):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    ((user, task_uuid),) = seed(ctx, users=1, per_user=1, message="一。二。三。")
    task_id = ctx.tasks.find_task(task_uuid).id
    occurrence = T0_MS + 60_000
    second = f"msg_task_{task_id}@{occurrence}_1"
    (sender.kill_before if kill == "before_send" else sender.kill_after).add(second)

    ctx.clock.current_ms = T0_MS + 61_000
    assert run_tick(ctx)["enqueuedTasks"] == 1
    message = parse_task_message(json.dumps(queue.items.get_nowait()))
    with pytest.raises(Killed):
        run_message(ctx, message, remaining_ms=lambda: 100_000, owner="doomed")

    # the lease is still live: nobody can take the task over yet, and the stale message does nothing
    assert run_tick(ctx)["claimedTasks"] == 0
    # the lease the task holds: the run lease, or the tick's claim lease when the adoption kept that one
    ctx.clock.current_ms = ctx.tasks.find_task(task_uuid).lease_until_ms + 1_000
    summary = run_tick(ctx)
    assert summary["claimedTasks"] == 1
    assert run_message(ctx, message, remaining_ms=lambda: 100_000, owner="late")["skipped"] == "claim_not_current"
    takeover = parse_task_message(json.dumps(queue.items.get_nowait()))
    result = run_message(ctx, takeover, remaining_ms=lambda: 100_000, owner="takeover")
    assert result["successCount"] == 1
    # the dead run's push has an unknown outcome (sent or not, answered or not): the takeover pushes nothing
    # more of the occurrence, the rest waits in the outbox for the pull (docs/delivery.md)
    assert result["details"]["redeliveredTasks"] == [{"taskId": task_id, "pushedCount": 0}]
    assert result["details"]["unconfirmedTasks"] == [{"taskId": task_id, "unconfirmedCount": 1}]

    counts = sender.counts()
    assert set(counts.values()) == {1}
    expected = {f"{task_uuid}/msg_task_{task_id}@{occurrence}_0"}
    if kill == "after_send":
        expected.add(f"{task_uuid}/{second}")
    assert set(counts) == expected
    # nothing is lost: every segment stays in the outbox for the client to pull
    rows = ctx.outbox.list_unacked(user, 0, 50, ctx.now_ms())
    assert [row.message_id for row in rows] == [f"msg_task_{task_id}@{occurrence}_{i}" for i in range(3)]
    assert ctx.tasks.find_task(task_uuid) is None


@pytest.mark.parametrize("shards", [1, 4])
def test_racing_ticks_release_one_task_per_serialize_group_in_due_order(ddb_local_endpoint, ddb_local_table, shards):
    """With several due-index shards the tick merges them by due time, so the earlier task of a group goes
    first even when it lives in another shard."""
    ctx = ddb_context(
        ddb_local_endpoint,
        ddb_local_table,
        AMSG_HOOKS_MODULE="tests.support.hooks_serialize",
        AMSG_DUE_SHARDS=str(shards),
    )
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    user = str(uuid.uuid4())
    key = ctx.user_key(user)
    ctx.subscriptions.put_push_subscription(user, encrypt_for_storage(compact_json({"endpoint": "https://x"}), key), 1)
    uuids = [str(uuid.uuid4()) for _ in range(6)]
    if shards > 1:  # the earlier tasks in a later shard than the later ones
        uuids.sort(key=lambda u: -due_shard(u, shards))
        assert due_shard(uuids[0], shards) > due_shard(uuids[-1], shards)
    for i in range(6):
        payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": f"m{i}", "metadata": {"group": "g"}}
        ctx.tasks.create_task(
            NewTask(
                user,
                uuids[i],
                encrypt_for_storage(compact_json(payload), key),
                "fixed",
                T0_MS + 60_000 + i * 1000,
                T0_MS,
            )
        )
    ctx.clock.current_ms = T0_MS + 120_000
    for _ in range(6):
        summaries: list[dict] = []
        barrier = threading.Barrier(3)

        def one_tick(n: int) -> None:
            barrier.wait()
            summaries.append(run_tick(ctx, owner=f"tick-{n}"))

        threads = [threading.Thread(target=one_tick, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(s["claimedTasks"] for s in summaries) == 1  # the gate and the claim are one atomic step
        body = queue.items.get_nowait()
        assert queue.items.empty()
        run_message(ctx, parse_task_message(json.dumps(body)), remaining_ms=lambda: 100_000, owner="c")
    assert [p["message"] for p in sender.sent] == [f"m{i}" for i in range(6)]


def test_push_service_5xx_then_410_on_dynamodb_local(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    ((_, task_uuid),) = seed(ctx, users=1, per_user=1, message="一。二。")
    sender.statuses = [201, 503]  # first segment accepted, second refused: retry only the second
    ctx.clock.current_ms = T0_MS + 61_000

    def tick_and_run() -> dict:
        run_tick(ctx)
        results = []
        while not queue.items.empty():
            message = parse_task_message(json.dumps(queue.items.get_nowait()))
            results.append(run_message(ctx, message, remaining_ms=lambda: 100_000, owner="c"))
        return results[-1] if results else {}

    first = tick_and_run()
    assert first["details"]["failedTasks"][0]["retryCount"] == 1
    row = ctx.tasks.find_task(task_uuid)
    assert row.retry_count == 1 and json.loads(row.last_error)["pushStatus"] == 503
    assert tick_and_run() == {}  # back-off honoured: nothing claimed before retry_after
    ctx.clock.advance(120_000)
    second = tick_and_run()
    assert second["details"]["redeliveredTasks"][0]["pushedCount"] == 1
    assert [p["message"] for p in sender.sent] == ["一。", "二。"]  # nothing lost, nothing twice
    assert ctx.tasks.find_task(task_uuid) is None

    ((_, gone_uuid),) = seed(ctx, users=1, per_user=1, message="x")
    sender.statuses = [410]
    ctx.clock.advance(61_000)
    tick_and_run()
    row = ctx.tasks.find_task(gone_uuid)
    assert row.status == "failed" and json.loads(row.last_error)["pushStatus"] == 410


class Throttle:
    """Answers selected DynamoDB calls with a throttling error before they reach DynamoDB Local."""

    def __init__(self, operations: set[str], every: int) -> None:
        self.operations, self.every, self.seen, self.throttled = operations, every, 0, 0

    def __call__(self, request, **kwargs):  # botocore 'before-send' hook
        from botocore.awsrequest import AWSResponse

        target = request.headers.get("X-Amz-Target", b"")
        target = target.decode() if isinstance(target, bytes) else target
        if target.split(".")[-1] not in self.operations:
            return None
        self.seen += 1
        if self.seen % self.every:
            return None
        self.throttled += 1
        body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException", "message": "slow down"})

        class Raw:
            def stream(self, **_):
                yield body.encode()

        return AWSResponse(request.url, 400, {"x-amzn-requestid": "t"}, Raw())


@pytest.mark.parametrize("claim_writes", ["single", "transaction"])
def test_throttled_dynamodb_loses_no_task_and_sends_nothing_twice(ddb_local_endpoint, ddb_local_table, claim_writes):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table, AMSG_CLAIM_WRITES=claim_writes)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    tasks = seed(ctx, users=2, per_user=3, message="甲。乙。")
    throttle = Throttle({"UpdateItem", "TransactWriteItems", "BatchExecuteStatement", "GetItem", "Query"}, every=4)
    for client in table_clients(ctx.tasks.db):
        client.meta.events.register("before-send.dynamodb", throttle)
    ctx.clock.current_ms = T0_MS + 61_000
    summary = run_tick(ctx)
    while not queue.items.empty():
        message = parse_task_message(json.dumps(queue.items.get_nowait()))
        run_message(ctx, message, remaining_ms=lambda: 100_000, owner="c")
    assert throttle.throttled >= 5  # the SDK retried them (standard mode)
    assert summary["claimedTasks"] == len(tasks)
    counts = sender.counts()
    assert len(counts) == 2 * len(tasks) and set(counts.values()) == {1}


@pytest.mark.parametrize("claim_writes", ["single", "transaction"])
def test_a_claim_batch_claims_what_it_may_and_reads_back_each_fence(ddb_local_endpoint, ddb_local_table, claim_writes):
    """claim_many on DynamoDB Local, both ways of writing claims: with one transaction (which fails as a whole)
    or one conditional write per claim, the tasks whose condition fails (leased by another tick, another
    occurrence, deleted) are dropped and the rest claimed, each with its own claim version; concurrent batches
    over the same tasks claim each task once."""
    from amsg.ports import CLAIM_ALONE, ClaimWanted

    ctx = ddb_context(ddb_local_endpoint, ddb_local_table, AMSG_CLAIM_WRITES=claim_writes)
    tasks = seed(ctx, users=5, per_user=5, message="一。")
    now, lease = T0_MS + 61_000, T0_MS + 361_000
    wanted = [ClaimWanted(user, task_uuid, DUE_MS) for user, task_uuid in tasks]
    assert len(wanted) == ctx.claims.claim_batch
    other = ctx.claims.claim(*tasks[0], expected_next_send_at_ms=DUE_MS, now_ms=now, lease_until_ms=lease, owner="b")
    assert other is not None and other.claim_version == 1
    ctx.tasks.delete_task(*tasks[1])
    wanted[2] = ClaimWanted(tasks[2][0], tasks[2][1], T0_MS)  # an occurrence the task has left
    results = ctx.claims.claim_many(wanted, now_ms=now, lease_until_ms=lease, owner="a")
    assert results[:3] == [None, None, None]
    assert [(r.uuid, r.claim_version, r.lease_until_ms) for r in results[3:]] == [(t, 1, lease) for _, t in tasks[3:]]

    # two batches racing over the same (now free again) tasks: each task is claimed by exactly one of them
    later, later_lease = T0_MS + 400_000, T0_MS + 700_000
    free = [ClaimWanted(user, task_uuid, DUE_MS) for user, task_uuid in tasks[3:]]
    outcomes: dict[str, list] = {}

    def claim_as(owner: str) -> None:
        outcomes[owner] = ctx.claims.claim_many(free, now_ms=later, lease_until_ms=later_lease, owner=owner)

    racers = [threading.Thread(target=claim_as, args=(owner,)) for owner in ("x", "y")]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    winners = [[row for row in outcomes[owner] if row is not None and row is not CLAIM_ALONE] for owner in ("x", "y")]
    claimed = sorted(row.uuid for rows in winners for row in rows)
    assert claimed == sorted(w.uuid for w in free)  # each once, none lost
    assert {row.claim_version for rows in winners for row in rows} == {2}
