"""The per-tenant pending-task limit over HTTP (docs/tenancy.md, limits): 429 TENANT_PENDING_LIMIT with
Retry-After at the limit, other tenants unaffected, the count going down when a task is cancelled or delivered,
a per-tenant override, supersede at the limit, and no counter at all on the single line."""

from __future__ import annotations

import types
import uuid

import pytest

from tests.conftest import T0_MS, moto_client
from tests.support.tenants_stack import init_tenant, multi_world, scan_all, tenant_client

FIXED = {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": "2030-01-01T00:00:00Z"}


@pytest.fixture
def multi(moto_table, make_context):
    with multi_world(moto_table, make_context, AMSG_TENANT_MAX_PENDING_TASKS="2") as world:
        yield world


def _tenant(multi):
    created = init_tenant(multi.api)
    assert created.status == 201, created.text
    client = tenant_client(multi.api, created.data["tenantToken"])
    client.init()
    subscription = multi.push.subscribe()
    assert client.put_subscription(subscription.to_json()).status == 200
    return types.SimpleNamespace(id=created.data["tenantId"], client=client)


def _pending(multi, tenant_id: str) -> tuple[int, int | None]:
    from amsg.adapters.dynamo import pending
    from amsg.adapters.dynamo.keys import tenant_space

    return pending.read(multi.ctx.tasks.db, tenant_space(tenant_id))


def _schedule(tenant, **extra):
    return tenant.client.schedule({**FIXED, **extra})


def test_the_limit_answers_429_with_retry_after_and_spares_other_tenants(multi):
    a, b = _tenant(multi), _tenant(multi)
    made = [_schedule(a) for _ in range(2)]
    assert [r.status for r in made] == [201, 201]
    refused = _schedule(a)
    assert refused.status == 429 and refused.code == "TENANT_PENDING_LIMIT", refused.text
    assert refused.body["error"]["details"] == {"limit": 2}
    assert refused.headers.get("retry-after") == "60"
    assert _pending(multi, a.id) == (2, None)
    # B has its own count
    assert [_schedule(b).status for _ in range(2)] == [201, 201]
    assert _pending(multi, b.id) == (2, None)
    # cancelling one of A's makes room for exactly one
    assert a.client.cancel(made[0].data["uuid"]).status == 200
    assert _pending(multi, a.id) == (1, None)
    assert _schedule(a).status == 201
    assert _schedule(a).code == "TENANT_PENDING_LIMIT"
    # a refused create left nothing behind: A lists exactly its two pending tasks
    assert len(a.client.list_messages().data["tasks"]) == 2


def test_replacing_a_pending_task_at_the_limit_is_not_a_new_pending_task(multi):
    a = _tenant(multi)
    first = _schedule(a)
    _schedule(a)
    replaced = _schedule(a, uuid=str(uuid.uuid4()), supersedesUuid=first.data["uuid"])
    assert replaced.status == 201, replaced.text
    assert replaced.data["superseded"] is True
    assert _pending(multi, a.id) == (2, None)


def test_delivered_tasks_leave_the_count(multi):
    a = _tenant(multi)
    assert [_schedule(a).status for _ in range(2)] == [201, 201]
    multi.ctx.clock.current_ms = T0_MS + 86_401_000  # just after firstSendTime
    summary = multi.harness.tick()
    assert summary["claimedTasks"] == 2
    multi.harness.drain()
    assert len(multi.push.received) == 2
    assert _pending(multi, a.id) == (0, None)
    assert _schedule(a, firstSendTime="2031-01-01T00:00:00Z").status == 201


def test_a_tenant_override_replaces_the_default(multi):
    from amsg.adapters.dynamo import pending
    from amsg.adapters.dynamo.keys import tenant_space

    a, b = _tenant(multi), _tenant(multi)
    pending.set_override(multi.ctx.tasks.db, tenant_space(a.id), 3)
    pending.set_override(multi.ctx.tasks.db, tenant_space(b.id), 1)
    assert [_schedule(a).status for _ in range(4)] == [201, 201, 201, 429]
    refused = [_schedule(b) for _ in range(2)]
    assert [r.status for r in refused] == [201, 429]
    assert refused[1].body["error"]["details"] == {"limit": 1}
    pending.set_override(multi.ctx.tasks.db, tenant_space(b.id), 0)  # no limit for B
    assert [_schedule(b).status for _ in range(3)] == [201, 201, 201]
    pending.set_override(multi.ctx.tasks.db, tenant_space(b.id), None)  # back to the default (2)
    assert _schedule(b).code == "TENANT_PENDING_LIMIT"
    assert _pending(multi, b.id) == (4, None)


def test_the_single_line_keeps_no_counter(ctx):
    from tests.support.fake_push import FakePushService
    from tests.support.inprocess import InProcessApi
    from tests.support.wire_client import WireClient

    client = WireClient(InProcessApi(), user_id=str(uuid.uuid4()))
    client.init()
    with FakePushService() as push:
        assert client.put_subscription(push.subscribe().to_json()).status == 200
    assert client.schedule(FIXED).status == 201
    assert client.cancel(client.list_messages().data["tasks"][0]["uuid"]).status == 200
    items = scan_all(moto_client("dynamodb"), ctx.settings.table_name)
    assert not [item for item in items if "PENDING" in item["PK"]["S"]]


def test_delivery_metrics_carry_a_bounded_tenant_dimension(multi, capsys, monkeypatch):
    import dataclasses

    from tests.handlers.test_metrics import emitted
    from tests.support.tenants_stack import init_tenant

    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    named_id = str(uuid.uuid4())
    multi.ctx.settings = dataclasses.replace(multi.ctx.settings, metrics_tenants=frozenset({named_id}))
    created = init_tenant(multi.api, body=f'{{"tenantId": "{named_id}"}}')
    assert created.status == 201, created.text
    named = tenant_client(multi.api, created.data["tenantToken"])
    named.init()
    assert named.put_subscription(multi.push.subscribe().to_json()).status == 200
    others = [_tenant(multi) for _ in range(2)]
    for client in (named, *(t.client for t in others)):
        assert client.schedule(FIXED).status == 201
    multi.ctx.clock.current_ms = T0_MS + 86_401_000
    capsys.readouterr()
    multi.harness.tick()
    multi.harness.drain()
    metrics = emitted(capsys.readouterr().out)
    by_tenant: dict[tuple[str, str], float] = {}
    for name, _, dims, values in metrics:
        if "Tenant" in dims:
            assert set(dims) == {"service", "Tenant"}
            key = (name, dims["Tenant"])
            by_tenant[key] = by_tenant.get(key, 0) + (len(values) if name == "DeliveryLatency" else sum(values))
    # the named tenant under its id, the two others together under "other"; the aggregate metrics stay as they were
    assert by_tenant[("TasksDelivered", named_id)] == 1 and by_tenant[("TasksDelivered", "other")] == 2
    assert by_tenant[("DeliveryLatency", named_id)] == 1 and by_tenant[("DeliveryLatency", "other")] == 2
    assert {dims["Tenant"] for _, _, dims, _ in metrics if "Tenant" in dims} == {named_id, "other"}
    assert sum(len(v) for name, _, dims, v in metrics if name == "DeliveryLatency" and "Tenant" not in dims) == 3
