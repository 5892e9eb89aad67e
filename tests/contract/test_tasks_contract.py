"""TaskStore (the API side of tasks) on every backend (see conftest): ids, the uuid registry, supersede, the
update's conditions and the listing order. The delivery side (claims, leases, settlements) is
test_claims_contract.py."""

from __future__ import annotations

import pytest
from amsg.errors import TaskUuidConflict
from amsg.ports import NewTask, OwnerClaim

USER = "u-contract"
OTHER = "u-other"
T1 = 1_893_456_000_000  # 2030-01-01T00:00:00.000Z (the ports carry epoch ms)
T2 = T1 + 5_000
T3 = T1 + 10_000
DUE = T1 + 86_400_000
LATER = T1 + 2 * 86_400_000


def new(uuid: str, user: str = USER, *, payload: str = "ct", correlation_id: str | None = None) -> NewTask:
    return NewTask(
        user_id=user,
        uuid=uuid,
        encrypted_payload=payload,
        message_type="fixed",
        next_send_at_ms=DUE,
        now_ms=T1,
        correlation_id=correlation_id,
    )


def uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def test_ids_count_per_user_and_a_new_task_reads_back_as_written(stores):
    tasks = stores.tasks
    assert [tasks.create_task(new(uid(i))).id for i in (1, 2, 3)] == [1, 2, 3]
    assert tasks.create_task(new(uid(4), OTHER)).id == 1
    row = tasks.create_task(new(uid(5), correlation_id="req-1")) and tasks.get_task(USER, uid(5))
    assert row is not None
    assert (row.user_id, row.uuid, row.id, row.encrypted_payload, row.message_type, row.next_send_at_ms) == (
        USER,
        uid(5),
        4,
        "ct",
        "fixed",
        DUE,
    )
    assert (row.status, row.retry_count, row.rev, row.claim_version) == ("pending", 0, 1, 0)
    assert (row.created_at_ms, row.updated_at_ms, row.correlation_id) == (T1, T1, "req-1")
    assert (row.lease_until_ms, row.retry_after_ms, row.deferred_until_ms, row.last_error, row.owner) == (None,) * 5
    assert tasks.get_task(OTHER, uid(5)) is None and tasks.get_task(USER, uid(99)) is None


def test_a_taken_uuid_conflicts_for_any_user_and_changes_nothing(stores):
    tasks = stores.tasks
    tasks.create_task(new(uid(1), payload="first"))
    for user in (USER, OTHER):
        with pytest.raises(TaskUuidConflict):
            tasks.create_task(new(uid(1), user, payload="second"))
    assert tasks.get_task(USER, uid(1)).encrypted_payload == "first"
    assert tasks.get_task(OTHER, uid(1)) is None
    assert tasks.create_task(new(uid(2))).id == 2  # the failed creates used no id
    assert tasks.create_task(new(uid(3), OTHER)).id == 1


def test_supersede_replaces_the_users_own_task_in_the_same_write(stores):
    tasks = stores.tasks
    tasks.create_task(new(uid(1)))
    tasks.create_task(new(uid(2), OTHER))
    created = tasks.create_task(new(uid(3)), uid(1))
    assert (created.id, created.superseded) == (2, True)
    assert tasks.get_task(USER, uid(1)) is None and tasks.find_task(uid(1)) is None
    assert tasks.create_task(new(uid(1))).id == 3  # the superseded uuid is free again
    assert tasks.create_task(new(uid(4)), uid(99)).superseded is False  # nothing to supersede
    assert tasks.create_task(new(uid(5)), uid(2)).superseded is False  # another user's task is not touched
    assert tasks.get_task(OTHER, uid(2)) is not None


def test_a_conflicting_create_does_not_supersede(stores):
    tasks = stores.tasks
    tasks.create_task(new(uid(1)))
    tasks.create_task(new(uid(2), OTHER))
    with pytest.raises(TaskUuidConflict):
        tasks.create_task(new(uid(2)), uid(1))
    assert tasks.get_task(USER, uid(1)) is not None


def test_list_is_the_users_tasks_in_uuid_order_and_find_crosses_users(stores):
    tasks = stores.tasks
    order = [uid(30), "ffffffff-0000-4000-8000-000000000000", uid(4), "0a000000-0000-4000-8000-000000000000"]
    for uuid in order:
        tasks.create_task(new(uuid))
    tasks.create_task(new(uid(7), OTHER))
    assert [row.uuid for row in tasks.list_tasks(USER)] == sorted(order)
    assert tasks.list_tasks("nobody") == []
    found = tasks.find_task(uid(7))
    assert found is not None and (found.user_id, found.id) == (OTHER, 1)
    assert tasks.find_task(uid(99)) is None


