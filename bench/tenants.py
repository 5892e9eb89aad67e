"""The multi-tenant line on DynamoDB Local: fairness of one tick across tenants, and DynamoDB requests per
delivered task (multi against single).

Fairness: tenant A has a backlog due before tenant B's few tasks; one tick with the default claim limit. B's
tasks must all be claimed in that first tick. Requests: the same one-shot journey (users with a subscription,
one task each, the real tick, run_message in SQS batches run together as the run_task handler does) for two
tenants and for the single line; the tenants' registry is the DynamoDB one, so its reads are counted too (the
key wrapper is local: KMS requests are not DynamoDB's and are cached per sandbox anyway). Idle tenants: requests
per tick for many tenants, most with nothing pending, with the tick's pending-count check and without it.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import counting
from bench.requests import run_batch

T0_MS = 1_893_369_600_000
LOADS = (10, 50)  # users (one due task each) per tenant and tick


def fairness_fanned_out(endpoint: str, backlog: int) -> None:
    """The same under claim fan-out: the tick sends one claim job per tenant, one claimer takes the jobs in
    queue order (each job's next page goes to the back): B's tasks must reach the task queue within the first
    page of A's."""
    from amsg.engine.claim_jobs import parse_claim_job, run_claim_job
    from amsg.engine.summary import TickSummary
    from amsg.engine.tick import run_tick

    from tests.support.ddb_engine import MemoryQueue, RecordingPushSender, with_fakes

    _create_table(endpoint, "bench-tenants-fan-out")
    ctx, scopes = _multi_context(endpoint, "bench-tenants-fan-out", ["tenant-a", "tenant-b"])
    tasks, claims = MemoryQueue(), MemoryQueue()
    with_fakes(ctx, RecordingPushSender(), tasks, claim_queue=claims)
    _seed(scopes["tenant-a"], backlog, T0_MS + 1_000, users=200)
    b_tasks = set(_seed(scopes["tenant-b"], 10, T0_MS + 50_000, users=3))
    ctx.clock.current_ms = T0_MS + 61_000
    summary = run_tick(ctx)
    started, jobs = time.perf_counter(), 0
    while not claims.items.empty():
        job = parse_claim_job(json.dumps(claims.items.get_nowait()))
        assert job is not None
        run_claim_job(ctx, job, remaining_ms=lambda: 60_000, owner="bench-claimer", summary=TickSummary())
        jobs += 1
    elapsed = time.perf_counter() - started
    bodies = list(tasks.items.queue)
    last_b = max((i for i, body in enumerate(bodies) if body["uuid"] in b_tasks), default=-1)
    page = ctx.settings.claim_page_size
    print(f"== fairness under claim fan-out: B's 10 tasks behind A's {backlog:,} (one claimer, jobs in queue order)")
    print(
        f"  the tick sent {summary['claimJobs']['sent']} claim jobs; {jobs} jobs claimed {len(bodies):,} tasks in"
        f" {elapsed:.1f} s; B's last task was message {last_b + 1} of the task queue (a page is {page})"
        f" -> {sum(1 for b in bodies if b['uuid'] in b_tasks)}/10 within the first page of A's:"
        f" {'yes' if 0 <= last_b < page + 10 else 'NO'}"
    )


def _env(endpoint: str, table: str, **extra: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "AMSG_TABLE_NAME": table,
        "AMSG_MASTER_KEY": "c" * 64,
        "AMSG_VAPID_PUBLIC_KEY": "BPublic",
        "AMSG_VAPID_EMAIL": "bench@example.test",
        "AMSG_VAPID_PRIVATE_KEY": "private",
        "AMSG_PUSH_PACING_MS": "0",
        **extra,
    }


def _multi_context(endpoint: str, table: str, tenants: list[str], **extra: str) -> tuple[Any, dict[str, Any]]:
    """A multi-mode context whose registry is the DynamoDB one, and each tenant's scoped context."""
    from amsg import runtime
    from amsg.adapters.dynamo.table import DynamoTable
    from amsg.adapters.dynamo.tenants import DynamoTenantStore
    from amsg.clock import FixedClock
    from amsg.ports.tenants import ACTIVE, TenantRecord
    from amsg.tenancy.keys import RegistryDirectory, TenantKeys, new_master_key
    from amsg.tenancy.scope import scoped_context

    from tests.support.fakes.tenants import LocalKeyWrapper

    ctx = runtime.build_context(_env(endpoint, table, AMSG_TENANCY="multi", AMSG_KMS_KEY_ID="local", **extra))
    ctx.clock = FixedClock(T0_MS)
    registry, wrapper = DynamoTenantStore(DynamoTable(table, endpoint_url=endpoint)), LocalKeyWrapper()
    ctx.tenant_registry, ctx.tenants = registry, RegistryDirectory(registry)
    ctx.tenant_keys = TenantKeys(registry, wrapper, time.monotonic, max_age_s=300)
    scopes = {}
    for tenant in tenants:
        key = new_master_key()
        registry.create(TenantRecord(tenant, wrapper.wrap(tenant, key.encode()), 0, ACTIVE, T0_MS, T0_MS))
        scopes[tenant] = scoped_context(ctx, tenant, key)
    return ctx, scopes


def _seed(ctx: Any, count: int, due_ms: int, users: int, workers: int = 8) -> list[str]:
    from amsg.crypto import compact_json, encrypt_for_storage
    from amsg.ports import NewTask

    ids = [str(uuid.uuid4()) for _ in range(users)]
    for user in ids:
        subscription = compact_json({"endpoint": "https://push.invalid/x", "keys": {}})
        ctx.subscriptions.put_push_subscription(user, encrypt_for_storage(subscription, ctx.user_key(user)), 1)

    def create(i: int) -> str:
        user, task_uuid = ids[i % users], str(uuid.uuid4())
        payload = compact_json({"contactName": "Rei", "messageType": "fixed", "userMessage": "早上好"})
        ctx.tasks.create_task(
            NewTask(
                user,
                task_uuid,
                encrypt_for_storage(payload, ctx.user_key(user)),
                "fixed",
                due_ms,
                T0_MS,
                one_shot=True,  # as the schedule route creates a one-shot
            )
        )
        return task_uuid

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(create, range(count)))


