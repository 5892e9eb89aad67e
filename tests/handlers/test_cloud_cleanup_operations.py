"""Cleanup operations as resumable background work, through the real handler and the real tick (moto).

The request runs the first step (at most 25 resources) and answers the operation as it stands; the tick
finishes it. A failing step backs off ``min(1 h, 30 s × 2^attempts)`` and the operation fails for good after
8 attempts. Plans, snapshots and finished operations expire (TTL) and read as absent once expired.
"""

from __future__ import annotations

import pytest
from amsg.engine import cleanup
from amsg.engine.tick import run_tick

from tests.conftest import T0_MS
from tests.handlers.test_cloud_data import ALICE, BOB, err, get, post

TYPES = ("task", "state", "credential", "outbox", "subscription")


def seed_many(api, n_state: int = 30, n_creds: int = 30) -> None:
    """Alice owns ``n_state`` state entries and ``n_creds`` credentials; Bob owns one of each."""
    state = [
        {"namespace": "char", "key": f"a{i}", "value": "v", "updatedAt": T0_MS - 1, "owner": ALICE}
        for i in range(n_state)
    ]
    state.append({"namespace": "char", "key": "b", "value": "v", "updatedAt": T0_MS - 1, "owner": BOB})
    assert api.put_client_state(state).status == 200
    value = {"apiUrl": "https://llm.example/v1", "apiKey": "sk-secret-key", "primaryModel": "m"}
    creds = [{"credId": f"alice/c{i}", "value": value, "owner": ALICE} for i in range(n_creds)]
    creds.append({"credId": "bob/c", "value": value, "owner": BOB})
    assert api.put_credentials(creds).status == 200


def counts(op) -> dict[str, tuple[int, int, int]]:
    return {c["type"]: (c["deleted"], c["remaining"], c["failed"]) for c in op["counts"]}


def owned(api, owner) -> int:
    page = get(api, f"resources?ownerType={owner['type']}&ownerId={owner['id']}&limit=200").data
    return len(page["resources"])


def stored_op(ctx, api, op_id: str):
    return cleanup.load(ctx, api.user_id, ctx.codec(api.user_id), op_id)


def test_a_large_retirement_answers_after_one_step_and_the_tick_finishes_it(api, ctx):
    seed_many(api)
    plan = post(api, "cleanup-plans", {"mode": "retire-owner", "owner": ALICE}).data
    assert plan["count"] == 60
    resp = post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "big"})
    assert resp.status == 200, resp.text
    op = resp.data
    # retired at once, 25 deleted (credentials first by id order is not promised: only the totals are)
    assert op["status"] == "pending" and op["fencedGeneration"] == 1
    assert sum(c["deleted"] for c in op["counts"]) == 25
    assert sum(c["remaining"] for c in op["counts"]) == 35
    assert get(api, "owner?ownerType=character&ownerId=alice").data["retired"] is True
    assert owned(api, ALICE) == 35
    # the plan is consumed: another key for it finds nothing
    err(post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "other"}), 404,
        "CLOUD_RECORD_NOT_FOUND")  # fmt: skip
    # restoring is refused while the retirement is still running
    err(post(api, "owner", {"action": "restore", "owner": ALICE}), 409, "CLOUD_CLEANUP_IN_PROGRESS")

    first = run_tick(ctx)
    assert first["details"]["housekeeping"]["cleanupOperationsAdvanced"] == 1
    op = get(api, f"cleanup-operations/{op['id']}").data
    assert op["status"] == "pending" and sum(c["deleted"] for c in op["counts"]) == 50
    run_tick(ctx)
    op = get(api, f"cleanup-operations/{op['id']}").data
    assert op["status"] == "completed"
    assert counts(op) == {
        "task": (0, 0, 0), "state": (30, 0, 0), "credential": (30, 0, 0), "outbox": (0, 0, 0),
        "subscription": (0, 0, 0),
    }  # fmt: skip
    assert owned(api, ALICE) == 0 and owned(api, BOB) == 2
    # the same key again: the same finished operation, nothing more happens
    again = post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "big"}).data
    assert again == op
    assert run_tick(ctx)["details"]["housekeeping"]["cleanupOperationsAdvanced"] == 0


def test_a_purge_walks_its_preview_25_per_step(api, ctx):
    seed_many(api, n_state=40, n_creds=0)
    plan = post(api, "cleanup-plans", {"mode": "purge", "owner": ALICE}).data
    op = post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "p"}).data
    assert op["status"] == "pending" and counts(op)["state"] == (25, 15, 0)
    run_tick(ctx)
    op = get(api, f"cleanup-operations/{op['id']}").data
    assert op["status"] == "completed" and counts(op)["state"] == (40, 0, 0)
    assert owned(api, ALICE) == 0 and owned(api, BOB) == 2
    assert get(api, "owner?ownerType=character&ownerId=alice").data["retired"] is False


