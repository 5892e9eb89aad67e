"""Claim fan-out on DynamoDB Local: the tick sends claim jobs, claimers claim page by page and continue the chain.
Concurrent claimers over overlapping due windows never claim a task twice; a claimer killed mid-job loses
nothing (its tasks come back when their lease ends); a tenant's few tasks are not held back by another
tenant's backlog; claim jobs pause while the task queue is too deep."""

from __future__ import annotations

import json
import queue as queue_lib
import threading
from collections import Counter

import pytest
from amsg.engine.claim_jobs import ClaimJob, parse_claim_job, run_claim_job
from amsg.engine.summary import TickSummary
from amsg.engine.tick import run_tick
from amsg.tenancy.scope import scoped_context

from tests.ddb_local.test_tenant_fairness import seed
from tests.support.ddb_engine import (
    T0_MS,
    Killed,
    MemoryQueue,
    RecordingPushSender,
    consume,
    ddb_context,
    with_fakes,
)
from tests.support.tenants_stack import memory_tenants

pytestmark = pytest.mark.ddb_local

PAGE = 25
LEASE_MS = 300_000


def fan_out_world(endpoint: str, table: str, **env: str):
    ctx = ddb_context(endpoint, table, AMSG_CLAIM_PAGE_SIZE=str(PAGE), **env)
    sender, tasks, claims = RecordingPushSender(), MemoryQueue(), MemoryQueue()
    with_fakes(ctx, sender, tasks, claim_queue=claims)
    return ctx, sender, tasks, claims


@pytest.fixture
def world(ddb_local_endpoint, ddb_local_table):
    return fan_out_world(ddb_local_endpoint, ddb_local_table, AMSG_DUE_SHARDS="2")


def claim_all(ctx, claims: MemoryQueue, *, claimers: int = 1) -> list[dict]:
    """``claimers`` claimers take jobs off the claim queue (each job's next page goes back on it) until it stays
    empty; returns every job's summary."""
    summaries: list[dict] = []
    busy = [0]
    lock = threading.Lock()

    def claimer(name: int) -> None:
        while True:
            try:
                body = claims.items.get(timeout=0.2)
            except queue_lib.Empty:
                with lock:
                    if busy[0] == 0 and claims.items.empty():
                        return
                continue
            with lock:
                busy[0] += 1
            try:
                summary = TickSummary()
                job = parse_claim_job(json.dumps(body))
                assert job is not None, body
                run_claim_job(ctx, job, remaining_ms=lambda: 60_000, owner=f"claim:{name}", summary=summary)
                summaries.append(summary.as_dict(started_ms=0, now_ms=0))
            finally:
                with lock:
                    busy[0] -= 1

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return summaries


def deliver(ctx, tasks: MemoryQueue, messages: list[dict], *, duplicate: bool = False) -> None:
    """run_task over ``messages`` (each twice at once with ``duplicate``, as SQS may hand it over)."""
    tasks.send_many(messages)
    stop = threading.Event()
    stop.set()
    consume(ctx, tasks, stop, duplicate=duplicate)


def drained(queue: MemoryQueue) -> list[dict]:
    out = []
    while not queue.items.empty():
        out.append(queue.items.get_nowait())
    return out


def test_one_tick_fans_out_and_the_claimers_claim_every_page(world):
    ctx, _, tasks, claims = world
    created = seed(ctx, 130, T0_MS + 1_000)
    ctx.clock.current_ms = T0_MS + 61_000

    summary = run_tick(ctx)
    assert summary["claimedTasks"] == 0 and summary["claimJobs"] == {"sent": 2, "failed": 0}  # one per shard
    jobs = claim_all(ctx, claims, claimers=3)
    # every page a job of its own: a chain per shard, ended by the page that reached the end of the window
    assert len(jobs) >= 130 // PAGE
    assert sum(j["claimedTasks"] for j in jobs) == 130
    messages = drained(tasks)
    assert sorted(m["uuid"] for m in messages) == sorted(created)
    assert run_tick(ctx)["claimJobs"] == {"sent": 0, "failed": 0}  # nothing due any more: no job


def test_concurrent_claimers_on_overlapping_windows_never_claim_a_task_twice(world):
    ctx, sender, tasks, claims = world
    created = seed(ctx, 300, T0_MS + 1_000)
    ctx.clock.current_ms = T0_MS + 61_000
    # three ticks' fan-outs at once plus jobs over the whole window of each shard: every page is claimed by
    # several chains at the same time
    for _ in range(3):
        run_tick(ctx)
    claims.send_many([ClaimJob(shard).to_body() for shard in (0, 1, 0, 1)])
    jobs = claim_all(ctx, claims, claimers=6)
    for _ in range(5):  # a chain that stopped on contention leaves its rest to the next tick
        if not run_tick(ctx)["claimJobs"]["sent"]:
            break
        jobs += claim_all(ctx, claims, claimers=6)
    messages = drained(tasks)
    per_task = Counter(m["uuid"] for m in messages)
    assert set(per_task) == set(created)
    assert max(per_task.values()) == 1, [u for u, n in per_task.items() if n > 1]  # one claim each
    assert sum(j["claimedTasks"] for j in jobs) == 300
    assert sum(j["details"]["claimSkippedTasks"] for j in jobs) > 0  # the chains did collide
    deliver(ctx, tasks, messages, duplicate=True)  # and each claim is delivered exactly once
    assert len(sender.sent) == 300 and max(sender.counts().values()) == 1


