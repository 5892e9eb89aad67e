"""Rows a task names (docs/decisions.md, 45) on every backend: the one-transaction append writes the rows it
pushes without a by-task index entry and records their message ids on the task; every reader of a task's rows
(a redelivery, a run's fenced discard, the API's cancel and supersede) finds them by those ids, and rows of the
previous layout (every row in the index, none named) stay found."""

from __future__ import annotations

import pytest
from amsg.ports import MAX_NAMED_CHARS, NewTask, OutboxAppend, Settlement

from tests.contract.test_claims_contract import DUE, NOW, T1, USER, claim, create, uid

DAY = 86_400_000


def row(message_id: str, uuid: str, *, named: bool = True) -> OutboxAppend:
    return OutboxAppend(
        message_id=message_id, encrypted_push="enc", created_at=NOW, task_uuid=uuid, named_by_task=named
    )


def successor() -> NewTask:
    """A task that supersedes task 1."""
    return NewTask(
        user_id=USER, uuid=uid(2), encrypted_payload="p", message_type="fixed", next_send_at_ms=DUE, now_ms=T1
    )


def append(stores, task, rows, *, now: int = NOW):
    return stores.claims.append_batch(task, rows, now_ms=now, lease_until_ms=now + 120_000, owner="run")


def listed(stores, uuid: str, named=()) -> list[str]:
    return [r.message_id for r in stores.outbox.list_for_task(USER, uuid, named=named)]


def test_the_append_names_the_rows_it_pushes_and_only_readers_given_the_names_find_them(stores):
    uuid = create(stores, 1)
    task = claim(stores, uuid)
    assert task is not None
    # m0 is outbox-only (never pushed, never delivered): it keeps its index entry
    assert append(stores, task, [row("m1", uuid), row("m0", uuid, named=False), row("m2", uuid)]) == [1, 2, 3]
    assert task.outbox_message_ids == ("m1", "m2")
    stored = stores.tasks.get_task(USER, uuid)
    assert stored is not None and stored.outbox_message_ids == ("m1", "m2")
    assert listed(stores, uuid) == ["m0"]  # what the index holds: a reader must pass the names
    assert listed(stores, uuid, task.outbox_message_ids) == ["m1", "m0", "m2"]  # (created_at, id) order
    assert stores.outbox.list_for_task(USER, uuid, named=("m2", "nope"), limit=1)[0].message_id == "m0"


def test_a_deleted_task_reports_the_rows_it_named_and_the_api_discard_takes_them(stores):
    uuid = create(stores, 1)
    task = claim(stores, uuid)
    assert task is not None
    append(stores, task, [row("m1", uuid), row("m0", uuid, named=False)])
    deleted = stores.tasks.delete_task(USER, uuid)
    assert deleted is not None and deleted.outbox_message_ids == ("m1",)
    assert stores.outbox.discard_undelivered_for_task(USER, uuid, named=deleted.outbox_message_ids) == 2
    assert listed(stores, uuid, ("m1",)) == []


def test_a_superseded_task_reports_the_rows_it_named(stores):
    uuid = create(stores, 1)
    task = claim(stores, uuid)
    assert task is not None
    append(stores, task, [row("m1", uuid)])
    new = NewTask(
        user_id=USER, uuid=uid(2), encrypted_payload="p", message_type="fixed", next_send_at_ms=DUE, now_ms=T1
    )
    created = stores.tasks.create_task(new, uuid, prepared=stores.tasks.prepare_create(USER, uuid))
    assert created.superseded and created.superseded_outbox_ids == ("m1",)


def test_a_runs_fenced_discard_takes_the_untaken_rows_it_named(stores):
    uuid = create(stores, 1)
    task = claim(stores, uuid)
    assert task is not None
    append(stores, task, [row("m1", uuid), row("m2", uuid)])
    assert stores.outbox.claim_send(USER, "m1", task_uuid=uuid, claim_version=task.claim_version, now_ms=NOW)
    assert stores.claims.settle(USER, uuid, task.claim_version, Settlement(next_send_at_ms=DUE, status="failed"), NOW)
    named = task.outbox_message_ids
    assert stores.outbox.discard_undelivered_for_task(USER, uuid, claim_version=task.claim_version, named=named) == 1
    assert listed(stores, uuid, named) == ["m1"]  # taken for sending: its push may have left


