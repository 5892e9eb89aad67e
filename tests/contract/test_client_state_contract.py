"""ClientStateStore on every backend (see conftest): what the client-state routes and the TTL sweep rely on."""

from __future__ import annotations

from amsg.domain.client_state import DAY_MS, reference_footprint
from amsg.ports import NamespaceStats, StateRow, StateWrite

USER = "u-contract"
OTHER = "u-other"
NOW = 1_893_456_000_000  # 2030-01-01T00:00:00.000Z
OLD = NOW - 60_000
BIG = 400_000  # above one item's inline value: the adapter stores it as parts


def put(namespace: str, key: str, value: str | None, guard: int = OLD, plain: int | None = None) -> StateWrite:
    size = len(value) if plain is None and value is not None else (plain or 0)
    return StateWrite(namespace=namespace, key=key, value=value, guard=guard, plain_bytes=size)


def values(store, namespace: str, user: str = USER) -> dict[str, tuple[str, int]]:
    return {row.key: (row.value, row.updated_at) for row in store.get_namespace(user, namespace)}


def test_rows_round_trip_in_code_point_order(stores):
    store = stores.client_state
    keys = ["b", "B", "é", "a/b", "z", "\u4e2d", "~", "a", "😀", "\uffff"]
    result = store.upsert(USER, [put("n", k, f"ct-{k}") for k in keys], now_ms=NOW)
    assert (result.upserted, result.skipped, result.deleted, result.outcomes) == (len(keys), 0, 0, [True] * len(keys))
    rows = store.get_namespace(USER, "n")
    assert [row.key for row in rows] == sorted(keys, key=lambda k: k.encode("utf-8"))
    assert rows[0] == StateRow("n", "B", "ct-B", OLD)
    assert store.get_namespace(USER, "other") == [] and store.get_namespace(OTHER, "n") == []


def test_last_write_wins_on_the_guard(stores):
    store = stores.client_state
    store.upsert(USER, [put("n", "k", "base", OLD)], now_ms=NOW)
    older = store.upsert(USER, [put("n", "k", "older", OLD - 1)], now_ms=NOW)
    assert (older.upserted, older.skipped, older.outcomes) == (0, 1, [False])
    assert older.skipped_entries == [{"namespace": "n", "key": "k"}]
    equal = store.upsert(USER, [put("n", "k", "equal", OLD)], now_ms=NOW)
    assert equal.outcomes == [True] and values(store, "n") == {"k": ("equal", OLD)}
    store.upsert(USER, [put("n", "k", "newer", OLD + 5)], now_ms=NOW)
    assert values(store, "n") == {"k": ("newer", OLD + 5)}


def test_a_stored_guard_from_the_future_loses_to_any_write(stores):
    store = stores.client_state
    store.upsert(USER, [put("n", "k", "future", NOW + 10_000)], now_ms=NOW + 10_000)
    result = store.upsert(USER, [put("n", "k", "now", 1)], now_ms=NOW)
    assert result.outcomes == [True] and values(store, "n") == {"k": ("now", 1)}


def test_entries_of_one_request_apply_in_order(stores):
    store = stores.client_state
    first = store.upsert(USER, [put("n", "k", "first"), put("n", "k", "second", OLD + 1)], now_ms=NOW)
    assert (first.upserted, first.skipped) == (2, 0)
    assert values(store, "n") == {"k": ("second", OLD + 1)}
    late = store.upsert(USER, [put("n", "k", "newest", OLD + 5), put("n", "k", "late", OLD + 2)], now_ms=NOW)
    assert (late.upserted, late.skipped, late.outcomes) == (1, 1, [True, False])
    gone = store.upsert(USER, [put("n", "k", None, OLD + 6), put("n", "k", "again", 1)], now_ms=NOW)
    assert (gone.deleted, gone.upserted) == (1, 1)  # after the delete the key is absent: any guard writes it
    assert values(store, "n") == {"k": ("again", 1)}


def test_deletes_obey_the_guard_and_an_absent_key_counts_as_deleted(stores):
    store = stores.client_state
    store.upsert(USER, [put("n", "k", "v", OLD)], now_ms=NOW)
    assert store.upsert(USER, [put("n", "k", None, OLD - 1)], now_ms=NOW).outcomes == [False]
    assert store.upsert(USER, [put("n", "k", None, OLD)], now_ms=NOW).deleted == 1
    assert store.upsert(USER, [put("n", "never", None, OLD)], now_ms=NOW).deleted == 1
    assert values(store, "n") == {}


def test_a_large_value_round_trips_and_is_replaced_whole(stores):
    store = stores.client_state
    big = "".join(chr(0x21 + (i * 31) % 90) for i in range(BIG))
    store.upsert(USER, [put("n", "big", big), put("n", "small", "s")], now_ms=NOW)
    assert values(store, "n") == {"big": (big, OLD), "small": ("s", OLD)}
    store.upsert(USER, [put("n", "big", "tiny", OLD + 1)], now_ms=NOW)
    assert values(store, "n")["big"] == ("tiny", OLD + 1)


