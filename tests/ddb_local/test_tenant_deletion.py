"""Deleting a tenant while its tasks are being delivered, on DynamoDB Local: deliveries that start after the
deletion began push nothing, the tick's bounded steps remove every item of the tenant (a whole-table scan finds
none), and the other tenant's items are exactly as they were."""

from __future__ import annotations

import threading

import pytest
from amsg.engine.tenant_deletion import advance_tenant_deletions, start_tenant_deletion
from amsg.engine.tick import run_tick
from amsg.tenancy.scope import scoped_context

from tests.ddb_local.test_tenant_fairness import seed
from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, consume, ddb_context, with_fakes
from tests.support.tenants_stack import memory_tenants, namespace_of, scan_all

pytestmark = pytest.mark.ddb_local

BATCH = 5


class DeletingSender(RecordingPushSender):
    """Starts tenant A's deletion from inside its fifth push (deterministically mid-delivery)."""

    def __init__(self, a_tasks: set[str]) -> None:
        super().__init__()
        self.a_tasks = a_tasks
        self.start: object = None
        self.a_before = 0

    def send(self, subscription, payload, **kw):  # type: ignore[no-untyped-def]
        status = super().send(subscription, payload, **kw)
        with self.lock:
            a_sent = sum(1 for push in self.sent if push["taskUuid"] in self.a_tasks)
        if a_sent == 5 and self.start is not None:
            start, self.start = self.start, None
            self.a_before = a_sent
            start()  # type: ignore[operator]
        return status


def test_a_tenant_deleted_while_its_tasks_are_delivered_leaves_nothing_and_touches_no_other(
    ddb_local_endpoint, ddb_local_table, ddb_local_client
):
    ctx = ddb_context(
        ddb_local_endpoint, ddb_local_table, AMSG_TENANCY="multi", AMSG_KMS_KEY_ID="unused-the-registry-is-in-memory"
    )
    keys = memory_tenants(ctx, ["tenant-a", "tenant-b"])
    scopes = {tenant: scoped_context(ctx, tenant, key) for tenant, key in keys.items()}
    a_tasks = set(seed(scopes["tenant-a"], 40, T0_MS + 1_000, users=10))
    seed(scopes["tenant-b"], 20, T0_MS + 1_000, users=5)
    sender, queue = DeletingSender(a_tasks), MemoryQueue()
    with_fakes(ctx, sender, queue)
    sender.start = lambda: start_tenant_deletion(ctx, "tenant-a")
    ctx.clock.current_ms = T0_MS + 61_000

    assert run_tick(ctx)["claimedTasks"] == 60
    stop = threading.Event()
    consumer = threading.Thread(target=consume, args=(ctx, queue, stop), kwargs={"batch_size": BATCH})
    consumer.start()
    stop.set()
    consumer.join(timeout=300)
    assert not consumer.is_alive()

    a_pushes = sum(1 for push in sender.sent if push["taskUuid"] in a_tasks)
    b_pushes = len(sender.sent) - a_pushes
    assert b_pushes == 20  # B is delivered in full
    # only deliveries already running in A's batch when the deletion began could still push
    assert sender.a_before == 5 and a_pushes - sender.a_before < BATCH
    assert run_tick(ctx)["claimedTasks"] == 0  # A is no longer served, B has nothing due

    b_items = sorted(
        (i["PK"]["S"], i["SK"]["S"])
        for i in scan_all(ddb_local_client, ddb_local_table)
        if namespace_of(i) == "tenant:tenant-b"
    )
    assert b_items
    for _ in range(50):  # bounded steps; no grace here (no delivery is running any more)
        progress = advance_tenant_deletions(ctx, lambda: 60_000, grace_ms=0)
        if progress["tenantDeletionsFinished"]:
            break
    else:
        pytest.fail("the deletion did not finish")

    items = scan_all(ddb_local_client, ddb_local_table)
    assert [i for i in items if namespace_of(i) == "tenant:tenant-a"] == []
    assert sorted((i["PK"]["S"], i["SK"]["S"]) for i in items if namespace_of(i) == "tenant:tenant-b") == b_items
    assert not any(i["PK"]["S"] == "TENANT_PURGE" for i in items)
    assert ctx.tenant_purge.pending() == []