def fairness(endpoint: str, backlog: int) -> None:
    from amsg.engine.tick import run_tick

    from tests.support.ddb_engine import MemoryQueue, RecordingPushSender, with_fakes

    ctx, scopes = _multi_context(endpoint, "bench-tenants", ["tenant-a", "tenant-b"])
    queue = MemoryQueue()
    with_fakes(ctx, RecordingPushSender(), queue)
    started = time.perf_counter()
    _seed(scopes["tenant-a"], backlog, T0_MS + 1_000, users=200)
    b_tasks = set(_seed(scopes["tenant-b"], 10, T0_MS + 50_000, users=3))
    seeded = time.perf_counter() - started
    ctx.clock.current_ms = T0_MS + 61_000
    counting.reset()
    started = time.perf_counter()
    summary = run_tick(ctx)
    elapsed = time.perf_counter() - started
    bodies = list(queue.items.queue)
    by_tenant = Counter(body["tenantId"] for body in bodies)
    b_claimed = sum(1 for body in bodies if body["uuid"] in b_tasks)
    print(f"== fairness: tenant B's 10 tasks due behind tenant A's {backlog:,}-task backlog (seeded in {seeded:.0f} s)")
    print(
        f"  first tick: claimed {summary['claimedTasks']:,} (limit {ctx.settings.tick_claim_limit:,}) in"
        f" {elapsed:.1f} s: tenant A {by_tenant['tenant-a']:,}, tenant B {by_tenant['tenant-b']}"
        f" -> B's tasks claimed in the first tick: {b_claimed}/10 ({'yes' if b_claimed == 10 else 'NO'})"
    )
    print(f"  DynamoDB requests of that tick: {counting.dynamodb_total():,}")


def requests_per_task(endpoint: str, batch_size: int) -> None:
    print(f"== DynamoDB requests per delivered task (tick + run_task, SQS batches of {batch_size} run together)")
    for users in LOADS:
        _requests_per_task(endpoint, batch_size, users)


