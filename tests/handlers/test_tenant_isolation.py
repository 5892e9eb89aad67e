"""Isolation by construction on the multi-tenant line: two tenants, the same X-User-Id, a full journey each
over HTTP (init-tenant, tenant tokens, schedule, tick, run_task, push), then a scan of the whole table: every item
lies in exactly one tenant's namespace (table and index partition keys alike) and nothing is written unprefixed."""

from __future__ import annotations

import types
import uuid
from collections import Counter

import pytest

from tests.conftest import T0_MS, moto_client
from tests.support.tenants_stack import init_tenant, multi_world, namespace_of, scan_all, tenant_client

FIXED = {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": "2030-01-01T00:00:00Z"}


@pytest.fixture
def multi(moto_table, make_context):
    with multi_world(moto_table, make_context) as world:
        yield world


def _tenant(multi, user_id: str):
    created = init_tenant(multi.api)
    assert created.status == 201, created.text
    data = created.data
    client = tenant_client(multi.api, data["tenantToken"], user_id)
    client.init()
    subscription = multi.push.subscribe()
    assert client.put_subscription(subscription.to_json()).status == 200
    return types.SimpleNamespace(id=data["tenantId"], cron=data["cronToken"], client=client, sub=subscription)


def test_two_tenants_with_one_user_id_are_two_users_and_every_item_is_keyed_under_its_tenant(multi):
    user_id = str(uuid.uuid4())
    a, b = _tenant(multi, user_id), _tenant(multi, user_id)
    assert a.client.user_key != b.client.user_key  # two master keys: the same user id is two users

    made = {}
    for tenant, text in ((a, "for A"), (b, "for B")):
        resp = tenant.client.schedule({**FIXED, "userMessage": text})
        assert resp.status == 201, resp.text
        made[tenant.id] = resp.data["uuid"]
        assert (
            tenant.client.put_client_state([{"namespace": "ns", "key": "k", "value": text, "updatedAt": 1}]).status
            == 200
        )

    # neither tenant sees the other's task, by list or by uuid
    assert [t["uuid"] for t in a.client.list_messages().data["tasks"]] == [made[a.id]]
    assert a.client.get_message(made[b.id]).code == "TASK_NOT_FOUND"
    assert b.client.cancel(made[a.id]).code == "TASK_NOT_FOUND"

    items = scan_all(moto_client("dynamodb"), multi.table)
    spaces = Counter(namespace_of(item) for item in items)
    assert set(spaces) <= {f"tenant:{a.id}", f"tenant:{b.id}", "deployment"}, spaces
    assert spaces[f"tenant:{a.id}"] == spaces[f"tenant:{b.id}"] > 0  # the same journey, the same items
    tasks = [item for item in items if item["SK"]["S"].startswith("T#")]
    assert {item["user_id"]["S"] for item in tasks} == {user_id}
    assert len({item["PK"]["S"] for item in tasks}) == 2
    assert all(item["due_pk"]["S"].startswith(item["PK"]["S"].split("#U#")[0] + "#DUE#") for item in tasks)

    multi.ctx.clock.current_ms = T0_MS + 86_401_000  # just after firstSendTime
    summary = multi.harness.tick()
    assert summary["claimedTasks"] == 2 and summary["tenants"] == 2
    multi.harness.drain()
    received = multi.push.received
    assert len(received) == 2
    by_endpoint = {r.endpoint_id: r for r in received}
    ids = {tenant.id: tenant.sub.endpoint.rstrip("/").rsplit("/", 1)[-1] for tenant in (a, b)}
    assert set(by_endpoint) == set(ids.values())
    # each push was decrypted by its own subscription's keys and carries its own tenant's content
    assert "for A" in (by_endpoint[ids[a.id]].plaintext or b"").decode()
    assert "for B" in (by_endpoint[ids[b.id]].plaintext or b"").decode()

    # reads stay in the tenant too: outbox pages and client state
    for tenant, text in ((a, "for A"), (b, "for B")):
        entries = tenant.client.get_encrypted("/outbox").data["entries"]
        assert {e["push"]["taskUuid"] for e in entries} == {made[tenant.id]}
        state = tenant.client.get_client_state("ns")
        assert state.status == 200, state.text
        assert [(e["key"], e["value"]) for e in state.data["entries"]] == [("k", text)]

    after = Counter(namespace_of(item) for item in scan_all(moto_client("dynamodb"), multi.table))
    assert set(after) <= {f"tenant:{a.id}", f"tenant:{b.id}", "deployment"}, after


def test_a_tenant_token_reaches_only_its_own_tenant(multi):
    user_id = str(uuid.uuid4())
    a, b = _tenant(multi, user_id), _tenant(multi, user_id)
    created = a.client.schedule(FIXED)
    assert created.status == 201
    # B's token with A's user id and A's task uuid: B's space has no such task
    assert b.client.get_message(created.data["uuid"]).code == "TASK_NOT_FOUND"
    assert b.client.list_messages().data["tasks"] == []
    # a cron token is not a tenant token
    cron_client = tenant_client(multi.api, a.cron, user_id)
    assert cron_client.request("GET", "/get-user-key").code == "INVALID_TENANT_AUTH"


def test_run_task_delivers_nothing_for_a_message_without_an_active_tenant(multi):
    from amsg.engine.messages import TaskMessage
    from amsg.engine.run_task import run_message

    for message, reason in (
        (TaskMessage("u", "x", 1, "2030-01-01T00:00:00.000Z"), "tenant_missing"),
        (TaskMessage("u", "x", 1, "2030-01-01T00:00:00.000Z", tenant_id="nobody"), "tenant_inactive"),
    ):
        result = run_message(multi.ctx, message, remaining_ms=lambda: 100_000, owner="t")
        assert result["skipped"] == reason
    assert multi.push.received == []


def test_a_tenants_cleanup_operation_is_resumed_by_the_tick_in_its_own_space(multi):
    from amsg.engine.tick import TENANT_CLEANUP_EVERY, _cleanup_turn, run_tick
    from amsg.tenancy.scope import scoped_context

    from tests.handlers.test_cloud_cleanup_operations import owned, seed_many
    from tests.handlers.test_cloud_data import ALICE, BOB, get, post

    user_id = str(uuid.uuid4())
    a, b = _tenant(multi, user_id), _tenant(multi, user_id)
    for tenant in (a, b):
        seed_many(tenant.client)
    plan = post(a.client, "cleanup-plans", {"mode": "retire-owner", "owner": ALICE}).data
    op = post(a.client, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "big"}).data
    assert op["status"] == "pending" and owned(a.client, ALICE) == 35

    # an idle tenant's cleanup index is read one minute in TENANT_CLEANUP_EVERY; then every tick while it has work
    lane = scoped_context(multi.ctx, a.id, lambda: None)
    minutes = [multi.ctx.clock.current_ms + 60_000 * m for m in range(1, TENANT_CLEANUP_EVERY + 1)]
    slot = next(ms for ms in minutes if _cleanup_turn(lane, ms))
    multi.ctx.clock.current_ms = slot - 60_000
    # the minute before A's slot nothing advances (it may be B's slot: its read finds nothing)
    assert not run_tick(multi.ctx)["details"]["housekeeping"].get("cleanupOperationsAdvanced")
    multi.ctx.clock.current_ms = slot
    assert run_tick(multi.ctx)["details"]["housekeeping"].get("cleanupOperationsAdvanced") == 1
    run_tick(multi.ctx)  # the next minute's tick, whatever its slot
    assert get(a.client, f"cleanup-operations/{op['id']}").data["status"] == "completed"
    assert owned(a.client, ALICE) == 0 and owned(a.client, BOB) == 2
    # the other tenant's owner of the same name, with the same user id, is untouched
    assert owned(b.client, ALICE) == 60 and owned(b.client, BOB) == 2
    assert get(b.client, f"cleanup-operations/{op['id']}").status == 404
