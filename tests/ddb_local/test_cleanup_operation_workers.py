"""Cleanup operations as background work, on DynamoDB Local: workers racing on one retirement.

An owner with 100+ resources of every kind (tasks with split payloads, client state split into parts,
credentials, outbox rows with split payloads) is retired. Whatever the interleaving of the workers advancing the
operation (the request, ticks, a worker that paused past its lease, one that died), every resource is deleted
exactly once, the operation's counts are exact, and a scan of the table finds nothing of the owner left; the
other owner's data is untouched.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from amsg import runtime
from amsg.clock import OffsetClock
from amsg.crypto import UserCodec, compact_json, encrypt_for_storage
from amsg.domain.inventory import resource_id
from amsg.domain.ownership import owner_ref
from amsg.engine import cleanup
from amsg.engine.tick import run_tick
from amsg.errors import LeaseLost
from amsg.ports import CredentialWrite, NewTask, OutboxAppend, OwnerClaim, StateWrite

from tests.conftest import base_env
from tests.support import ddb_local as _ddb_local

pytestmark = pytest.mark.ddb_local

ddb_local_endpoint = _ddb_local.ddb_local_endpoint
ddb_local_client = _ddb_local.ddb_local_client
ddb_local_table = _ddb_local.ddb_local_table

ALICE = {"type": "character", "id": "alice", "label": "Alice"}
BOB = {"type": "character", "id": "bob"}
BIG = "x" * 200_000  # ~400 KB of ciphertext: stored as parts


def make_ctx(endpoint: str, name: str, offset_ms: int = 0):
    ctx = runtime.build_context(
        base_env(AMSG_TABLE_NAME=name, AWS_ENDPOINT_URL_DYNAMODB=endpoint, AWS_DEFAULT_REGION="us-east-1")
    )
    ctx.clock = OffsetClock(offset_ms=offset_ms)
    return ctx


def seed(ctx, user: str) -> dict[str, str]:
    """112 resources of Alice (payload/value parts on some of each kind) and 4 of Bob; ids → type."""
    key = ctx.user_key(user)
    expected: dict[str, str] = {}
    for owner, n_tasks, n_state, n_creds, n_outbox in ((ALICE, 40, 30, 20, 22), (BOB, 1, 1, 1, 1)):
        ref = owner_ref(owner["type"], owner["id"])
        claim = OwnerClaim(ref=ref, generation=0, meta=encrypt_for_storage(compact_json({"owner": owner}), key))
        now = ctx.now_ms()
        task_uuids = []
        for i in range(n_tasks):
            task_uuid = str(uuid.uuid4())
            body = {
                "contactName": "Rei",
                "messageType": "fixed",
                "userMessage": BIG if owner is ALICE and i < 2 else "hi",
            }
            ctx.tasks.create_task(
                NewTask(user, task_uuid, encrypt_for_storage(compact_json(body), key), "fixed",
                        1_893_456_000_000, 1_893_369_600_000, owner=claim)
            )  # fmt: skip
            task_uuids.append(task_uuid)
            if owner is ALICE:
                expected[resource_id(user, "task", [task_uuid])] = "task"

        def value(i: int, small: str) -> str:
            return encrypt_for_storage(BIG if owner is ALICE and i < 2 else small, key)

        ns = f"char-{owner['id']}"
        writes = [StateWrite(ns, f"k{i}", value(i, "v"), now, 1, owner=claim) for i in range(n_state)]
        for start in range(0, len(writes), 10):
            ctx.client_state.upsert(user, writes[start : start + 10], now_ms=now)
        creds = [
            CredentialWrite(f"{owner['id']}/c{i}", encrypt_for_storage("{}", key), owner=claim) for i in range(n_creds)
        ]
        ctx.credentials.upsert(user, creds, now)
        rows = [
            OutboxAppend(f"msg_{owner['id']}_{i}", value(i, "{}"), now, task_uuid=task_uuids[i % len(task_uuids)],
                         owner=claim)
            for i in range(n_outbox)
        ]  # fmt: skip
        ctx.outbox.append(user, rows)
        if owner is ALICE:
            expected.update({resource_id(user, "state", [w.namespace, w.key]): "state" for w in writes})
            expected.update({resource_id(user, "credential", [c.cred_id]): "credential" for c in creds})
            expected.update({resource_id(user, "outbox", [r.message_id]): "outbox" for r in rows})
    return expected


def start(ctx, user: str) -> str:
    """A retire-owner plan and its operation record, as ``POST /cleanup-operations`` stores it."""
    key = ctx.user_key(user)
    operation = {
        "id": str(uuid.uuid4()), "planId": "p", "idempotencyKey": "k", "mode": "retire-owner", "owner": ALICE,
        "ownerGeneration": 0, "fencedGeneration": None, "status": "pending",
        "counts": [{"type": t, "deleted": 0, "remaining": 0, "failed": 0}
                   for t in ("task", "state", "credential", "outbox", "subscription")],
        "errors": [], "createdAt": ctx.now_ms(), "updatedAt": ctx.now_ms(), "entries": [], "cursor": 0,
        "attempts": 0, "nextAttemptAt": 0,
    }  # fmt: skip
    cleanup.create(ctx, user, UserCodec(key), operation)
    return operation["id"]


class DeleteLog:
    """Which worker's delete committed for which resource (wraps the store of one worker's context)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.committed: list[tuple[str, str]] = []  # (worker, resource id)

    def wrap(self, ctx, worker: str, before: Any = None) -> None:
        store = ctx.cloud_data
        real = store.delete_resource
        calls = {"n": 0}

        def delete_resource(user_id, resource, progress=None):
            calls["n"] += 1
            if before is not None:
                before(calls["n"])
            ok = real(user_id, resource, progress)
            if ok:
                with self.lock:
                    self.committed.append((worker, resource_id(user_id, resource.type, resource.identity)))
            return ok

        store.delete_resource = delete_resource


