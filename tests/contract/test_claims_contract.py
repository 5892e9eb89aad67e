"""ClaimStore (the delivery side of tasks) and the fenced outbox send claim on every backend (see conftest):
what the tick and run_task rely on (docs/delivery.md), including the refusals: a lost claim, a stale claim
version, a lease taken over or expired."""

from __future__ import annotations

import pytest
from amsg.failures import ClaimTaken
from amsg.ports import APPEND_FALLBACK, ClaimWanted, NewTask, OutboxAppend, Settlement, TaskRow

USER = "u-claims"
T1 = 1_893_456_000_000  # 2030-01-01T00:00:00.000Z
DUE = T1 + 60_000
NOW = DUE + 1_000  # the tick runs after the occurrence
LEASE = NOW + 30_000  # the tick's claim lease
RUN_LEASE = NOW + 120_000  # run_task's lease after adopting


def uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def create(stores, n: int, *, due: int = DUE) -> str:
    stores.tasks.create_task(
        NewTask(user_id=USER, uuid=uid(n), encrypted_payload="p", message_type="fixed", next_send_at_ms=due, now_ms=T1)
    )
    return uid(n)


def claim(stores, uuid: str, *, now: int = NOW, lease: int = LEASE, owner: str = "tick", due: int = DUE, group=None):
    return stores.claims.claim(
        USER, uuid, expected_next_send_at_ms=due, now_ms=now, lease_until_ms=lease, owner=owner, group=group
    )


def due_uuids(stores, now: int = NOW, limit: int = 50) -> list[str]:
    candidates, _ = stores.claims.due_candidates(0, now, limit)
    return [c.uuid for c in candidates]


def push(message_id: str, uuid: str) -> OutboxAppend:
    return OutboxAppend(message_id=message_id, encrypted_push="enc", created_at=NOW, task_uuid=uuid)


# ---- the due index and the tick's claims -------------------------------------------------------------------


def test_due_candidates_are_the_due_tasks_earliest_first_in_pages(stores):
    late, early, future = create(stores, 1, due=DUE), create(stores, 2, due=DUE - 5_000), create(stores, 3, due=NOW + 1)
    assert due_uuids(stores) == [early, late]
    first, token = stores.claims.due_candidates(0, NOW, 1)
    assert [c.uuid for c in first] == [early] and token is not None
    assert first[0].next_send_at_ms == DUE - 5_000 and first[0].retry_count == 0
    rest, _ = stores.claims.due_candidates(0, NOW, 10, token)
    assert [c.uuid for c in rest] == [late]
    assert future in due_uuids(stores, now=NOW + 1)


def test_a_due_page_token_survives_a_claim_job_and_only_its_store_reads_it(stores):
    """A claim job carries the token's JSON form to the claimer in a queue message: parsed back, it continues the
    same page. A token of another kind (another store's) is refused, not read as the start."""
    from amsg.engine.claim_jobs import ClaimJob, parse_claim_job
    from amsg.jsonio import dumps
    from amsg.ports import DuePageToken

    early, late = create(stores, 1, due=DUE - 5_000), create(stores, 2)
    first, token = stores.claims.due_candidates(0, NOW, 1)
    assert [c.uuid for c in first] == [early] and token is not None
    job = parse_claim_job(dumps(ClaimJob(0, None, token).to_body()))
    assert job is not None and job.start == token
    rest, _ = stores.claims.due_candidates(0, NOW, 10, job.start)
    assert [c.uuid for c in rest] == [late]
    foreign = DuePageToken({"k": "v"}) if isinstance(token.wire, str) else DuePageToken("a due key")
    with pytest.raises(ValueError):
        stores.claims.due_candidates(0, NOW, 10, foreign)
    for empty in (DuePageToken(""), DuePageToken({})):  # a job may carry an empty token: the start of the index
        assert [c.uuid for c in stores.claims.due_candidates(0, NOW, 10, empty)[0]] == [early, late]


