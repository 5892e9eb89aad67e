"""One tick for every tenant, fairly, on DynamoDB Local: a tenant's backlog, due earlier than another tenant's few
tasks and larger than the tick's claim limit, does not hold them back — they are claimed in the first tick, and
each queued message names its tenant, whose scope run_task delivers in."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tick import run_tick
from amsg.ports import NewTask
from amsg.tenancy.scope import scoped_context

from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, with_fakes
from tests.support.tenants_stack import memory_tenants

pytestmark = pytest.mark.ddb_local

BACKLOG = 300
CLAIM_LIMIT = 100


def seed(ctx, count: int, due_ms: int, users: int = 20) -> list[str]:
    """``count`` fixed tasks due at ``due_ms`` for ``users`` users (with subscriptions), through the task store."""
    ids = [str(uuid.UUID(int=i + 1, version=4)) for i in range(users)]
    for user in ids:
        key = ctx.user_key(user)
        ctx.subscriptions.put_push_subscription(
            user, encrypt_for_storage(compact_json({"endpoint": f"https://push.invalid/{user}", "keys": {}}), key), 1
        )

    def create(i: int) -> str:
        user = ids[i % users]
        payload = compact_json({"contactName": "Rei", "messageType": "fixed", "userMessage": f"m{i}"})
        task_uuid = str(uuid.uuid4())
        ctx.tasks.create_task(
            NewTask(
                user,
                task_uuid,
                encrypt_for_storage(payload, ctx.user_key(user)),
                "fixed",
                due_ms,
                T0_MS,
            )
        )
        return task_uuid

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(create, range(count)))


@pytest.fixture
def tenants(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(
        ddb_local_endpoint,
        ddb_local_table,
        AMSG_TENANCY="multi",
        AMSG_KMS_KEY_ID="unused-the-registry-is-in-memory",
        AMSG_TICK_CLAIM_LIMIT=str(CLAIM_LIMIT),
    )
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    keys = memory_tenants(ctx, ["tenant-a", "tenant-b"])
    scopes = {tenant: scoped_context(ctx, tenant, key) for tenant, key in keys.items()}
    return ctx, scopes, sender, queue


def test_a_small_tenant_behind_a_large_backlog_is_claimed_in_the_first_tick(tenants):
    ctx, scopes, sender, queue = tenants
    seed(scopes["tenant-a"], BACKLOG, T0_MS + 1_000)  # due first
    b_tasks = seed(scopes["tenant-b"], 10, T0_MS + 50_000, users=3)  # due after all of A's
    ctx.clock.current_ms = T0_MS + 61_000

    summary = run_tick(ctx)
    assert summary["claimedTasks"] == CLAIM_LIMIT and summary["tenants"] == 2
    messages = []
    while not queue.items.empty():
        messages.append(queue.items.get_nowait())
    by_tenant = {"tenant-a": 0, "tenant-b": 0}
    for body in messages:
        by_tenant[body["tenantId"]] += 1
    assert by_tenant == {"tenant-a": CLAIM_LIMIT - 10, "tenant-b": 10}
    assert {body["uuid"] for body in messages if body["tenantId"] == "tenant-b"} == set(b_tasks)

    # run_task delivers each message in its own tenant's scope: B's pushes decrypt under B's keys
    for body in messages:
        if body["tenantId"] == "tenant-b":
            result = run_message(ctx, parse_task_message(json.dumps(body)), remaining_ms=lambda: 100_000, owner="r")
            assert result["successCount"] == 1, result
    assert len(sender.sent) == 10

    # the rest of A's backlog comes in the next ticks, the limit's worth each
    second = run_tick(ctx)
    assert second["claimedTasks"] == CLAIM_LIMIT
    assert all(body["tenantId"] == "tenant-a" for body in list(queue.items.queue))


def test_a_tenant_message_is_never_delivered_in_another_tenant_space(tenants):
    ctx, scopes, sender, queue = tenants
    (task_uuid,) = seed(scopes["tenant-a"], 1, T0_MS + 1_000, users=1)
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    body = queue.items.get_nowait()
    assert body["tenantId"] == "tenant-a" and body["uuid"] == task_uuid
    forged = parse_task_message(json.dumps({**body, "tenantId": "tenant-b"}))
    result = run_message(ctx, forged, remaining_ms=lambda: 100_000, owner="r")
    assert result == {"skipped": "claim_not_current", "taskUuid": task_uuid}  # B's space has no such task
    assert sender.sent == []
    result = run_message(ctx, parse_task_message(json.dumps(body)), remaining_ms=lambda: 100_000, owner="r")
    assert result["successCount"] == 1