def assert_exact(ctx, user: str, op_id: str, expected: dict[str, str], log: DeleteLog) -> None:
    deleted_ids = [rid for _, rid in log.committed]
    assert len(deleted_ids) == len(set(deleted_ids)), "a resource was deleted twice"
    assert set(deleted_ids) == set(expected)
    op = cleanup.load(ctx, user, ctx.codec(user), op_id)
    assert op["status"] == "completed", op
    by_type = Counter(expected.values())
    assert {c["type"]: c["deleted"] for c in op["counts"]} == {
        t: by_type.get(t, 0) for t in ("task", "state", "credential", "outbox", "subscription")
    }
    assert all(c["remaining"] == 0 and c["failed"] == 0 for c in op["counts"])
    assert op["fencedGeneration"] == 1 and op["entries"] == []
    # nothing of Alice is left anywhere in the table; Bob's four resources (and their items) are
    rows: list[dict] = []
    scan: dict = {"ConsistentRead": True}
    while True:  # plain values through the table (its low-level client answers in wire types)
        page = ctx.cloud_data.db.table.scan(**scan)
        rows += page["Items"]
        if "LastEvaluatedKey" not in page:
            break
        scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    alice_ref = owner_ref("character", "alice")
    owner_item = [r for r in rows if r["SK"] == "W#" + alice_ref]
    assert len(owner_item) == 1 and owner_item[0]["active"] is False  # owner items are kept (retired)
    assert "alice" not in repr([r for r in rows if r["SK"] != "W#" + alice_ref])  # no key or id of Alice's data
    assert [r for r in rows if r.get("owner_ref") == alice_ref] == []
    parts = [r["SK"] for r in rows if r["SK"].startswith(("TP#", "SC#", "OP#"))]
    assert parts == []  # Bob's small values have no parts, Alice's were deleted with their resources
    task_regs = [r for r in rows if r["PK"].startswith("TU#")]
    assert len(task_regs) == 1  # Bob's task only
    inventory = ctx.cloud_data.list_resources(user).resources
    assert sorted(r.type for r in inventory) == ["credential", "outbox", "state", "task"]