def test_delete_answers_whether_there_was_a_task_and_frees_the_uuid(stores):
    tasks = stores.tasks
    tasks.create_task(new(uid(1)))
    assert tasks.delete_task(OTHER, uid(1)) is None
    assert tasks.delete_task(USER, uid(1)) is not None
    assert tasks.delete_task(USER, uid(1)) is None
    assert tasks.find_task(uid(1)) is None
    assert tasks.create_task(new(uid(1), OTHER)).id == 1


def test_update_is_conditional_on_the_revision_and_pending(stores):
    tasks = stores.tasks
    tasks.create_task(new(uid(1)))
    assert (
        tasks.update_pending_task(USER, uid(1), encrypted_payload="x", next_send_at_ms=None, now_ms=T2, expected_rev=2)
        is None
    )
    assert (
        tasks.update_pending_task(OTHER, uid(1), encrypted_payload="x", next_send_at_ms=None, now_ms=T2, expected_rev=1)
        is None
    )
    stores.set_delivery_state(USER, uid(1), retry_count=3)
    assert (
        tasks.update_pending_task(
            USER, uid(1), encrypted_payload="v2", next_send_at_ms=LATER, now_ms=T2, expected_rev=1
        )
        == T2
    )
    row = tasks.get_task(USER, uid(1))
    assert (row.encrypted_payload, row.next_send_at_ms, row.rev, row.retry_count, row.updated_at_ms) == (
        "v2",
        LATER,
        2,
        0,
        T2,
    )
    assert row.created_at_ms == T1 and row.id == 1
    stores.set_delivery_state(USER, uid(1), status="failed")
    assert (
        tasks.update_pending_task(USER, uid(1), encrypted_payload="v3", next_send_at_ms=None, now_ms=T3, expected_rev=2)
        is None
    )
    assert tasks.get_task(USER, uid(1)).encrypted_payload == "v2"


def test_a_live_lease_blocks_moving_the_occurrence_but_not_a_payload_edit(stores):
    tasks = stores.tasks
    tasks.create_task(new(uid(1)))
    stores.set_delivery_state(USER, uid(1), lease_until_ms=T3)
    assert (
        tasks.update_pending_task(
            USER, uid(1), encrypted_payload="v2", next_send_at_ms=LATER, now_ms=T2, expected_rev=1
        )
        is None
    )
    assert (
        tasks.update_pending_task(USER, uid(1), encrypted_payload="v2", next_send_at_ms=None, now_ms=T2, expected_rev=1)
        == T2
    )
    assert tasks.get_task(USER, uid(1)).next_send_at_ms == DUE
    # a lease that ends exactly now is over
    assert (
        tasks.update_pending_task(
            USER, uid(1), encrypted_payload="v3", next_send_at_ms=LATER, now_ms=T3, expected_rev=2
        )
        == T3
    )
    assert tasks.get_task(USER, uid(1)).next_send_at_ms == LATER


@pytest.mark.parametrize(
    ("keep_deferral", "next_send_at", "kept"), [(True, None, True), (False, None, False), (True, LATER, False)]
)
def test_an_update_clears_the_retry_and_deferral_unless_a_payload_edit_keeps_them(
    stores, keep_deferral, next_send_at, kept
):
    tasks = stores.tasks
    tasks.create_task(new(uid(1)))
    stores.set_delivery_state(USER, uid(1), retry_after_ms=T3, deferred_until_ms=T3)
    assert (
        tasks.update_pending_task(
            USER,
            uid(1),
            encrypted_payload="v2",
            next_send_at_ms=next_send_at,
            now_ms=T2,
            expected_rev=1,
            keep_deferral=keep_deferral,
        )
        == T2
    )
    row = tasks.get_task(USER, uid(1))
    assert (row.retry_after_ms, row.deferred_until_ms) == ((T3, T3) if kept else (None, None))


def test_prepare_create_reads_the_users_subscription(stores):
    assert stores.tasks.prepare_create(USER).subscription is None
    stores.subscriptions.put_push_subscription(USER, "ct-sub", 7)
    prepared = stores.tasks.prepare_create(USER, uid(1))
    assert prepared.subscription is not None
    assert (prepared.subscription.encrypted_subscription, prepared.subscription.updated_at) == ("ct-sub", 7)
    assert stores.tasks.create_task(new(uid(2)), uid(1), prepared=prepared).id == 1


def test_the_fake_refuses_owned_tasks():
    from tests.support.fakes import MemoryPushSubscriptionStore, MemoryTaskStore, NotFaked

    tasks = MemoryTaskStore(MemoryPushSubscriptionStore())
    task = new(uid(1))
    task.owner = OwnerClaim(ref="r", generation=1)
    with pytest.raises(NotFaked):
        tasks.create_task(task)


def test_concurrent_creates_of_one_user_get_distinct_consecutive_ids(stores):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=3) as pool:
        ids = list(pool.map(lambda n: stores.tasks.create_task(new(uid(n))).id, range(1, 10)))
    assert sorted(ids) == list(range(1, 10))
    assert sorted(row.id for row in stores.tasks.list_tasks(USER)) == list(range(1, 10))