def _requests_per_task(endpoint: str, batch_size: int, users: int) -> None:
    """Delivery requests per delivered task: two tenants against the single line, same journey."""
    from amsg import runtime
    from amsg.clock import FixedClock
    from amsg.engine.tick import run_tick

    from tests.support.ddb_engine import MemoryQueue, RecordingPushSender, with_fakes

    figures = {}
    for line in ("single", "multi"):
        table = f"bench-{line}-{users}"
        _create_table(endpoint, table)
        if line == "multi":
            ctx, scopes = _multi_context(endpoint, table, ["tenant-a", "tenant-b"])
            seeds = list(scopes.values())
        else:
            ctx = runtime.build_context(_env(endpoint, table))
            ctx.clock = FixedClock(T0_MS)
            seeds = [ctx, ctx]
        queue = MemoryQueue()
        with_fakes(ctx, RecordingPushSender(), queue)
        for seed_ctx in seeds:
            _seed(seed_ctx, users, T0_MS + 1_000, users=users, workers=1)
        ctx.clock.current_ms = T0_MS + 61_000
        counting.reset()
        run_tick(ctx)
        delivered = 0
        while not queue.items.empty():
            batch = [queue.items.get_nowait() for _ in range(min(batch_size, queue.items.qsize()))]
            delivered += run_batch(ctx, batch, tenant_keys=True)
        with counting._lock:
            ops = Counter({k.split(".", 1)[1]: n for k, n in counting.calls.items() if k.startswith("dynamodb.")})
        figures[line] = (counting.dynamodb_total() / max(1, delivered), delivered, ops)
    for line, (per_task, delivered, ops) in figures.items():
        what = f"two tenants of {users}" if line == "multi" else f"two seeds of {users} under one master key"
        parts = ", ".join(f"{op} {n}" for op, n in ops.most_common())
        print(f"  {line:6s} {per_task:5.2f}  ({delivered} one-shot tasks, {what}; requests: {parts})")


def idle_ticks(endpoint: str, tenants: int = 200, busy: int = 20) -> None:
    """Requests per tick for many tenants, most holding nothing: ten ticks (every housekeeping slot once), with
    the pending-count check and with it off (every tenant's due index read)."""
    from amsg.engine import tick
    from amsg.engine.tick import TENANT_HOUSEKEEPING_EVERY, run_tick

    from tests.support.ddb_engine import MemoryQueue, RecordingPushSender, with_fakes

    table = "bench-idle"
    _create_table(endpoint, table)
    ids = [f"tenant-{i:04d}" for i in range(tenants)]
    ctx, scopes = _multi_context(endpoint, table, ids)
    with_fakes(ctx, RecordingPushSender(), MemoryQueue())
    for tenant in ids[:busy]:  # one task each, due next month: pending, nothing due
        _seed(scopes[tenant], 1, T0_MS + 30 * 86_400_000, users=1, workers=1)
    print(f"== requests per tick: {tenants} tenants, {busy} with a pending task (not due), the rest with none")
    minimum = tick.IDLE_CHECK_MIN_TENANTS
    for label, threshold in (("pending counts read", minimum), ("every due index read", tenants + 1)):
        tick.IDLE_CHECK_MIN_TENANTS = threshold
        counting.reset()
        for minute in range(TENANT_HOUSEKEEPING_EVERY):
            ctx.clock.current_ms = T0_MS + minute * 60_000
            run_tick(ctx)
        with counting._lock:
            ops = Counter({k.split(".", 1)[1]: n for k, n in counting.calls.items() if k.startswith("dynamodb.")})
        per_tick = counting.dynamodb_total() / TENANT_HOUSEKEEPING_EVERY
        parts = ", ".join(f"{op} {n / TENANT_HOUSEKEEPING_EVERY:.1f}" for op, n in ops.most_common())
        print(f"  {label:22s} {per_tick:6.1f} requests per tick, {per_tick / tenants:.2f} per tenant ({parts})")
    tick.IDLE_CHECK_MIN_TENANTS = minimum


def _create_table(endpoint: str, table: str) -> None:
    import boto3
    from amsg_local.tables import create_tables_from_template
    from amsg_local.template import load_template

    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
    create_tables_from_template(client, load_template(), table)


def main(backlog: int = 20_000) -> None:
    counting.install()
    from bench.capacity import template_defaults
    from bench.ddb import dynamodb_local_table

    with dynamodb_local_table("bench-tenants") as endpoint:
        requests_per_task(endpoint, template_defaults()["batch_size"])
        idle_ticks(endpoint)
        fairness(endpoint, backlog)
        fairness_fanned_out(endpoint, max(1_000, backlog // 10))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)