def test_claim_many_takes_up_to_the_stores_batch_size(stores):
    """The transaction size is the store's own (``claim_batch``): the engine never sends more in one call."""
    wanted = [ClaimWanted(USER, create(stores, n), DUE) for n in range(stores.claims.claim_batch + 1)]
    with pytest.raises(ValueError):
        stores.claims.claim_many(wanted, now_ms=NOW, lease_until_ms=LEASE, owner="tick")
    claimed = stores.claims.claim_many(wanted[:-1], now_ms=NOW, lease_until_ms=LEASE, owner="tick")
    assert [row.uuid if isinstance(row, TaskRow) else row for row in claimed] == [w.uuid for w in wanted[:-1]]


def test_a_claim_is_taken_once_and_bumps_the_claim_version(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None and row.claim_version == 1 and row.lease_until_ms == LEASE
    assert claim(stores, uuid, owner="other tick") is None  # the lease holds
    assert due_uuids(stores) == []  # a claimed task leaves the due window while its lease holds
    assert due_uuids(stores, now=LEASE) == [uuid]  # and comes back when it expires (its worker died)
    again = claim(stores, uuid, now=LEASE, lease=LEASE + 30_000)
    assert again is not None and again.claim_version == 2


def test_a_claim_needs_the_occurrence_read_and_a_due_retry(stores):
    uuid = create(stores, 1)
    assert claim(stores, uuid, due=DUE + 1) is None  # the task moved since the tick read the index
    row = claim(stores, uuid)
    assert row is not None
    retry = Settlement(next_send_at_ms=DUE, retry_after_ms=NOW + 10_000, retry_count=1)
    assert stores.claims.settle(USER, uuid, row.claim_version, retry, NOW)
    assert claim(stores, uuid, now=NOW + 5_000) is None  # backing off
    assert due_uuids(stores, now=NOW + 5_000) == []
    assert due_uuids(stores, now=NOW + 10_000) == [uuid]
    assert claim(stores, uuid, now=NOW + 10_000, lease=NOW + 40_000) is not None


def test_claim_many_claims_each_and_leaves_out_one_claimed_already(stores):
    uuids = [create(stores, n) for n in range(1, 5)]
    assert claim(stores, uuids[2], owner="other tick") is not None
    wanted = [ClaimWanted(USER, u, DUE) for u in uuids]
    results = stores.claims.claim_many(wanted, now_ms=NOW, lease_until_ms=LEASE, owner="tick")
    assert results[2] is None
    claimed = [results[i] for i in (0, 1, 3)]
    assert [r.uuid for r in claimed] == [uuids[0], uuids[1], uuids[3]]  # type: ignore[union-attr]
    assert all(r.claim_version == 1 and r.lease_until_ms == LEASE for r in claimed)  # type: ignore[union-attr]


def test_claim_many_together_answers_per_part_in_order(stores):
    uuids = [create(stores, n) for n in range(1, 5)]
    assert claim(stores, uuids[3], owner="other tick") is not None
    parts = [
        (stores.claims, [ClaimWanted(USER, u, DUE) for u in uuids[:2]]),
        (stores.claims, [ClaimWanted(USER, u, DUE) for u in uuids[2:]]),
    ]
    first, second = stores.claims.claim_many_together(parts, now_ms=NOW, lease_until_ms=LEASE, owner="tick")
    assert [r.uuid for r in first] == uuids[:2]  # type: ignore[union-attr]
    assert second[0].uuid == uuids[2] and second[1] is None  # type: ignore[union-attr]
    assert stores.claims.pending_counts([stores.claims]) == [None]  # counts are kept in a tenant's space only


def test_one_task_of_a_serialize_group_is_in_flight_at_a_time(stores):
    first, second = create(stores, 1), create(stores, 2)
    assert claim(stores, first, group="g") is not None
    assert claim(stores, second, group="g") is None  # the group's holder is leased
    assert claim(stores, second, group="other") is not None  # another group is independent
    third = create(stores, 3)
    assert claim(stores, third, group="g", now=LEASE, lease=LEASE + 30_000) is not None  # the holder's lease ended


# ---- run_task: adoption, the run's read, the fenced append ------------------------------------------------


def test_adoption_takes_the_current_claim_once(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    adopted = stores.claims.adopt_claim(USER, uuid, row.claim_version, DUE, RUN_LEASE, "run-a", NOW)
    assert adopted is not None and adopted.lease_until_ms == RUN_LEASE
    again = stores.claims.adopt_claim(USER, uuid, row.claim_version, DUE, RUN_LEASE, "run-a", NOW)
    assert again is not None  # the same run again: idempotent
    with pytest.raises(ClaimTaken):  # a second delivery of the message while the first run holds it
        stores.claims.adopt_claim(USER, uuid, row.claim_version, DUE, RUN_LEASE, "run-b", NOW)
    assert stores.claims.adopt_claim(USER, uuid, row.claim_version - 1, DUE, RUN_LEASE, "run-b", NOW) is None
    # the adopter died: once its lease has expired another run may adopt
    late = stores.claims.adopt_claim(USER, uuid, row.claim_version, DUE, RUN_LEASE + 60_000, "run-b", RUN_LEASE + 1)
    assert late is not None


def test_open_run_reads_the_task_only_under_its_current_claim(stores):
    uuid = create(stores, 1)
    stores.subscriptions.put_push_subscription(USER, "sub", T1)
    assert stores.claims.open_run(USER, uuid, 0, DUE) is None  # never claimed
    row = claim(stores, uuid)
    assert row is not None
    snapshot = stores.claims.open_run(USER, uuid, row.claim_version, DUE)
    assert snapshot is not None and snapshot.row.uuid == uuid and snapshot.outbox_seq == 0
    assert snapshot.subscription is not None and snapshot.subscription.encrypted_subscription == "sub"
    assert stores.claims.open_run(USER, uuid, row.claim_version + 1, DUE) is None
    assert stores.claims.open_run(USER, uuid, row.claim_version, DUE + 1) is None


def test_the_batch_append_is_fenced_by_the_claim_and_adopts_it(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    rows = [push("m1", uuid), push("m2", uuid)]
    ids = stores.claims.append_batch(row, rows, now_ms=NOW, lease_until_ms=RUN_LEASE, owner="run-a", claim_first="m1")
    assert ids == [1, 2] and row.outbox_occurrence_ms == DUE
    stored = stores.outbox.list_for_task(USER, uuid)
    assert [(r.id, r.message_id, r.sending_at is not None) for r in stored] == [(1, "m1", True), (2, "m2", False)]
    assert stores.tasks.get_task(USER, uuid).outbox_occurrence_ms == DUE  # type: ignore[union-attr]
    with pytest.raises(ClaimTaken):  # another run may not append under the claim run-a adopted
        stores.claims.append_batch(row, [push("m3", uuid)], now_ms=NOW, lease_until_ms=RUN_LEASE, owner="run-b")
    # rows of these ids exist already: the caller takes the outbox's general append
    assert stores.claims.append_batch(row, rows, now_ms=NOW, lease_until_ms=None, owner="run-a") is APPEND_FALLBACK


def test_the_append_keeps_a_claim_lease_that_outlasts_the_run_lease_and_still_fences_a_second_run(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid, lease=RUN_LEASE + 60_000)  # the tick's lease ends after the run lease would
    assert row is not None
    assert stores.claims.append_batch(row, [push("m1", uuid)], now_ms=NOW, lease_until_ms=RUN_LEASE, owner="a") == [1]
    assert row.lease_until_ms == RUN_LEASE + 60_000
    assert stores.tasks.get_task(USER, uuid).lease_until_ms == RUN_LEASE + 60_000  # type: ignore[union-attr]
    with pytest.raises(ClaimTaken):  # adopted by run a, whose lease holds
        stores.claims.append_batch(row, [push("m2", uuid)], now_ms=NOW, lease_until_ms=RUN_LEASE, owner="b")
    # the heartbeat moves it as before, fenced by the claim version
    assert stores.claims.renew_lease(USER, uuid, row.claim_version, RUN_LEASE, "a")
    assert stores.tasks.get_task(USER, uuid).lease_until_ms == RUN_LEASE  # type: ignore[union-attr]
    assert not stores.claims.renew_lease(USER, uuid, row.claim_version + 1, RUN_LEASE, "a")


def test_the_batch_append_of_a_lost_claim_writes_nothing(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    assert claim(stores, uuid, now=LEASE, lease=LEASE + 30_000) is not None  # the lease expired, a new claim
    assert stores.claims.append_batch(row, [push("m1", uuid)], now_ms=LEASE, lease_until_ms=None, owner="t") is None
    assert (
        stores.claims.append_batch(row, [push("m1", uuid)], now_ms=LEASE, lease_until_ms=RUN_LEASE, owner="t") is None
    )
    assert stores.outbox.list_for_task(USER, uuid) == []


def test_a_send_claim_is_fenced_by_the_task_claim_and_taken_once(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    stores.outbox.append(USER, [push("m1", uuid), push("m2", uuid)])
    kw = {"task_uuid": uuid, "now_ms": NOW}
    assert not stores.outbox.claim_send(USER, "m1", claim_version=row.claim_version + 1, **kw)  # stale version
    assert stores.outbox.claim_send(USER, "m1", claim_version=row.claim_version, **kw)
    assert not stores.outbox.claim_send(USER, "m1", claim_version=row.claim_version, **kw)  # taken already
    stores.outbox.release_send(USER, "m1")  # a failed push: a retry may send it again
    assert stores.outbox.claim_send(USER, "m1", claim_version=row.claim_version, **kw)
    assert not stores.outbox.claim_send(USER, "missing", claim_version=row.claim_version, **kw)
    # the lease expired: a run that lost its lease sends nothing, and marks the previous row delivered anyway
    late = {"task_uuid": uuid, "now_ms": LEASE}
    assert not stores.outbox.claim_send(USER, "m2", claim_version=row.claim_version, delivered="m1", **late)
    delivered = {r.message_id: r.delivered_at for r in stores.outbox.list_for_task(USER, uuid)}
    assert delivered == {"m1": LEASE, "m2": None}


def test_a_lease_is_renewed_only_under_the_current_claim(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    assert stores.claims.renew_lease(USER, uuid, row.claim_version, LEASE + 60_000, "tick")
    assert stores.tasks.get_task(USER, uuid).lease_until_ms == LEASE + 60_000  # type: ignore[union-attr]
    assert not stores.claims.renew_lease(USER, uuid, row.claim_version + 1, LEASE + 90_000, "tick")
    done = Settlement(next_send_at_ms=DUE, status="sent")
    assert stores.claims.settle(USER, uuid, row.claim_version, done, NOW)
    assert not stores.claims.renew_lease(USER, uuid, row.claim_version, LEASE + 90_000, "tick")


# ---- settlements --------------------------------------------------------------------------------------------


def test_a_settlement_applies_only_under_its_claim_and_releases_the_lease(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    nxt = DUE + 86_400_000
    stale = Settlement(next_send_at_ms=nxt, retry_count=0)
    assert not stores.claims.settle(USER, uuid, row.claim_version + 1, stale, NOW)
    moved = Settlement(next_send_at_ms=nxt, retry_count=0, last_error='{"e":1}')
    assert stores.claims.settle(USER, uuid, row.claim_version, moved, NOW + 5)
    task = stores.tasks.get_task(USER, uuid)
    assert task is not None
    assert (task.status, task.next_send_at_ms, task.lease_until_ms, task.last_error) == (
        "pending",
        nxt,
        None,
        '{"e":1}',
    )
    assert task.updated_at_ms == NOW + 5
    assert due_uuids(stores, now=nxt) == [uuid] and due_uuids(stores, now=nxt - 1) == []


def test_a_policy_deferral_is_kept_until_a_later_settlement_drops_it(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    deferred = Settlement(next_send_at_ms=DUE, retry_after_ms=NOW + 60_000, policy_deferred=True)
    assert stores.claims.settle(USER, uuid, row.claim_version, deferred, NOW)
    task = stores.tasks.get_task(USER, uuid)
    assert task is not None and (task.retry_after_ms, task.deferred_until_ms) == (NOW + 60_000, NOW + 60_000)
    again = claim(stores, uuid, now=NOW + 60_000, lease=NOW + 90_000)
    assert again is not None
    kept = Settlement(next_send_at_ms=DUE, retry_after_ms=NOW + 70_000, keep_deferral=True)
    assert stores.claims.settle(USER, uuid, again.claim_version, kept, NOW + 60_000)
    assert stores.tasks.get_task(USER, uuid).deferred_until_ms == NOW + 60_000  # type: ignore[union-attr]


def test_a_final_settlement_ends_the_task_and_a_delete_removes_it(stores):
    sent, gone = create(stores, 1), create(stores, 2)
    first, second = claim(stores, sent), claim(stores, gone)
    assert first is not None and second is not None
    stores.outbox.append(USER, [push("m1", gone)])
    assert stores.claims.settle(USER, sent, first.claim_version, Settlement(next_send_at_ms=DUE, status="sent"), NOW)
    task = stores.tasks.get_task(USER, sent)
    assert task is not None and task.status == "sent" and task.lease_until_ms is None
    assert due_uuids(stores, now=LEASE + 1) == [gone]  # a sent task leaves the due index for good
    one_shot = Settlement(
        next_send_at_ms=DUE, delete=True, delivered=("m1",), delivered_at_ms=NOW, payload_rev=1, task_id=second.id
    )
    assert stores.claims.settle(USER, gone, second.claim_version, one_shot, NOW)
    assert stores.tasks.get_task(USER, gone) is None and stores.tasks.find_task(gone) is None
    assert [r.delivered_at for r in stores.outbox.list_for_task(USER, gone)] == [NOW]


def test_a_delivered_one_shot_whose_task_is_gone_counts_as_settled(stores):
    """Its pushes left: a cancel that came after them (or this delete's own attempt whose answer was lost) does
    not turn the delivery into a failure; a task taken over by a newer claim still refuses the settlement."""
    gone, taken = create(stores, 1), create(stores, 2)
    first, second = claim(stores, gone), claim(stores, taken)
    assert first is not None and second is not None
    stores.outbox.append(USER, [push("m1", gone), push("m2", taken)])
    assert stores.tasks.delete_task(USER, gone)
    one_shot = Settlement(
        next_send_at_ms=DUE, delete=True, delivered=("m1",), delivered_at_ms=NOW, payload_rev=1, task_id=first.id
    )
    assert stores.claims.settle(USER, gone, first.claim_version, one_shot, NOW)
    assert stores.tasks.find_task(gone) is None
    undelivered = Settlement(next_send_at_ms=DUE, delete=True, payload_rev=1, task_id=first.id)
    assert not stores.claims.settle(USER, gone, first.claim_version, undelivered, NOW)  # nothing pushed: refused
    stale = Settlement(
        next_send_at_ms=DUE, delete=True, delivered=("m2",), delivered_at_ms=NOW, payload_rev=1, task_id=second.id
    )
    assert not stores.claims.settle(USER, taken, second.claim_version + 1, stale, NOW)
    assert stores.tasks.get_task(USER, taken) is not None


def test_a_stale_settlement_still_marks_its_pushes_delivered(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    stores.outbox.append(USER, [push("m1", uuid)])
    lost = Settlement(next_send_at_ms=DUE, delete=True, delivered=("m1",), delivered_at_ms=NOW, payload_rev=1)
    assert not stores.claims.settle(USER, uuid, row.claim_version + 1, lost, NOW)
    assert stores.tasks.get_task(USER, uuid) is not None
    assert [r.delivered_at for r in stores.outbox.list_for_task(USER, uuid)] == [NOW]


def test_housekeeping_deletes_settled_tasks_not_updated_since_the_cutoff(stores):
    old, recent, pending = create(stores, 1), create(stores, 2), create(stores, 3)
    for uuid, at in ((old, NOW), (recent, NOW + 10_000)):
        row = claim(stores, uuid)
        assert row is not None
        assert stores.claims.settle(USER, uuid, row.claim_version, Settlement(next_send_at_ms=DUE, status="sent"), at)
    assert stores.claims.delete_settled_before(NOW + 5_000, shards=1, limit=10) == 1
    assert stores.tasks.get_task(USER, old) is None
    assert stores.tasks.get_task(USER, recent) is not None and stores.tasks.get_task(USER, pending) is not None


# ---- frequency caps, charged by the send claim ---------------------------------------------------------------


def test_a_send_claim_charges_the_caps_and_a_full_window_refuses_it(stores):
    from amsg.ports import CapCharge, CapReached

    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    stores.outbox.append(USER, [push("m1", uuid), push("m2", uuid), push("m3", uuid)])
    window_end = NOW + 3_600_000

    def cap(occurrence: str) -> CapCharge:
        return CapCharge(counter="hour#1", max=2, window_end_ms=window_end, occurrence=occurrence)

    kw = {"task_uuid": uuid, "claim_version": row.claim_version, "now_ms": NOW}
    assert stores.policies.cap_room(USER, [cap("a")]) is None
    assert stores.outbox.claim_send(USER, "m1", caps=[cap("a")], **kw)
    assert stores.outbox.claim_send(USER, "m2", caps=[cap("b")], **kw)
    assert stores.policies.cap_room(USER, [cap("c")]) == window_end  # full
    assert stores.policies.cap_room(USER, [cap("a")]) is None  # an occurrence counted already fits again
    with pytest.raises(CapReached) as reached:
        stores.outbox.claim_send(USER, "m3", caps=[cap("c")], **kw)
    assert reached.value.until_ms == window_end
    assert stores.outbox.claim_send(USER, "m3", caps=[cap("a")], **kw)  # nothing was written by the refusal
    # a lost claim is refused as such, even with a full cap
    stores.outbox.release_send(USER, "m3")
    assert not stores.outbox.claim_send(USER, "m3", caps=[cap("d")], **{**kw, "claim_version": 9})


# ---- exactly once under faults (docs/delivery.md) -----------------------------------------------------------------


def test_an_unconfirmed_row_keeps_its_send_claim_and_a_release_is_the_claims_own(stores):
    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    stores.outbox.append(USER, [push("m1", uuid), push("m2", uuid), push("m3", uuid)])
    kw = {"task_uuid": uuid, "claim_version": row.claim_version, "now_ms": NOW}
    assert not stores.outbox.mark_unconfirmed(USER, "m1", NOW)  # not taken for sending: nothing to mark
    assert stores.outbox.claim_send(USER, "m1", **kw) and stores.outbox.claim_send(USER, "m2", **kw)
    assert stores.outbox.mark_unconfirmed(USER, "m1", NOW + 1)
    stores.outbox.release_send(USER, "m1", claim_version=row.claim_version)  # never released once unconfirmed
    stores.outbox.release_send(USER, "m2", claim_version=row.claim_version + 1)  # not that claim's send claim
    rows = {r.message_id: r for r in stores.outbox.list_for_task(USER, uuid)}
    assert (rows["m1"].sending_at, rows["m1"].sending_cv, rows["m1"].unconfirmed_at) == (
        NOW,
        row.claim_version,
        NOW + 1,
    )
    assert rows["m2"].sending_at == NOW
    assert not stores.outbox.claim_send(USER, "m1", **kw)  # nobody pushes it again
    stores.outbox.release_send(USER, "m2", claim_version=row.claim_version)  # its own: handed back
    assert stores.outbox.claim_send(USER, "m2", **kw)
    stores.outbox.mark_delivered(USER, ["m2"], NOW + 2)
    assert not stores.outbox.mark_unconfirmed(USER, "m2", NOW + 3)  # a delivered row is not unconfirmed
    # the API's discard (the user cancelled the task) takes every row nobody received, claimed or not
    assert stores.outbox.discard_undelivered_for_task(USER, uuid) == 2
    assert [r.message_id for r in stores.outbox.list_for_task(USER, uuid)] == ["m2"]


def test_a_run_discards_its_rows_only_while_its_claim_is_the_tasks_and_it_ended_it(stores):
    uuid = create(stores, 1)
    old = claim(stores, uuid)
    assert old is not None
    stores.outbox.append(USER, [push("m1", uuid), push("m2", uuid)])
    # the lease expired and the tick claimed the task again: the old claim's discard touches nothing
    new = claim(stores, uuid, now=LEASE, lease=LEASE + 30_000)
    assert new is not None and new.claim_version == old.claim_version + 1
    assert stores.outbox.discard_undelivered_for_task(USER, uuid, claim_version=old.claim_version) == 0
    # the current claim, task still pending (to be worked again): nothing either
    assert stores.outbox.discard_undelivered_for_task(USER, uuid, claim_version=new.claim_version) == 0
    assert [r.message_id for r in stores.outbox.list_for_task(USER, uuid)] == ["m1", "m2"]
    # the run that holds the claim ended the task: its untaken rows go
    assert stores.outbox.claim_send(USER, "m1", task_uuid=uuid, claim_version=new.claim_version, now_ms=LEASE)
    done = Settlement(next_send_at_ms=DUE, status="failed")
    assert stores.claims.settle(USER, uuid, new.claim_version, done, LEASE)
    assert stores.outbox.discard_undelivered_for_task(USER, uuid, claim_version=old.claim_version) == 0
    assert stores.outbox.discard_undelivered_for_task(USER, uuid, claim_version=new.claim_version) == 1
    assert [r.message_id for r in stores.outbox.list_for_task(USER, uuid)] == ["m1"]


def test_a_gone_subscription_is_marked_only_if_unchanged_and_a_new_put_clears_it(stores):
    subscriptions = stores.subscriptions
    assert not subscriptions.mark_push_subscription_gone(USER, "enc-1", NOW)  # none stored
    subscriptions.put_push_subscription(USER, "enc-1", NOW)
    assert not subscriptions.get_push_subscription(USER).gone
    assert not subscriptions.mark_push_subscription_gone(USER, "enc-other", NOW)  # replaced meanwhile: kept
    assert not subscriptions.get_push_subscription(USER).gone
    assert subscriptions.mark_push_subscription_gone(USER, "enc-1", NOW)
    assert subscriptions.get_push_subscription(USER).gone
    subscriptions.put_push_subscription(USER, "enc-2", NOW + 1)  # the client subscribed again
    assert not subscriptions.get_push_subscription(USER).gone


def test_a_runs_append_commits_only_under_its_claim_and_never_re_arms_the_new_claims_rows(stores):
    from amsg.errors import ClaimLost
    from amsg.ports import ClaimFence

    uuid = create(stores, 1)
    old = claim(stores, uuid)
    assert old is not None
    assert stores.outbox.append(USER, [push("m1", uuid)], fence=ClaimFence(uuid, old.claim_version, NOW)) == [1]
    new = claim(stores, uuid, now=LEASE, lease=LEASE + 30_000)  # the old lease expired: claimed again
    assert new is not None
    assert stores.outbox.claim_send(USER, "m1", task_uuid=uuid, claim_version=new.claim_version, now_ms=LEASE)
    with pytest.raises(ClaimLost):  # the superseded run's upsert would clear the new claim's send claim
        stores.outbox.append(
            USER, [push("m1", uuid), push("m2", uuid)], fence=ClaimFence(uuid, old.claim_version, LEASE)
        )
    rows = stores.outbox.list_for_task(USER, uuid)
    assert [(r.message_id, r.sending_at) for r in rows] == [("m1", LEASE)]
    fence = ClaimFence(uuid, new.claim_version, LEASE)
    assert stores.outbox.append(USER, [push("m2", uuid)], fence=fence) == [2]
    with pytest.raises(ClaimLost):  # an expired lease fences too
        stores.outbox.append(USER, [push("m3", uuid)], fence=ClaimFence(uuid, new.claim_version, LEASE + 30_000))


def test_a_fenced_append_of_a_large_batch_fits_its_transactions(stores):
    """The claim check is one more action: a batch of 100 rows still commits (in transactions of at most 100)."""
    from amsg.ports import ClaimFence

    uuid = create(stores, 1)
    row = claim(stores, uuid)
    assert row is not None
    rows = [push(f"m{i:03d}", uuid) for i in range(100)]
    ids = stores.outbox.append(USER, rows, fence=ClaimFence(uuid, row.claim_version, NOW))
    assert ids == list(range(1, 101))
