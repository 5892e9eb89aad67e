"""The per-tenant pending-task limit on DynamoDB Local (docs/tenancy.md, limits): concurrent creates at the limit
accept exactly the limit, and the tenant's counter equals the pending tasks a scan finds after every way a task
stops being pending (delivered, failed, cancelled, superseded, removed by a cleanup, a cancel racing a delivery)."""

from __future__ import annotations

import functools
import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from amsg.adapters.dynamo import pending
from amsg.adapters.dynamo.keys import tenant_space
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.domain.registry_life import REGISTRY_TTL_S
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tick import run_tick
from amsg.errors import TenantPendingLimit
from amsg.ports import NewTask
from amsg.tenancy.scope import scoped_context

from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, with_fakes
from tests.support.tenants_stack import memory_tenants, pending_scan

pytestmark = pytest.mark.ddb_local

LIMIT = 10
USERS = [str(uuid.UUID(int=i + 1, version=4)) for i in range(4)]


@pytest.fixture
def tenants(ddb_local_endpoint, ddb_local_table, ddb_local_client):
    ctx = ddb_context(
        ddb_local_endpoint,
        ddb_local_table,
        AMSG_TENANCY="multi",
        AMSG_KMS_KEY_ID="unused-the-registry-is-in-memory",
        AMSG_TENANT_MAX_PENDING_TASKS=str(LIMIT),
    )
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    keys = memory_tenants(ctx, ["tenant-a", "tenant-b"])
    scopes = {tenant: scoped_context(ctx, tenant, key) for tenant, key in keys.items()}
    for scope in scopes.values():
        for user in USERS:
            push = compact_json({"endpoint": f"https://push.invalid/{user}", "keys": {}})
            scope.subscriptions.put_push_subscription(user, encrypt_for_storage(push, scope.user_key(user)), 1)
    return ctx, scopes, sender, queue, ddb_local_client, ddb_local_table


def create(
    scope,
    i: int,
    due_ms: int,
    *,
    supersedes: str | None = None,
    task_uuid: str | None = None,
    one_shot: bool = False,
) -> str:
    """A task of ``USERS[i]`` (``one_shot``: as the schedule route creates a one-shot, its uuid registry entry
    expiring; without it, as the previous version did)."""
    user = USERS[i % len(USERS)]
    body = {"contactName": "Rei", "messageType": "fixed", "userMessage": f"m{i}"}
    task_uuid = task_uuid or str(uuid.uuid4())
    encrypted = encrypt_for_storage(compact_json(body), scope.user_key(user))
    task = NewTask(user, task_uuid, encrypted, "fixed", due_ms, T0_MS, one_shot=one_shot)
    scope.tasks.create_task(task, supersedes)
    return task_uuid


def runs_racing_cancels(ctx, queue, scope, cancelled: list[tuple[int, str]]) -> None:
    """Every queued record's run and a cancel of each ``(i, uuid)`` (a task of ``USERS[i]``), all at once."""
    bodies = [queue.items.get_nowait() for _ in range(queue.items.qsize())]
    with ThreadPoolExecutor(8) as pool:
        runs = [
            pool.submit(run_message, ctx, parse_task_message(json.dumps(body)), remaining_ms=lambda: 100_000, owner="r")
            for body in bodies
        ]
        cancels = [pool.submit(scope.tasks.delete_task, USERS[i % len(USERS)], t) for i, t in cancelled]
        for future in [*runs, *cancels]:
            future.result()


def scanned(client, table: str, tenant: str) -> tuple[int | None, int]:
    return pending_scan(client, table, tenant, absent=0)


def test_concurrent_creates_at_the_limit_accept_exactly_the_limit(tenants):
    _, scopes, _, _, client, table = tenants
    a, b = scopes["tenant-a"], scopes["tenant-b"]
    create(a, 0, T0_MS + 60_000)

    def attempt(i: int) -> bool:
        try:
            create(a, i, T0_MS + 60_000)
        except TenantPendingLimit as limited:
            assert limited.limit == LIMIT
            return False
        return True

    with ThreadPoolExecutor(12) as pool:
        accepted = list(pool.map(attempt, range(1, 41)))
    assert sum(accepted) == LIMIT - 1
    assert scanned(client, table, "tenant-a") == (LIMIT, LIMIT)
    # B's count is its own
    for i in range(LIMIT):
        create(b, i, T0_MS + 60_000)
    assert scanned(client, table, "tenant-b") == (LIMIT, LIMIT)
    assert pending.read(a.tasks.db, tenant_space("tenant-a")) == (LIMIT, None)


def deliver_all(ctx, queue) -> None:
    while not queue.items.empty():
        body = queue.items.get_nowait()
        run_message(ctx, parse_task_message(json.dumps(body)), remaining_ms=lambda: 100_000, owner="r")