def test_two_workers_race_one_retirement_each_resource_deleted_once(ddb_local_endpoint, ddb_local_table):
    seeding = make_ctx(ddb_local_endpoint, ddb_local_table)
    user = str(uuid.uuid4())
    expected = seed(seeding, user)
    assert len(expected) == 112
    op_id = start(seeding, user)
    log = DeleteLog()
    errors: list[BaseException] = []
    steps = Counter()

    def worker(name: str) -> None:
        ctx = make_ctx(ddb_local_endpoint, ddb_local_table)
        log.wrap(ctx, name)
        key = ctx.user_key(user)
        try:
            for _ in range(400):
                before = cleanup.load(ctx, user, UserCodec(key), op_id)
                op = cleanup.advance(ctx, user, UserCodec(key), op_id)
                if op is not None and op["updatedAt"] != before["updatedAt"]:
                    steps[name] += 1
                if op is not None and op["status"] in ("completed", "failed"):
                    return
                time.sleep(0.005)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == []
    assert sum(steps.values()) >= 5  # 112 resources, 25 per step
    assert_exact(seeding, user, op_id, expected, log)


def test_a_worker_that_paused_past_its_lease_writes_nothing_more(ddb_local_endpoint, ddb_local_table):
    """Worker A pauses after 4 deletes; its lease expires and B takes over and finishes the whole operation;
    A's next delete fails on the lease (LeaseLost) and deletes nothing."""
    seeding = make_ctx(ddb_local_endpoint, ddb_local_table)
    user = str(uuid.uuid4())
    expected = seed(seeding, user)
    op_id = start(seeding, user)
    log = DeleteLog()
    a = make_ctx(ddb_local_endpoint, ddb_local_table)
    b = make_ctx(ddb_local_endpoint, ddb_local_table, offset_ms=cleanup.LEASE_MS + 1_000)  # A's lease is over
    log.wrap(b, "b")
    b_results = []

    def pause_then_let_b_run(n: int) -> None:
        if n == 5:
            for _ in range(20):
                op = cleanup.advance(b, user, b.codec(user), op_id)
                b_results.append(op["status"])
                if op["status"] == "completed":
                    return

    log.wrap(a, "a", before=pause_then_let_b_run)
    with pytest.raises(LeaseLost):
        cleanup.advance(a, user, a.codec(user), op_id)
    assert b_results[-1] == "completed"
    assert [w for w, _ in log.committed[:4]] == ["a"] * 4
    assert all(w == "b" for w, _ in log.committed[4:])
    assert_exact(seeding, user, op_id, expected, log)


class Died(BaseException):
    """The worker's sandbox was killed mid-step (nothing after this point runs, not even error handling)."""


def test_the_tick_resumes_an_operation_whose_worker_died(ddb_local_endpoint, ddb_local_table):
    ctx = make_ctx(ddb_local_endpoint, ddb_local_table)
    user = str(uuid.uuid4())
    expected = seed(ctx, user)
    op_id = start(ctx, user)
    log = DeleteLog()

    def die(n: int) -> None:
        if n == 11:
            raise Died

    log.wrap(ctx, "dying", before=die)
    with pytest.raises(Died):
        cleanup.advance(ctx, user, ctx.codec(user), op_id)
    log_store = ctx.cloud_data
    assert len(log.committed) == 10
    ticker = make_ctx(ddb_local_endpoint, ddb_local_table)
    log.wrap(ticker, "tick")
    # still leased: the tick leaves it alone
    summary = run_tick(ticker)
    assert summary["details"]["housekeeping"].get("cleanupOperationsAdvanced") == 0, summary
    assert len(log.committed) == 10
    # the lease runs out: ticks pick it up and finish it, 25 resources per tick
    ticker.clock.advance(cleanup.LEASE_MS + 1)
    ticks = 0
    while cleanup.load(ticker, user, ticker.codec(user), op_id)["status"] != "completed":
        summary = run_tick(ticker)
        assert summary["details"]["housekeeping"]["cleanupOperationsAdvanced"] == 1, summary
        ticks += 1
        assert ticks < 10
    assert ticks == 5  # 102 left: 25 + 25 + 25 + 25 + 2
    assert log_store is ctx.cloud_data
    assert_exact(ticker, user, op_id, expected, log)
    # finished operations leave the work index: the next tick has nothing to do
    assert run_tick(ticker)["details"]["housekeeping"]["cleanupOperationsAdvanced"] == 0