def test_a_claimer_killed_mid_job_loses_nothing(world):
    ctx, sender, tasks, claims = world
    created = seed(ctx, 60, T0_MS + 1_000)
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)

    # the first claimer dies after its claims committed, before it enqueued anything or continued its chain
    real_send = tasks.send_many

    def die(messages):
        raise Killed("claimer sandbox lost")

    tasks.send_many = die
    job = parse_claim_job(json.dumps(claims.items.get_nowait()))
    with pytest.raises(Killed):
        run_claim_job(ctx, job, remaining_ms=lambda: 60_000, owner="claim:dead", summary=TickSummary())
    tasks.send_many = real_send
    claim_all(ctx, claims)  # the other shard's chain runs as usual
    first = drained(tasks)
    # the dead claimer's page is leased: a tick while the lease holds claims the rest of its shard, not that page
    ctx.clock.current_ms = T0_MS + 61_000 + LEASE_MS - 1_000
    run_tick(ctx)
    claim_all(ctx, claims)
    first += drained(tasks)
    dead = set(created) - {m["uuid"] for m in first}
    assert 0 < len(dead) <= PAGE
    deliver(ctx, tasks, first)
    # once the lease ended they are due again, and claimed again (a newer claim version)
    ctx.clock.current_ms = T0_MS + 61_000 + LEASE_MS + 1_000
    run_tick(ctx)
    claim_all(ctx, claims)
    again = drained(tasks)
    assert {m["uuid"] for m in again} == dead
    assert all(m["claimVersion"] == 2 for m in again)
    deliver(ctx, tasks, again)
    assert len(sender.sent) == 60 and max(sender.counts().values()) == 1  # every task delivered once


def test_claim_jobs_pause_while_the_task_queue_is_too_deep(ddb_local_endpoint, ddb_local_table):
    ctx, _, tasks, claims = fan_out_world(ddb_local_endpoint, ddb_local_table, AMSG_CLAIM_BACKLOG_LIMIT="20")
    seed(ctx, 60, T0_MS + 1_000)
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    jobs = claim_all(ctx, claims)
    # one page claimed (25 > 20 queued), then the chain's next job found the queue too deep and stopped
    assert [j["claimedTasks"] for j in jobs] == [PAGE, 0]
    assert jobs[-1]["details"]["stoppedBy"] == "backlog"
    drained(tasks)  # run_task caught up: the next tick starts the chain again
    run_tick(ctx)
    assert sum(j["claimedTasks"] for j in claim_all(ctx, claims)) == PAGE


def test_a_small_tenant_is_not_held_back_by_a_backlog_under_fan_out(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(
        ddb_local_endpoint,
        ddb_local_table,
        AMSG_TENANCY="multi",
        AMSG_KMS_KEY_ID="unused-the-registry-is-in-memory",
        AMSG_CLAIM_PAGE_SIZE=str(PAGE),
    )
    sender, tasks, claims = RecordingPushSender(), MemoryQueue(), MemoryQueue()
    with_fakes(ctx, sender, tasks, claim_queue=claims)
    keys = memory_tenants(ctx, ["tenant-a", "tenant-b"])
    scopes = {tenant: scoped_context(ctx, tenant, key) for tenant, key in keys.items()}
    seed(scopes["tenant-a"], 300, T0_MS + 1_000)  # due first
    b_tasks = seed(scopes["tenant-b"], 10, T0_MS + 50_000, users=3)  # due after all of A's
    ctx.clock.current_ms = T0_MS + 61_000

    summary = run_tick(ctx)
    assert summary["tenants"] == 2 and summary["claimJobs"]["sent"] == 2  # one job per tenant
    claim_all(ctx, claims, claimers=1)  # one claimer, jobs in queue order: the worst case for B
    messages = drained(tasks)
    assert len(messages) == 310
    b_positions = [i for i, m in enumerate(messages) if m["tenantId"] == "tenant-b"]
    # B's tasks reach the task queue after at most one page of A's, however large A's backlog is
    assert max(b_positions) < PAGE + 10
    assert {messages[i]["uuid"] for i in b_positions} == set(b_tasks)
    assert all(m["tenantId"] == "tenant-a" for i, m in enumerate(messages) if i not in b_positions)


def test_a_malformed_or_foreign_claim_job_claims_nothing(world):
    ctx, _, tasks, _ = world
    seed(ctx, 5, T0_MS + 1_000)
    ctx.clock.current_ms = T0_MS + 61_000
    for body in ('{"kind":"claim","shard":-1}', '{"kind":"claim","shard":true}', "[]", '{"shard":0}', "x"):
        assert parse_claim_job(body) is None
    summary = TickSummary()
    # a tenant's job on the single line: refused, never claimed in the deployment's space
    run_claim_job(ctx, ClaimJob(0, "tenant-a"), remaining_ms=lambda: 60_000, owner="c", summary=summary)
    assert summary.claimed == 0 and summary.stopped_by == "tenant_inactive"
    assert tasks.items.empty()
