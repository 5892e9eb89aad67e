"""The multi-tenant line costs what the single line costs per delivered task, plus one registry page and one
due-index query per tenant per tick (docs/tenancy-data.md, cost model): several tenants' claims share one
transaction and one read back, and run_task reads each tenant's record in its own batch read, not with a
registry GetItem. DynamoDB requests are counted at botocore's request entry point, through the real tick and
run_task handlers on moto, so a change that brings a per-tenant request back fails here, not only in a bench."""

from __future__ import annotations

import json
import types
import uuid
from collections import Counter

import pytest

from tests.conftest import T0_MS
from tests.support.aws_calls import Call, record_aws_calls
from tests.support.tenants_stack import init_tenant, multi_world, tenant_client

FIXED = {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": "2030-01-01T00:00:00Z"}
USERS = 3  # per tenant: one task each


@pytest.fixture
def multi(moto_table, make_context):
    with multi_world(moto_table, make_context) as world:
        yield world


def _tenant_with_due_tasks(multi) -> types.SimpleNamespace:
    created = init_tenant(multi.api)
    assert created.status == 201, created.text
    tenant = types.SimpleNamespace(id=created.data["tenantId"], tasks=set(), subs=[])
    for _ in range(USERS):
        client = tenant_client(multi.api, created.data["tenantToken"], str(uuid.uuid4()))
        client.init()
        subscription = multi.push.subscribe()
        assert client.put_subscription(subscription.to_json()).status == 200
        resp = client.schedule(FIXED)
        assert resp.status == 201, resp.text
        tenant.tasks.add(resp.data["uuid"])
        tenant.subs.append(subscription)
    return tenant


def _dynamodb(calls: list[Call]) -> Counter[str]:
    """DynamoDB requests by operation; a Query by what it reads (the registry, the due index, other indexes)."""
    counted: Counter[str] = Counter()
    for call in calls:
        if call.service != "dynamodb":
            continue
        name = call.operation
        if name == "Query":
            name += ":" + str(call.params.get("IndexName") or _partition(call.params))
        counted[name] += 1
    return counted


def _partition(params: dict) -> str:
    """The partition a table Query reads (its key condition's one value): the registry, the deletions."""
    values = [v.get("S") if isinstance(v, dict) else v for v in params.get("ExpressionAttributeValues", {}).values()]
    return "/".join(str(v) for v in values)


def _maintenance(counted: Counter[str]) -> int:
    """Queries of the housekeeping and cleanup indexes: each tenant's run one tick in a few, on a slot its
    (random) id decides, so their number varies from run to run; everything else is pinned."""
    fixed = {"Query:due", "Query:TENANTS", "Query:TENANT_PURGE"}
    return sum(n for name, n in counted.items() if name.startswith("Query:") and name not in fixed)


def test_two_tenants_tick_and_run_task_cost_one_registry_page_and_one_due_query_per_tenant_more(multi):
    a, b = _tenant_with_due_tasks(multi), _tenant_with_due_tasks(multi)
    multi.ctx.clock.current_ms = T0_MS + 86_401_000  # just after firstSendTime

    with record_aws_calls() as tick_calls:
        summary = multi.harness.tick()
    assert summary["claimedTasks"] == 2 * USERS
    tick = _dynamodb(tick_calls.calls)
    maintenance = _maintenance(tick)
    pinned = Counter({name: n for name, n in tick.items() if not _maintenance(Counter({name: n}))})
    assert pinned == Counter(
        {
            "Query:TENANTS": 1,  # the registry: one page per 100 tenants
            "Query:TENANT_PURGE": 1,  # tenants being deleted (none)
            "Query:due": 2,  # one per tenant and due shard
            "TransactWriteItems": 1,  # both tenants' claims in one transaction ...
            "BatchGetItem": 1,  # ... and one read back
        }
    ), tick
    assert maintenance <= 2 * 2  # a tenant's retention and cleanup-index reads, when its slot comes

    messages = multi.harness.receive()
    assert len(messages) == 2 * USERS  # one SQS batch holding both tenants' tasks
    assert {json.loads(m["Body"])["tenantId"] for m in messages} == {a.id, b.id}
    with record_aws_calls() as run_calls:
        result = multi.harness.run(messages)
    assert result == {"batchItemFailures": []}
    run = _dynamodb(run_calls.calls)
    # exactly the single line's batch: one read (tasks, subscriptions, counters, and the tenants' records), one
    # append transaction, one settlement transaction; no registry GetItem
    assert run == Counter({"BatchGetItem": 1, "TransactWriteItems": 2}), run
    assert all(len(multi.push.received_for(s.endpoint_id)) == 1 for s in a.subs + b.subs)


def test_a_tenant_disabled_after_the_tick_delivers_nothing_and_costs_no_extra_read(multi):
    a, b = _tenant_with_due_tasks(multi), _tenant_with_due_tasks(multi)
    multi.ctx.clock.current_ms = T0_MS + 86_401_000
    assert multi.harness.tick()["claimedTasks"] == 2 * USERS
    multi.ctx.tenant_registry.set_status(b.id, "disabled", multi.ctx.now_ms())

    messages = multi.harness.receive()
    with record_aws_calls() as run_calls:
        multi.harness.run(messages)
    assert _dynamodb(run_calls.calls) == Counter({"BatchGetItem": 1, "TransactWriteItems": 2})
    assert all(len(multi.push.received_for(s.endpoint_id)) == 1 for s in a.subs)
    assert all(
        multi.push.received_for(s.endpoint_id) == [] for s in b.subs
    )  # its record, read with its tasks, said disabled
