"""A task claimed by the tick whose owner is retired before ``run_task`` adopts the claim is cancelled
(``owner_retired``), never delivered, on DynamoDB Local: no push, no outbox row left to pull, out of the due
index for good (a later tick claims nothing, even after a restore); another owner's tasks in the same batch are
delivered normally."""

from __future__ import annotations

import json
import uuid

import pytest
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.domain.ownership import owner_ref
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tick import run_tick
from amsg.ports import NewTask, OwnerClaim

from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, with_fakes

pytestmark = pytest.mark.ddb_local

ALICE = owner_ref("character", "alice")
BOB = owner_ref("character", "bob")


def test_a_claimed_task_of_a_retired_owner_is_cancelled_never_delivered(ddb_local_endpoint, ddb_local_table):
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    user = str(uuid.uuid4())
    key = ctx.user_key(user)
    ctx.subscriptions.put_push_subscription(
        user, encrypt_for_storage(compact_json({"endpoint": "https://push.invalid/x", "keys": {}}), key), 1
    )
    owned: dict[str, str] = {}
    for ref in (ALICE, BOB):
        claim = OwnerClaim(ref=ref, generation=0, meta=encrypt_for_storage("{}", key))
        for i in range(4):
            task_uuid = str(uuid.uuid4())
            payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": f"一{i}。二{i}。"}
            ctx.tasks.create_task(
                NewTask(user, task_uuid, encrypt_for_storage(compact_json(payload), key), "fixed",
                        T0_MS + 60_000, T0_MS, owner=claim)
            )  # fmt: skip
            owned[task_uuid] = ref
    ctx.clock.current_ms = T0_MS + 61_000
    assert run_tick(ctx)["enqueuedTasks"] == 8  # claimed while both owners were active

    ctx.owners.set_active(user, ALICE, "character", "alice", active=False, expected=0, now_ms=ctx.now_ms())
    results = []
    while not queue.items.empty():
        message = parse_task_message(json.dumps(queue.items.get_nowait()))
        results.append(run_message(ctx, message, remaining_ms=lambda: 100_000, owner="consumer"))

    pushed = {p["taskUuid"] for p in sender.sent}
    assert pushed == {u for u, ref in owned.items() if ref == BOB}  # Alice's: nothing at all
    assert len(sender.sent) == 8  # two segments for each of Bob's four tasks
    cancelled = [c for r in results for c in r["details"].get("cancelledTasks", [])]
    assert len(cancelled) == 4 and {c["status"] for c in cancelled} == {"owner_retired"}, results
    for task_uuid, ref in owned.items():
        row = ctx.tasks.get_task(user, task_uuid)
        if ref == BOB:
            assert row is None  # delivered one-shots are deleted
            continue
        assert row.status == "failed" and "CLOUD_OWNER_RETIRED" in (row.last_error or "")
        item = ctx.cloud_data.db.get({"PK": f"U#{user}", "SK": f"T#{task_uuid}"})
        assert "due_pk" not in item  # out of the due index
    assert all(r.task_uuid in pushed for r in ctx.outbox.list_unacked(user, 0, 100, ctx.now_ms()))
    # never again: not after every lease has run out, not after a restore (its guard names the old generation)
    ctx.owners.set_active(user, ALICE, "character", "alice", active=True, expected=1, now_ms=ctx.now_ms())
    ctx.clock.advance(24 * 3_600_000)
    assert run_tick(ctx)["claimedTasks"] == 0
    assert len(sender.sent) == 8