def test_the_count_follows_every_way_a_task_stops_being_pending(tenants):
    ctx, scopes, sender, queue, client, table = tenants
    a = scopes["tenant-a"]
    due = T0_MS + 1_000
    delivered = [create(a, i, due) for i in range(3)]
    failing = create(a, 3, due)
    cancelled = create(a, 4, T0_MS + 600_000)
    replaced = create(a, 5, T0_MS + 600_000)
    listed = create(a, 6, T0_MS + 600_000)
    assert scanned(client, table, "tenant-a") == (7, 7)

    assert a.tasks.delete_task(USERS[4 % len(USERS)], cancelled)
    assert not a.tasks.delete_task(USERS[4 % len(USERS)], cancelled)  # twice: counted once
    create(a, 5, T0_MS + 600_000, supersedes=replaced)  # a pending task replaced: still one pending
    owner = USERS[6 % len(USERS)]
    resource = next(r for r in a.cloud_data.list_resources(owner).resources if r.identity == [listed])
    assert a.cloud_data.delete_resource(owner, resource)
    assert not a.cloud_data.delete_resource(owner, resource)
    assert scanned(client, table, "tenant-a") == (5, 5)

    # one delivery fails for good (the subscription is gone), three are delivered and deleted
    sender.statuses = [410]
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    assert {body["uuid"] for body in list(queue.items.queue)} == {*delivered, failing}
    deliver_all(ctx, queue)
    assert scanned(client, table, "tenant-a") == (1, 1)  # only the replacement is left

    # cancels racing deliveries: each task leaves the count exactly once
    racing = [create(a, i, T0_MS + 120_000) for i in range(8)]
    ctx.clock.current_ms = T0_MS + 181_000
    run_tick(ctx)
    runs_racing_cancels(ctx, queue, a, list(enumerate(racing)))
    assert scanned(client, table, "tenant-a") == (1, 1)
    for row in [row for user in USERS for row in a.tasks.list_tasks(user)]:
        a.tasks.delete_task(row.user_id, row.uuid)
    assert scanned(client, table, "tenant-a") == (0, 0)


def test_delivered_one_shots_leave_their_expiring_entries_and_the_count_still_follows(tenants):
    """In a tenant's space a delivered one-shot's delete and the pending count's decrement are one transaction,
    without the uuid registry entry's delete when that entry expires (docs/decisions.md, 47); cancels racing
    the deliveries still take each task out of the count once, and their entries with them."""
    ctx, scopes, _sender, queue, client, table = tenants
    a = scopes["tenant-a"]
    legacy = create(a, 0, T0_MS + 1_000)  # its entry has no expiry: deleted with it, as before
    expiring = [create(a, i, T0_MS + 1_000, one_shot=True) for i in range(1, 9)]
    assert scanned(client, table, "tenant-a") == (9, 9)
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    runs_racing_cancels(ctx, queue, a, list(enumerate(expiring[:4], 1)))
    assert scanned(client, table, "tenant-a") == (0, 0)
    entries = {t: a.tasks.db.get(a.tasks.space.uuid_registry_key(t)) for t in [legacy, *expiring]}
    assert entries[legacy] is None
    for task_uuid in expiring:  # delivered: left to expire; cancelled first: deleted with the task
        entry = entries[task_uuid]
        assert entry is None or int(entry["ttl"]) == (T0_MS + 1_000) // 1000 + REGISTRY_TTL_S
    assert any(entries[t] is not None for t in expiring), "some one-shot was delivered before its cancel"
    taken = next(t for t in expiring if entries[t] is not None)
    create(a, 3, T0_MS + 600_000, task_uuid=taken)  # any user of the tenant may take the uuid over
    assert scanned(client, table, "tenant-a") == (1, 1)


def test_a_batch_of_settlements_merged_into_one_transaction_folds_its_decrements(tenants):
    """run_task's records run together and their settlements go out as one merged transaction, each tenant's
    decrements folded into one action per counter: the counts come out exact (the request saving is measured by
    ``python -m bench tenants``, docs/performance.md)."""
    from amsg.engine.run_task import run_together

    ctx, scopes, sender, queue, client, table = tenants
    for tenant in ("tenant-a", "tenant-b"):
        for i in range(3):
            create(scopes[tenant], i, T0_MS + 1_000)
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    bodies = [queue.items.get_nowait() for _ in range(queue.items.qsize())]
    assert len(bodies) == 6
    jobs = [
        functools.partial(
            run_message, ctx, parse_task_message(json.dumps(body)), remaining_ms=lambda: 100_000, owner=f"b{i}"
        )
        for i, body in enumerate(bodies)
    ]
    assert sum(result.get("successCount", 0) for result in run_together(ctx, jobs)) == 6
    assert len(sender.sent) == 6
    assert scanned(client, table, "tenant-a") == (0, 0)
    assert scanned(client, table, "tenant-b") == (0, 0)


def test_fold_sums_each_counters_decrements_and_keeps_everything_else():
    a, b = tenant_space("tenant-a"), tenant_space("tenant-b")
    other = {"Delete": {"Key": {"PK": "N#tenant-a#U#u", "SK": "T#x"}}}
    folded = pending.fold([pending.decrement(a), other, pending.decrement(b), pending.decrement(a, 2)])
    assert folded == [pending.decrement(a, 3), other, pending.decrement(b)]
    assert not pending.is_decrement(pending.increment(a, 5))
