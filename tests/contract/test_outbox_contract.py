"""OutboxStore: what docs/delivery.md promises of the outbox, on every backend (see conftest)."""

from __future__ import annotations

import pytest
from amsg.ports import OutboxAppend, OwnerClaim

from tests.conftest import T0_MS

DAY = 86_400_000
USER = "u-contract"
TASK = "5f0c8a64-7c77-4f55-9a7e-1b6a0cf0a001"


def row(message_id: str, *, created: int = T0_MS, task: str | None = TASK, payload: str | None = None) -> OutboxAppend:
    return OutboxAppend(
        message_id=message_id,
        encrypted_push=payload or f"ct-of-{message_id}",
        created_at=created,
        task_uuid=task,
        session_id=f"sess_{task}" if task else None,
        message_index=1,
        total_messages=1,
    )


def unacked(store, since: int = 0, limit: int = 100, now: int = T0_MS) -> list[tuple[int, str]]:
    return [(r.id, r.message_id) for r in store.list_unacked(USER, since, limit, now)]


def test_ids_grow_per_user_from_one_and_rows_read_back(stores):
    store = stores.outbox
    assert store.append(USER, [row("a"), row("b", task=None)]) == [1, 2]
    assert store.append(USER, [row("c")]) == [3]
    assert store.append("someone-else", [row("a")]) == [1]
    rows = store.list_unacked(USER, 0, 10, T0_MS)
    assert [(r.id, r.message_id, r.encrypted_push, r.created_at) for r in rows] == [
        (1, "a", "ct-of-a", T0_MS),
        (2, "b", "ct-of-b", T0_MS),
        (3, "c", "ct-of-c", T0_MS),
    ]
    assert (rows[0].task_uuid, rows[0].session_id, rows[0].message_index, rows[0].total_messages) == (
        TASK,
        f"sess_{TASK}",
        1,
        1,
    )
    assert rows[1].task_uuid is None and rows[1].session_id is None
    assert all(r.delivered_at is None and r.acked_at is None and r.sending_at is None for r in rows)


def test_upsert_keeps_the_id_and_task_columns_and_clears_delivery(stores):
    store = stores.outbox
    store.append(USER, [row("a"), row("b")])
    store.mark_delivered(USER, ["a"], T0_MS + 1)
    assert store.append(USER, [row("a", created=T0_MS + 5, task="other", payload="new")]) == [1]
    first = store.list_unacked(USER, 0, 10, T0_MS)[0]
    assert (first.id, first.encrypted_push, first.created_at, first.delivered_at) == (1, "new", T0_MS + 5, None)
    assert first.task_uuid == TASK  # identity columns stay as first written


def test_an_acked_row_is_final(stores):
    store = stores.outbox
    store.append(USER, [row("a")])
    assert store.ack(USER, ["a"], T0_MS) == 1
    assert store.append(USER, [row("a", payload="revived?")]) == [1]
    assert unacked(store) == []
    assert [(r.encrypted_push, r.acked_at) for r in store.list_for_task(USER, TASK)] == [("ct-of-a", T0_MS)]


def test_duplicates_in_one_append_collapse_to_the_last(stores):
    store = stores.outbox
    assert store.append(USER, [row("a"), row("b"), row("a", payload="last")]) == [1, 2, 1]
    assert [(r.id, r.encrypted_push) for r in store.list_unacked(USER, 0, 10, T0_MS)] == [(1, "last"), (2, "ct-of-b")]


def test_list_unacked_pages_by_id_and_skips_acked(stores):
    store = stores.outbox
    store.append(USER, [row(f"m{i}") for i in range(1, 7)])
    store.ack(USER, ["m2", "m5"], T0_MS)
    assert unacked(store, limit=2) == [(1, "m1"), (3, "m3")]
    assert unacked(store, since=3, limit=2) == [(4, "m4"), (6, "m6")]
    assert unacked(store, since=6) == []
    assert unacked(store, limit=0) == []


def test_rows_expire_28_days_after_creation(stores):
    store = stores.outbox
    store.append(USER, [row("old")])
    store.append(USER, [row("young", created=T0_MS + DAY)])
    assert unacked(store, now=T0_MS + 28 * DAY - 1000) == [(1, "old"), (2, "young")]
    assert unacked(store, now=T0_MS + 28 * DAY) == [(2, "young")]
    assert store.ack(USER, ["old"], T0_MS + 28 * DAY) == 0  # expired: neither acked nor counted
    assert store.delete(USER, ["old", "young"], T0_MS + 28 * DAY) == 1