def test_failing_steps_back_off_and_fail_for_good_after_8_attempts(api, ctx, monkeypatch):
    seed_many(api, n_state=3, n_creds=0)
    plan = post(api, "cleanup-plans", {"mode": "retire-owner", "owner": ALICE}).data
    real = ctx.cloud_data.list_resources

    def broken(user_id):
        raise RuntimeError("storage down")

    monkeypatch.setattr(ctx.cloud_data, "list_resources", broken)
    resp = post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "b"})
    assert resp.status == 200, resp.text  # the retirement itself committed: confirmed, cleanup pending
    op = resp.data
    assert op["status"] == "pending" and op["fencedGeneration"] == 1
    assert op["errors"] == [{"code": "CLOUD_CLEANUP_FAILED", "message": cleanup.RETRY_MESSAGE}]
    assert "attempts" not in op and "nextAttemptAt" not in op and "entries" not in op
    delays = []
    for attempt in range(1, 8):
        stored = stored_op(ctx, api, op["id"])
        assert stored["attempts"] == attempt and stored["status"] == "pending"
        delays.append(stored["nextAttemptAt"] - ctx.now_ms())
        # not due yet: the tick leaves it alone
        ctx.clock.advance(delays[-1] - 1)
        assert run_tick(ctx)["details"]["housekeeping"]["cleanupOperationsAdvanced"] == 0
        assert stored_op(ctx, api, op["id"])["attempts"] == attempt
        ctx.clock.advance(1)
        assert run_tick(ctx)["details"]["housekeeping"]["cleanupOperationsAdvanced"] == 1
    assert delays == [60_000, 120_000, 240_000, 480_000, 960_000, 1_920_000, 3_600_000]
    op = get(api, f"cleanup-operations/{op['id']}").data
    assert op["status"] == "failed"
    assert op["errors"][0]["code"] == "CLOUD_CLEANUP_FAILED"
    assert counts(op)["state"] == (0, 3, 3)  # what was left is reported as failed
    # finished: never resumed again, and the owner can now be restored
    ctx.clock.advance(10 * 3_600_000)
    monkeypatch.setattr(ctx.cloud_data, "list_resources", real)
    assert run_tick(ctx)["details"]["housekeeping"]["cleanupOperationsAdvanced"] == 0
    assert post(api, "owner", {"action": "restore", "owner": ALICE}).data["generation"] == 2


def test_a_tick_whose_cleanup_breaks_still_delivers(engine, monkeypatch):
    """Cleanup resumption is isolated: an exception there never touches claiming and enqueueing."""
    api, ctx = engine.api, engine.ctx
    resp = api.schedule(
        {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": "2029-12-31T00:01:00Z"}
    )
    assert resp.status == 201, resp.text

    def broken(*args, **kwargs):
        raise RuntimeError("index unavailable")

    monkeypatch.setattr(ctx.cloud_data, "due_records", broken)
    ctx.clock.advance(120_000)
    summary = engine.harness.tick()  # the deployed tick handler
    assert summary["details"]["housekeeping"]["cleanupError"] == "RuntimeError"
    assert summary["claimedTasks"] == 1 and summary["enqueuedTasks"] == 1, summary
    engine.harness.drain()
    assert [p["message"] for p in engine.push.payloads()] == ["hi"]


def test_expired_plans_snapshots_and_finished_operations_read_as_absent(api, ctx):
    """The table's TTL removes them eventually; until it does, readers treat them as gone."""
    seed_many(api, n_state=2, n_creds=0)
    stale_plan = post(api, "cleanup-plans", {"mode": "purge", "owner": BOB}).data
    page = get(api, "resources?limit=1").data
    plan = post(api, "cleanup-plans", {"mode": "purge", "owner": BOB}).data
    op = post(api, "cleanup-operations", {"planId": plan["id"], "idempotencyKey": "t"}).data
    assert op["status"] == "completed"
    ctx.clock.advance(3_600_000 + 1_000)  # plans and snapshots live an hour
    err(post(api, "cleanup-operations", {"planId": stale_plan["id"], "idempotencyKey": "late"}), 404,
        "CLOUD_RECORD_NOT_FOUND")  # fmt: skip
    err(get(api, f"resources?limit=1&cursor={page['nextCursor']}"), 404, "CLOUD_RECORD_NOT_FOUND")
    assert [o["id"] for o in get(api, "cleanup-operations").data["operations"]] == [op["id"]]
    ctx.clock.advance(30 * 86_400_000)  # finished operations live 30 days, their idempotency keys too
    err(get(api, f"cleanup-operations/{op['id']}"), 404, "CLOUD_RECORD_NOT_FOUND")
    assert get(api, "cleanup-operations").data["operations"] == []
    fresh = post(api, "cleanup-plans", {"mode": "purge", "owner": ALICE}).data
    assert post(api, "cleanup-operations", {"planId": fresh["id"], "idempotencyKey": "t"}).status == 200


@pytest.mark.parametrize("attempts,delay", [(1, 60_000), (2, 120_000), (6, 1_920_000), (7, 3_600_000), (20, 3_600_000)])
def test_backoff_schedule(attempts, delay):
    assert cleanup.backoff_ms(attempts) == delay