def test_names_stay_until_a_settlement_clears_them_and_a_later_append_adds_to_them(stores):
    uuid = create(stores, 1)
    first = claim(stores, uuid)
    assert first is not None
    append(stores, first, [row("a1", uuid)])
    nxt = DUE + DAY
    assert stores.claims.settle(USER, uuid, first.claim_version, Settlement(next_send_at_ms=nxt, retry_count=0), NOW)
    second = claim(stores, uuid, now=nxt + 1_000, lease=nxt + 31_000, due=nxt)
    assert second is not None and second.outbox_message_ids == ("a1",)  # a row of it may still be open
    append(stores, second, [row("b1", uuid)], now=nxt + 1_000)
    assert second.outbox_message_ids == ("a1", "b1")
    later = Settlement(next_send_at_ms=nxt + DAY, retry_count=0, clear_outbox_ids=True)
    assert stores.claims.settle(USER, uuid, second.claim_version, later, nxt + 2_000)
    stored = stores.tasks.get_task(USER, uuid)
    assert stored is not None and stored.outbox_message_ids == ()


def test_names_past_the_budget_are_not_taken_and_those_rows_keep_their_index_entry(stores):
    uuid = create(stores, 1)
    task = claim(stores, uuid)
    assert task is not None
    long_ids = [f"{i}-" + "x" * (MAX_NAMED_CHARS // 2) for i in range(3)]
    append(stores, task, [row(message_id, uuid) for message_id in long_ids])
    assert task.outbox_message_ids == ()
    assert listed(stores, uuid) == long_ids


def test_rows_of_the_previous_layout_are_found_without_names(stores):
    """The version before named rows wrote every row to the index and named none: its tasks and rows work."""
    uuid = create(stores, 1)
    task = claim(stores, uuid)
    assert task is not None
    append(stores, task, [row("m1", uuid, named=False), row("m2", uuid, named=False)])
    assert task.outbox_message_ids == ()
    assert listed(stores, uuid) == ["m1", "m2"]
    deleted = stores.tasks.delete_task(USER, uuid)
    assert deleted is not None and deleted.outbox_message_ids == ()
    assert stores.outbox.discard_undelivered_for_task(USER, uuid, named=deleted.outbox_message_ids) == 2


def _adapter_only(request: pytest.FixtureRequest) -> None:
    if "memory" in request.node.callspec.id:
        pytest.skip("the memory store deletes in one step: nothing can come between its read and its write")


def test_a_cancel_that_read_the_task_before_an_append_still_reports_its_rows(stores, request):
    """The adapter reads the task, then deletes it conditioned on the names it read: an append committed in
    between fails the delete, which reads again."""
    _adapter_only(request)
    uuid = create(stores, 1)
    task = claim(stores, uuid)
    assert task is not None
    table = stores.tasks.db
    real_get = table.get
    interleaved: list[str] = []

    def get_then_append(key, **kwargs):
        item = real_get(key, **kwargs)
        if not interleaved and key.get("SK", "").startswith("T#"):
            interleaved.append(key["SK"])
            append(stores, task, [row("late", uuid)])  # the run's append lands after the delete's read
        return item

    table.get = get_then_append
    try:
        deleted = stores.tasks.delete_task(USER, uuid)
    finally:
        table.get = real_get
    assert interleaved and deleted is not None and deleted.outbox_message_ids == ("late",)
    assert stores.outbox.discard_undelivered_for_task(USER, uuid, named=deleted.outbox_message_ids) == 1


def test_a_supersede_that_read_the_task_before_an_append_still_reports_its_rows(stores, request):
    _adapter_only(request)
    uuid = create(stores, 1)
    task = claim(stores, uuid)
    assert task is not None
    prepared = stores.tasks.prepare_create(USER, uuid)  # the create's read of the task it supersedes
    append(stores, task, [row("late", uuid)])
    new = NewTask(
        user_id=USER, uuid=uid(2), encrypted_payload="p", message_type="fixed", next_send_at_ms=DUE, now_ms=T1
    )
    created = stores.tasks.create_task(new, uuid, prepared=prepared)
    assert created.superseded and created.superseded_outbox_ids == ("late",)