@pytest.mark.parametrize(
    ("ack_after", "gone_at"),
    [(DAY, 8 * DAY), (25 * DAY, 28 * DAY)],
    ids=["ack+7d-first", "created+28d-first"],
)
def test_ack_shortens_retention_to_the_earlier_of_the_two(stores, ack_after, gone_at):
    store = stores.outbox
    store.append(USER, [row("a"), row("b")])
    assert store.ack(USER, ["a", "a", "nope"], T0_MS + ack_after) == 1
    assert store.ack(USER, ["a"], T0_MS + ack_after + 1) == 0  # idempotent
    assert store.delete(USER, ["a"], T0_MS + gone_at - 1000) == 1
    store.append(USER, [row("c")])
    store.ack(USER, ["c"], T0_MS + ack_after)
    assert store.delete(USER, ["c"], T0_MS + gone_at) == 0  # past retention: removed, not counted


def test_delete_counts_live_rows_and_all_means_every_row(stores):
    store = stores.outbox
    store.append(USER, [row("a"), row("b"), row("c")])
    store.append("someone-else", [row("a")])
    assert store.delete(USER, ["a", "a", "missing"]) == 1
    assert store.delete(USER, None, T0_MS) == 2
    assert unacked(store) == []
    assert store.append(USER, [row("d")]) == [4]  # ids are never reused
    assert [m for _, m in [(r.id, r.message_id) for r in store.list_unacked("someone-else", 0, 5, T0_MS)]] == ["a"]


def test_mark_delivered_and_discard_undelivered(stores):
    store = stores.outbox
    store.append(USER, [row("t1"), row("t2"), row("t3"), row("t4")])
    assert store.mark_delivered(USER, ["t1", "nope", "t1"], T0_MS + 1) == 1
    store.ack(USER, ["t2"], T0_MS)
    assert store.mark_delivered(USER, ["t2"], T0_MS + 2) == 1  # whatever the ack state
    assert store.discard_undelivered(USER, ["t1", "t2", "t3", "t3"]) == 1
    assert [r.message_id for r in store.list_for_task(USER, TASK)] == ["t1", "t2", "t4"]
    assert [(r.message_id, r.delivered_at) for r in store.list_for_task(USER, TASK)][:2] == [
        ("t1", T0_MS + 1),
        ("t2", T0_MS + 2),
    ]


def test_task_rows_are_exact_ordered_and_bounded(stores):
    store = stores.outbox
    store.append(USER, [row("late", created=T0_MS + 10), row("early", created=T0_MS)])
    store.append(USER, [row("x", task=TASK + "#1"), row("loose", task=None)])
    assert [r.message_id for r in store.list_for_task(USER, TASK)] == ["early", "late"]
    assert [r.message_id for r in store.list_for_task(USER, TASK, since_ms=T0_MS + 1)] == ["late"]
    assert [r.message_id for r in store.list_for_task(USER, TASK, limit=1)] == ["early"]
    assert [r.message_id for r in store.list_for_task(USER, TASK + "#1")] == ["x"]
    store.mark_delivered(USER, ["late"], T0_MS)
    assert store.discard_undelivered_for_task(USER, TASK) == 1
    assert [r.message_id for r in store.list_for_task(USER, TASK)] == ["late"]
    assert [r.message_id for r in store.list_for_task(USER, TASK + "#1")] == ["x"]


def test_release_send_on_an_undelivered_row_only(stores):
    store = stores.outbox
    store.append(USER, [row("a")])
    store.release_send(USER, "a")
    store.release_send(USER, "missing")  # nothing to release: no error, no row created
    assert unacked(store) == [(1, "a")]


def test_a_large_payload_round_trips(stores):
    big = "ab" * 200_000  # above the adapter's inline limit: it splits it across part items
    store = stores.outbox
    store.append(USER, [row("big", payload=big)])
    assert store.list_unacked(USER, 0, 1, T0_MS)[0].encrypted_push == big
    assert store.delete(USER, ["big"]) == 1


def test_the_fake_refuses_owned_rows():
    """Owner guards commit with the owner item in one transaction (proven on DynamoDB Local); the fake refuses
    them rather than ignore them."""
    from tests.support.fakes import MemoryOutboxStore, NotFaked

    with pytest.raises(NotFaked):
        MemoryOutboxStore().append(USER, [OutboxAppend("a", "ct", T0_MS, owner=OwnerClaim(ref="r", generation=1))])