def test_namespaces_count_reference_bytes_sort_and_truncate(stores):
    store = stores.client_state
    store.upsert(USER, [put("notes", "k", "yy", 10)], now_ms=NOW)
    store.upsert(USER, [put("ns:a", "k1", "abcd", 100), put("ns:a", "big", "x", 300, plain=300_000)], now_ms=NOW)
    store.upsert(USER, [put("ns:b", "k1", "x", 50)], now_ms=NOW)
    store.upsert(OTHER, [put("zz", "k", "v", 1)], now_ms=NOW)
    a_bytes = reference_footprint(4)[1] + reference_footprint(300_000)[1]
    listing = store.list_namespaces(USER, 200)
    assert listing.namespaces == [
        NamespaceStats("notes", 1, reference_footprint(2)[1], 10),
        NamespaceStats("ns:a", 2, a_bytes, 300),
        NamespaceStats("ns:b", 1, reference_footprint(1)[1], 50),
    ]
    assert listing.truncated is False
    cut = store.list_namespaces(USER, 2)
    assert [n.namespace for n in cut.namespaces] == ["notes", "ns:a"] and cut.truncated is True
    exact = store.list_namespaces(USER, 3)
    assert len(exact.namespaces) == 3 and exact.truncated is False
    empty = store.list_namespaces("nobody", 200)
    assert (empty.namespaces, empty.truncated) == ([], False)


def test_delete_namespace_counts_reference_rows_and_keeps_the_rest(stores):
    store = stores.client_state
    store.upsert(
        USER, [put("a", "k1", "v1"), put("a", "big", "z" * BIG, plain=500_000), put("b", "k", "keep")], now_ms=NOW
    )
    store.upsert(OTHER, [put("a", "k1", "theirs")], now_ms=NOW)
    assert store.delete_namespace(USER, "a") == 1 + reference_footprint(500_000)[0]
    assert values(store, "a") == {} and values(store, "b") == {"k": ("keep", OLD)}
    assert values(store, "a", OTHER) == {"k1": ("theirs", OLD)}
    assert store.delete_namespace(USER, "a") == 0
    assert store.delete_namespace(USER, "n" * 600) == 0  # longer than any valid namespace: nothing to address


def test_delete_namespace_over_one_transaction(stores):
    store = stores.client_state
    store.upsert(USER, [put("many", f"k{i:03d}", "v") for i in range(150)], now_ms=NOW)
    assert store.delete_namespace(USER, "many") == 150
    assert values(store, "many") == {}


def test_delete_all_counts_reference_rows_of_one_user(stores):
    store = stores.client_state
    store.upsert(USER, [put("a", "k", "v"), put("b", "k", "v"), put("b", "big", "q" * BIG, plain=450_000)], now_ms=NOW)
    store.upsert(OTHER, [put("a", "k", "theirs")], now_ms=NOW)
    assert store.delete_all(USER) == 2 + reference_footprint(450_000)[0]
    assert store.list_namespaces(USER, 200).namespaces == []
    assert store.delete_all(USER) == 0
    assert values(store, "a", OTHER) == {"k": ("theirs", OLD)}


def test_cleanup_expires_old_rows_of_configured_namespaces_for_every_user(stores):
    store = stores.client_state
    store.upsert(USER, [put("tmp", "old", "x", NOW - 8 * DAY_MS), put("tmp", "fresh", "y", NOW - DAY_MS)], now_ms=NOW)
    store.upsert(USER, [put("tmp", "old-big", "L" * BIG, NOW - 9 * DAY_MS, plain=250_000)], now_ms=NOW)
    store.upsert(OTHER, [put("tmp", "old", "z", NOW - 30 * DAY_MS)], now_ms=NOW)
    store.upsert(USER, [put("keep", "old", "k", NOW - 365 * DAY_MS)], now_ms=NOW)
    ttl = {"tmp": 7, "keep": 0, "bad": float("nan"), "flag": True}
    assert store.cleanup_expired(ttl, NOW) == 1 + reference_footprint(250_000)[0] + 1  # type: ignore[arg-type]
    assert values(store, "tmp") == {"fresh": ("y", NOW - DAY_MS)}
    assert values(store, "tmp", OTHER) == {}
    assert values(store, "keep") == {"old": ("k", NOW - 365 * DAY_MS)}
    assert store.cleanup_expired({"tmp": 7}, NOW) == 0


def test_cleanup_takes_at_most_limit_keys_oldest_first(stores):
    store = stores.client_state
    store.upsert(USER, [put("t", f"k{i}", "v", NOW - (10 + i) * DAY_MS) for i in range(5)], now_ms=NOW)
    store.upsert(USER, [put("u", "k", "v", NOW - 10 * DAY_MS)], now_ms=NOW)
    assert store.cleanup_expired({"t": 1, "u": 1}, NOW, limit=2) == 2
    assert sorted(values(store, "t")) == ["k0", "k1", "k2"]  # the two oldest went first
    assert values(store, "u") != {}  # the budget ran out before the second namespace
    assert store.cleanup_expired({"t": 1, "u": 1}, NOW, limit=0) == 0
