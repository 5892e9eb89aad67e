"""No push after a tenant's deletion starts, on DynamoDB Local (docs/tenancy-data.md#deleting-a-tenant).

Every push claim of a tenant's delivery carries a condition check of the tenant's registry record (active) in
its own transaction. Two races: the deletion starts after run_task checked the tenant but before the first
push is claimed, and between the two pushes of one delivery. Neither pushes after the start; the run stops as
``tenant_inactive`` without settling the task; the other tenant delivers as usual.
"""

from __future__ import annotations

import json
import uuid

import pytest
from amsg.adapters.dynamo.claims import DynamoClaimStore
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tenant_deletion import start_tenant_deletion
from amsg.engine.tick import run_tick
from amsg.ports import NewTask
from amsg.tenancy.scope import scoped_context

from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, with_fakes
from tests.support.tenants_stack import memory_tenants

pytestmark = pytest.mark.ddb_local

USER = str(uuid.UUID(int=7, version=4))


def _world(endpoint: str, table: str):
    ctx = ddb_context(endpoint, table, AMSG_TENANCY="multi", AMSG_KMS_KEY_ID="unused-keys-are-wrapped-locally")
    keys = memory_tenants(ctx, ["tenant-a", "tenant-b"])
    scopes = {tenant: scoped_context(ctx, tenant, key) for tenant, key in keys.items()}
    for scope in scopes.values():
        subscription = compact_json({"endpoint": "https://push.invalid/x", "keys": {}})
        scope.subscriptions.put_push_subscription(USER, encrypt_for_storage(subscription, scope.user_key(USER)), 1)
    return ctx, scopes


def _task(scope, text: str) -> str:
    task_uuid = str(uuid.uuid4())
    payload = compact_json({"contactName": "Rei", "messageType": "fixed", "userMessage": text})
    scope.tasks.create_task(
        NewTask(USER, task_uuid, encrypt_for_storage(payload, scope.user_key(USER)), "fixed", T0_MS + 1_000, T0_MS)
    )
    return task_uuid


def _claimed_messages(ctx, queue: MemoryQueue) -> dict[str, object]:
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    messages = {}
    while not queue.items.empty():
        message = parse_task_message(json.dumps(queue.items.get_nowait()))
        messages[message.tenant_id] = message
    return messages


def _pushes_of(sender: RecordingPushSender, task_uuid: str) -> list[str]:
    return [push["messageId"] for push in sender.sent if push["taskUuid"] == task_uuid]


def _unsent_outbox_rows(scope, task_uuid: str) -> list[object]:
    task = scope.tasks.get_task(USER, task_uuid)
    rows = scope.outbox.list_for_task(USER, task_uuid, named=task.outbox_message_ids if task else ())
    return [row for row in rows if row.sending_at is None and row.delivered_at is None]


def test_a_deletion_started_after_the_tenant_check_stops_the_first_push(
    ddb_local_endpoint, ddb_local_table, ddb_local_client, monkeypatch
):
    ctx, scopes = _world(ddb_local_endpoint, ddb_local_table)
    a_task, b_task = _task(scopes["tenant-a"], "one。two"), _task(scopes["tenant-b"], "one。two")
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    messages = _claimed_messages(ctx, queue)
    # run_task reads the tenant's record with its task (open_run): A is active then, and its deletion starts
    # right after that read, before the first push is claimed
    open_run, started = DynamoClaimStore.open_run, []

    def open_then_delete(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        snapshot = open_run(self, *args, **kwargs)
        if not started:
            started.append(True)
            assert snapshot is not None and snapshot.tenant is not None and snapshot.tenant.status == "active"
            start_tenant_deletion(ctx, "tenant-a")
        return snapshot

    monkeypatch.setattr(DynamoClaimStore, "open_run", open_then_delete)
    result = run_message(ctx, messages["tenant-a"], remaining_ms=lambda: 100_000, owner="run-a")
    assert started and _pushes_of(sender, a_task) == []
    assert [entry["status"] for entry in result["details"]["cancelledTasks"]] == ["tenant_inactive"]
    row = scopes["tenant-a"].tasks.get_task(USER, a_task)
    assert row is not None and row.status == "pending"  # left for the deletion: nothing settled, no retry spent
    assert row.retry_count == 0

    monkeypatch.setattr(DynamoClaimStore, "open_run", open_run)
    run_message(ctx, messages["tenant-b"], remaining_ms=lambda: 100_000, owner="run-b")
    assert len(_pushes_of(sender, b_task)) == 2  # the other tenant is not fenced


class DeletingSender(RecordingPushSender):
    """Starts the deletion from inside the first push it accepts."""

    def __init__(self, start) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.start = start

    def send(self, subscription, payload, **kw):  # type: ignore[no-untyped-def]
        status = super().send(subscription, payload, **kw)
        start, self.start = self.start, None
        if start is not None:
            start()
        return status


def test_a_deletion_started_between_two_pushes_stops_the_second(ddb_local_endpoint, ddb_local_table):
    ctx, scopes = _world(ddb_local_endpoint, ddb_local_table)
    a_task = _task(scopes["tenant-a"], "one。two。three")
    sender, queue = DeletingSender(lambda: start_tenant_deletion(ctx, "tenant-a")), MemoryQueue()
    with_fakes(ctx, sender, queue)
    message = _claimed_messages(ctx, queue)["tenant-a"]

    result = run_message(ctx, message, remaining_ms=lambda: 100_000, owner="run-a")
    assert len(_pushes_of(sender, a_task)) == 1  # the push that was claimed before the deletion started
    assert [entry["status"] for entry in result["details"]["cancelledTasks"]] == ["tenant_inactive"]
    assert len(_unsent_outbox_rows(scopes["tenant-a"], a_task)) == 2  # appended, never claimed for sending
    row = scopes["tenant-a"].tasks.get_task(USER, a_task)
    assert row is not None and row.status == "pending"
