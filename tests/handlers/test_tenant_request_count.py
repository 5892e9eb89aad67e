"""The multi-tenant line costs what the single line costs per delivered task, plus one registry page and one
due-index query per tenant per tick (docs/tenancy-data.md, cost model): several tenants' claims share one
transaction and one read back, and run_task reads each tenant's record in its own batch read, not with a
registry GetItem. DynamoDB requests are counted at botocore's request entry point, through the real tick and
run_task handlers on moto, so a change that brings a per-tenant request back fails here, not only in a bench."""

from __future__ import annotations

import json
import types
import uuid
import zlib
from collections import Counter

import pytest

from tests.conftest import T0_MS, moto_client
from tests.support.aws_calls import Call, record_aws_calls
from tests.support.tenants_stack import init_tenant, multi_world, tenant_client

FIXED = {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": "2030-01-01T00:00:00Z"}
USERS = 3  # per tenant: one task each


@pytest.fixture
def multi(moto_table, make_context, monkeypatch):
    from amsg.adapters.dynamo import coalescing

    # a batch's records wait for each other up to 1 s instead of production's 20 ms: what these tests pin is what
    # the records share when their calls line up, which a loaded test machine must not turn into a timing lottery
    monkeypatch.setattr(
        coalescing.DynamoCoalescer,
        "session",
        lambda self, participants: coalescing.CoalescingSession(self._table, participants, max_wait_s=1.0),
    )
    # the claims batched (ClaimWrites=transaction): what these tests pin is that a round's claims of every tenant
    # share one transaction and one read back; single claims are one UpdateItem each, whatever the tenant
    with multi_world(moto_table, make_context, AMSG_CLAIM_WRITES="transaction") as world:
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


def _subscribed(multi, token: str):
    client = tenant_client(multi.api, token, str(uuid.uuid4()))
    client.init()
    assert client.put_subscription(multi.push.subscribe().to_json()).status == 200
    return client


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


def _assert_one_batch(run: Counter[str], delivered: int) -> None:
    """One read and one append transaction for the whole batch; each delivered task's mark (an ``UpdateItem``) and
    its settlement (a tenant's one-shot: the task, its pending count and its registry entry in one transaction),
    merged with the batch's other settlements when they come at about the same time (docs/delivery.md)."""
    assert run["BatchGetItem"] == 1 and run["UpdateItem"] == delivered, run
    assert 2 <= run["TransactWriteItems"] <= 1 + delivered, run
    assert set(run) == {"BatchGetItem", "UpdateItem", "TransactWriteItems"}, run


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
    # exactly the single line's batch: one read (tasks, subscriptions, counters, and the tenants' records), one
    # append transaction, then per task its delivered mark and its settlement; no registry GetItem
    _assert_one_batch(_dynamodb(run_calls.calls), delivered=2 * USERS)
    assert all(len(multi.push.received_for(s.endpoint_id)) == 1 for s in a.subs + b.subs)


def test_a_tenant_disabled_after_the_tick_delivers_nothing_and_costs_no_extra_read(multi):
    a, b = _tenant_with_due_tasks(multi), _tenant_with_due_tasks(multi)
    multi.ctx.clock.current_ms = T0_MS + 86_401_000
    assert multi.harness.tick()["claimedTasks"] == 2 * USERS
    multi.ctx.tenant_registry.set_status(b.id, "disabled", multi.ctx.now_ms())

    messages = multi.harness.receive()
    with record_aws_calls() as run_calls:
        multi.harness.run(messages)
    _assert_one_batch(_dynamodb(run_calls.calls), delivered=USERS)
    assert all(len(multi.push.received_for(s.endpoint_id)) == 1 for s in a.subs)
    assert all(
        multi.push.received_for(s.endpoint_id) == [] for s in b.subs
    )  # its record, read with its tasks, said disabled


def _on_slot(tenant_id: str, now_ms: int) -> bool:
    from amsg.engine.tick import TENANT_HOUSEKEEPING_EVERY

    return zlib.crc32(tenant_id.encode()) % TENANT_HOUSEKEEPING_EVERY == (now_ms // 60_000) % TENANT_HOUSEKEEPING_EVERY


def test_with_many_tenants_the_tick_reads_no_due_index_of_a_tenant_with_nothing_pending(multi, monkeypatch):
    """One BatchGetItem of the pending counts replaces the due-index queries of the tenants with none (a tenant
    that never had a task, one whose tasks were all cancelled); a tenant with pending tasks, due or not, is read."""
    from amsg.engine import tick as tick_module

    monkeypatch.setattr(tick_module, "IDLE_CHECK_MIN_TENANTS", 2)
    _tenant_with_due_tasks(multi)  # busy
    never = init_tenant(multi.api).data["tenantId"]
    later = init_tenant(multi.api)
    later_client = _subscribed(multi, later.data["tenantToken"])
    assert later_client.schedule({**FIXED, "firstSendTime": "2030-02-01T00:00:00Z"}).status == 201  # not due yet
    cancelled = init_tenant(multi.api)
    cancelled_client = _subscribed(multi, cancelled.data["tenantToken"])
    made = cancelled_client.schedule(FIXED).data["uuid"]
    assert cancelled_client.cancel(made).status == 200

    now = multi.ctx.clock.current_ms = T0_MS + 86_401_000
    idle = [never, cancelled.data["tenantId"]]
    with record_aws_calls() as tick_calls:
        summary = multi.harness.tick()
    assert summary["claimedTasks"] == USERS
    counted = _dynamodb(tick_calls.calls)
    on_slot = sum(_on_slot(tenant, now) for tenant in idle)  # an idle tenant is still read one tick in ten
    assert counted["Query:due"] == 2 + on_slot  # the busy tenant and the one with a task due next month
    assert counted["BatchGetItem"] == 2  # the pending counts, the claims' read back
    assert summary["details"]["housekeeping"]["idleTenantsSkipped"] == len(idle) - on_slot


def test_a_count_of_zero_holds_a_due_task_back_one_housekeeping_period_at_most(multi, monkeypatch):
    """Were a tenant's count ever wrong, its due index is still read on its housekeeping slot."""
    from amsg.engine import tick as tick_module

    monkeypatch.setattr(tick_module, "IDLE_CHECK_MIN_TENANTS", 2)
    a, b = _tenant_with_due_tasks(multi), _tenant_with_due_tasks(multi)
    moto_client("dynamodb").put_item(  # A's counter says 0 (never happens: a fault injected)
        TableName=multi.table, Item={"PK": {"S": f"N#{a.id}#PENDING"}, "SK": {"S": "#"}, "n": {"N": "0"}}
    )
    multi.ctx.clock.current_ms = T0_MS + 86_401_000
    seen: list[set[str]] = []
    for _ in range(tick_module.TENANT_HOUSEKEEPING_EVERY):
        on_slot = _on_slot(a.id, multi.ctx.now_ms())
        multi.harness.tick()
        seen.append({json.loads(m["Body"])["tenantId"] for m in multi.harness.receive()})
        assert (a.id in seen[-1]) == on_slot  # A is read on its slot only, and then its tasks are claimed
        if on_slot:
            break
        multi.ctx.clock.current_ms += 60_000
    assert b.id in seen[0]  # B's count is right: its tasks go in the first tick


def test_a_claim_lost_in_a_shared_transaction_drops_only_that_task(multi, monkeypatch):
    """Another tick claims one of B's tasks between this tick's due read and its claims: the shared transaction
    is cancelled, retried without that task, and every other claim of both tenants lands in its own space."""
    from amsg.engine import tick as tick_module
    from amsg.tenancy.scope import scoped_context

    a, b = _tenant_with_due_tasks(multi), _tenant_with_due_tasks(multi)
    multi.ctx.clock.current_ms = T0_MS + 86_401_000
    b_scope = scoped_context(multi.ctx, b.id, multi.ctx.tenant_keys.master_key(b.id))
    real_take_round, taken = tick_module._take_round, []

    def other_tick_first(*args, **kwargs):
        parts, still = real_take_round(*args, **kwargs)
        for lane, chunk in parts:
            if lane.ctx.tenant_id == b.id and not taken:
                first = chunk[0]
                row = b_scope.claims.claim(
                    first.user_id,
                    first.uuid,
                    expected_next_send_at_ms=first.next_send_at_ms,
                    now_ms=multi.ctx.now_ms(),
                    lease_until_ms=multi.ctx.now_ms() + 60_000,
                    owner="elsewhere",
                )
                taken.append(row.uuid)
        return parts, still

    monkeypatch.setattr(tick_module, "_take_round", other_tick_first)
    with record_aws_calls() as tick_calls:
        summary = multi.harness.tick()
    assert summary["claimedTasks"] == 2 * USERS - 1 and summary["details"]["claimSkippedTasks"] == 1
    counted = _dynamodb(tick_calls.calls)
    assert counted["TransactWriteItems"] == 2 and counted["BatchGetItem"] == 1  # cancelled once, then retried
    bodies = [json.loads(m["Body"]) for m in multi.harness.receive()]
    assert {body["uuid"] for body in bodies if body["tenantId"] == a.id} == a.tasks
    assert {body["uuid"] for body in bodies if body["tenantId"] == b.id} == b.tasks - set(taken)
