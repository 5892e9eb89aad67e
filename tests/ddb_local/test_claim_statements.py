"""Claim batches as one ``BatchExecuteStatement`` (``ClaimWrites=single``, the default), on DynamoDB Local: a batch
is one write request and one read back; a statement whose condition fails leaves the others applied; batches
racing each other and single claims claim each task once; a task written without ``claim_version`` is claimed
alone; a claimer killed after its batch was written and before the read back loses nothing. And the functions that
claim (the claimer; send-notifications on the multi-tenant line) are granted the PartiQL action their batches use
(the moto journeys of tests/template cannot send conditional PartiQL)."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from amsg.engine.claim_jobs import parse_claim_job, run_claim_job
from amsg.engine.summary import TickSummary
from amsg.engine.tenant_work import run_tenant_due_work
from amsg.engine.tick import run_tick
from amsg.ports import CLAIM_ALONE, ClaimWanted
from amsg.tenancy.scope import scoped_context

from tests.ddb_local.test_claim_fanout import LEASE_MS, PAGE, claim_all, deliver, drained, fan_out_world
from tests.ddb_local.test_statement_permissions import _granted_and_used
from tests.ddb_local.test_tenant_fairness import seed as seed_many
from tests.support.aws_calls import record_aws_calls
from tests.support.ddb_engine import (
    T0_MS,
    Killed,
    MemoryQueue,
    RecordingPushSender,
    ddb_context,
    seed_fixed_task,
    with_fakes,
)
from tests.support.ddb_limits import table_clients
from tests.support.iam_needs import permissions_of_call
from tests.support.template import project_template
from tests.support.tenants_stack import memory_tenants
from tests.template.test_iam_multi import granted_multi

pytestmark = pytest.mark.ddb_local
DUE_MS = T0_MS + 60_000
NOW, LEASE = T0_MS + 61_000, T0_MS + 361_000


def _operation(request) -> str:
    target = request.headers.get("X-Amz-Target", b"")
    return (target.decode() if isinstance(target, bytes) else target).split(".")[-1]


class Operations:
    """Records the DynamoDB operations a table's clients send (a botocore ``before-send`` hook)."""

    def __init__(self, db) -> None:
        self.seen: list[str] = []
        for client in table_clients(db):
            client.meta.events.register("before-send.dynamodb", self)

    def __call__(self, request, **_):
        self.seen.append(_operation(request))


def _seed(ctx, count: int, users: int = 5) -> list[tuple[str, str]]:
    owners = [str(uuid.uuid4()) for _ in range(users)]
    return [(owners[i % users], seed_fixed_task(ctx, owners[i % users], "一。", due_ms=DUE_MS)) for i in range(count)]


def _unversion(ctx, user: str, task_uuid: str) -> None:
    """The task as an item without ``claim_version`` (no version of the store wrote one, but a table may hold one)."""
    ctx.tasks.db.table.update_item(
        Key={"PK": f"U#{user}", "SK": f"T#{task_uuid}"}, UpdateExpression="REMOVE claim_version"
    )


def test_a_batch_of_claims_is_one_statement_request_and_one_read_back(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    tasks = _seed(ctx, 25)
    ops = Operations(ctx.claims.db)
    rows = ctx.claims.claim_many(
        [ClaimWanted(u, t, DUE_MS) for u, t in tasks], now_ms=NOW, lease_until_ms=LEASE, owner="a"
    )
    assert ops.seen == ["BatchExecuteStatement", "BatchGetItem"]
    assert [(r.uuid, r.claim_version, r.lease_until_ms) for r in rows] == [(t, 1, LEASE) for _, t in tasks]


def test_a_statement_whose_condition_fails_leaves_the_others_applied(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    tasks = _seed(ctx, 25)
    assert ctx.claims.claim(*tasks[0], expected_next_send_at_ms=DUE_MS, now_ms=NOW, lease_until_ms=LEASE, owner="b")
    ctx.tasks.delete_task(*tasks[1])
    _unversion(ctx, *tasks[2])
    wanted = [ClaimWanted(u, t, DUE_MS) for u, t in tasks]
    wanted[3] = ClaimWanted(tasks[3][0], tasks[3][1], T0_MS)  # an occurrence the task has left

    results = ctx.claims.claim_many(wanted, now_ms=NOW, lease_until_ms=LEASE, owner="a")

    # leased by another claim, deleted: not claimed; no claim_version: left to claim alone; the rest claimed
    assert results[:4] == [None, None, CLAIM_ALONE, None]
    assert [(r.uuid, r.claim_version, r.lease_until_ms) for r in results[4:]] == [(t, 1, LEASE) for _, t in tasks[4:]]
    other = ctx.claims.db.get({"PK": f"U#{tasks[0][0]}", "SK": f"T#{tasks[0][1]}"})
    assert other["lease_owner"] == "b" and other["claim_version"] == 1  # the failed statement wrote nothing
    untouched = ctx.claims.db.get({"PK": f"U#{tasks[2][0]}", "SK": f"T#{tasks[2][1]}"})
    assert "lease_owner" not in untouched and "claim_version" not in untouched
    alone = ctx.claims.claim(*tasks[2], expected_next_send_at_ms=DUE_MS, now_ms=NOW, lease_until_ms=LEASE, owner="a")
    assert alone is not None and alone.claim_version == 1  # UpdateItem's ADD starts the version


def test_a_task_without_claim_version_is_claimed_alone_and_delivered_once(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    tasks = _seed(ctx, 6, users=2)
    _unversion(ctx, *tasks[0])
    ctx.clock.current_ms = NOW
    assert run_tick(ctx)["claimedTasks"] == 6
    messages = drained(queue)
    assert sorted(m["uuid"] for m in messages) == sorted(t for _, t in tasks)
    assert {m["claimVersion"] for m in messages} == {1}
    deliver(ctx, queue, messages, duplicate=True)
    assert len(sender.sent) == 6 and set(sender.counts().values()) == {1}


def test_batches_racing_each_other_and_single_claims_claim_each_task_once(ddb_local_endpoint, ddb_local_table):
    """Three claimers send the same 25 claims as batches while a fourth claims the same tasks one by one, round
    after round (each round once the previous leases ended): every task is claimed by exactly one of them per
    round, and its claim version counts the rounds."""
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    tasks = _seed(ctx, 25)
    wanted = [ClaimWanted(u, t, DUE_MS) for u, t in tasks]
    winners: set[str] = set()
    for n in range(4):
        now = NOW + n * 400_000
        lease = now + 300_000
        won: dict[str, list[str]] = {t: [] for _, t in tasks}
        lock = threading.Lock()
        start = threading.Barrier(4)

        def record(owner: str, claimed: list[ClaimWanted], rows, won=won, lock=lock) -> None:
            with lock:
                for w, row in zip(claimed, rows, strict=True):
                    if row is CLAIM_ALONE:  # nothing here fails for any reason but a condition
                        won[w.uuid].append(f"{owner} could not write")
                    elif row is not None:
                        won[row.uuid].append(owner)

        def batch(owner: str, now=now, lease=lease, record=record, start=start) -> None:
            start.wait()
            record(owner, wanted, ctx.claims.claim_many(wanted, now_ms=now, lease_until_ms=lease, owner=owner))

        def singles(now=now, lease=lease, record=record, start=start) -> None:
            start.wait()
            for w in reversed(wanted):  # from the other end: it meets the batches in the middle
                row = ctx.claims.claim(
                    w.user_id, w.uuid, expected_next_send_at_ms=DUE_MS, now_ms=now, lease_until_ms=lease, owner="one"
                )
                record("one", [w], [row])

        threads = [threading.Thread(target=batch, args=(f"batch-{i}",)) for i in range(3)]
        threads.append(threading.Thread(target=singles))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(len(owners) == 1 for owners in won.values()), {t: o for t, o in won.items() if len(o) != 1}
        winners.update(owners[0] for owners in won.values())
        for user, task_uuid in tasks:
            item = ctx.claims.db.get({"PK": f"U#{user}", "SK": f"T#{task_uuid}"})
            assert (item["lease_owner"], item["claim_version"]) == (won[task_uuid][0], n + 1)
    assert len(winners) >= 2, winners  # they did race


class KillAtReadBack:
    """Kills the claimer (``Killed``, which nothing in the engine catches) at its first ``BatchGetItem`` after a
    ``BatchExecuteStatement``: its claims are written, never read back, never enqueued."""

    def __init__(self, db) -> None:
        self.armed = self.fired = False
        for client in table_clients(db):
            client.meta.events.register("before-send.dynamodb", self)

    def __call__(self, request, **_):
        operation = _operation(request)
        if operation == "BatchExecuteStatement" and not self.fired:
            self.armed = True
        elif operation == "BatchGetItem" and self.armed and not self.fired:
            self.fired = True
            raise Killed("claimer sandbox lost before the read back")


def test_a_claimer_killed_between_its_batch_and_the_read_back_loses_nothing(ddb_local_endpoint, ddb_local_table):
    ctx, sender, tasks, claims = fan_out_world(ddb_local_endpoint, ddb_local_table, AMSG_DUE_SHARDS="1")
    created = seed_many(ctx, 60, T0_MS + 1_000)
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    kill = KillAtReadBack(ctx.claims.db)
    job = parse_claim_job(json.dumps(claims.items.get_nowait()))
    with pytest.raises(Killed):
        run_claim_job(ctx, job, remaining_ms=lambda: 60_000, owner="claim:dead", summary=TickSummary())
    assert kill.fired
    # the dead claimer's batch is leased and was never enqueued; the next tick claims the rest of the window
    ctx.clock.current_ms = T0_MS + 62_000
    run_tick(ctx)
    claim_all(ctx, claims)
    first = drained(tasks)
    dead = set(created) - {m["uuid"] for m in first}
    assert 0 < len(dead) <= PAGE
    deliver(ctx, tasks, first)
    # once the lease ended they are due again and claimed again (a newer claim version), each delivered once
    ctx.clock.current_ms = T0_MS + 61_000 + LEASE_MS + 1_000
    run_tick(ctx)
    claim_all(ctx, claims)
    again = drained(tasks)
    assert {m["uuid"] for m in again} == dead
    assert all(m["claimVersion"] == 2 for m in again)
    deliver(ctx, tasks, again, duplicate=True)
    assert len(sender.sent) == 60 and max(sender.counts().values()) == 1


def _partiql(calls) -> set[str]:
    return {p for c in calls if c.service == "dynamodb" for p in permissions_of_call(c) if "PartiQL" in p}


def test_the_claimers_statements_are_granted(ddb_local_endpoint, ddb_local_table):
    ctx, _, _, claims = fan_out_world(ddb_local_endpoint, ddb_local_table, AMSG_DUE_SHARDS="1")
    seed_many(ctx, 30, T0_MS + 1_000)
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    job = parse_claim_job(json.dumps(claims.items.get_nowait()))
    with record_aws_calls() as recorder:
        run_claim_job(ctx, job, remaining_ms=lambda: 60_000, owner="claim:iam", summary=TickSummary())
    assert _partiql(recorder.calls) == {"dynamodb:PartiQLUpdate table"}
    _granted_and_used("ClaimerFunction", recorder.calls)


def test_send_notifications_statements_are_granted_by_the_cron_policy(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(
        ddb_local_endpoint, ddb_local_table, AMSG_TENANCY="multi", AMSG_KMS_KEY_ID="unused-the-registry-is-in-memory"
    )
    with_fakes(ctx, RecordingPushSender(), MemoryQueue())
    (key,) = memory_tenants(ctx, ["tenant-a"]).values()
    scoped = scoped_context(ctx, "tenant-a", key)
    seed_many(scoped, 30, T0_MS + 1_000)
    ctx.clock.current_ms = T0_MS + 61_000
    with record_aws_calls() as recorder:
        summary = run_tenant_due_work(scoped)
    assert summary["successCount"] == 30
    granted = {str(g) for g in granted_multi(project_template(), "SendNotificationsFunction") if "PartiQL" in g.action}
    assert _partiql(recorder.calls) == granted == {"dynamodb:PartiQLUpdate table"}
