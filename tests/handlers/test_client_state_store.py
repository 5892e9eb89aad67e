"""``/client-state`` continued: writes split over several transactions, and TTL housekeeping."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.conftest import T0_MS
from tests.handlers.test_client_state import ADAPTER, DAY, OLD, entry, on_table, other_client, table_items, values_of

pytestmark = pytest.mark.memory_store
__all__ = ["on_table"]  # the fixture, shared with the first half


# ---- multi-transaction writes ---------------------------------------------------------------------------


def _fail_on_call(monkeypatch, store, n: int, exc: Exception):
    real = store.db.transact
    calls = {"n": 0}

    def transact(actions):
        calls["n"] += 1
        if calls["n"] == n:
            raise exc
        return real(actions)

    monkeypatch.setattr(store.db, "transact", transact)
    return calls


@ADAPTER
def test_later_part_failure_reports_applied_entries(api, ctx, monkeypatch):
    entries = [entry("n", "", "rejected")] + [entry("n", f"k{i:03d}", "v") for i in range(150)]
    _fail_on_call(monkeypatch, ctx.client_state, 2, RuntimeError("boom"))
    resp = api.put_client_state(entries)
    assert resp.status == 500 and resp.code == "INTERNAL_ERROR"
    assert resp.body["error"]["details"] == {"appliedEntries": list(range(1, 101))}
    assert resp.body["error"]["cause"]["name"] == "RuntimeError"
    assert len(values_of(api, "n")) == 100


@ADAPTER
def test_later_part_guard_failure_is_409_with_applied_entries(api, ctx, monkeypatch):
    from amsg.errors import CloudGuardError

    _fail_on_call(monkeypatch, ctx.client_state, 2, CloudGuardError("CLOUD_OWNER_RETIRED", "owner retired"))
    resp = api.put_client_state([entry("n", f"k{i:03d}", "v") for i in range(120)])
    assert resp.status == 409
    assert resp.body["error"] == {
        "code": "CLOUD_OWNER_RETIRED", "message": "owner retired", "details": {"appliedEntries": list(range(100))}
    }  # fmt: skip


@ADAPTER
def test_first_part_failure_is_a_plain_error(api, ctx, monkeypatch):
    _fail_on_call(monkeypatch, ctx.client_state, 1, RuntimeError("boom"))
    resp = api.put_client_state([entry("n", "k", "v")])
    assert resp.status == 500 and "details" not in resp.body["error"]


@ADAPTER
def test_transactions_are_split_by_size(ctx, monkeypatch):
    """20 inline values of ~340 KB cannot share one 4 MB transaction: parts of ≤ ~3.5 MB, all applied."""
    from amsg.crypto import UserCodec
    from amsg.domain.client_state import StateEntry, read_namespace, write_entries

    store = ctx.client_state
    sizes = []
    real = store.db.transact
    monkeypatch.setattr(store.db, "transact", lambda actions: (sizes.append(len(json.dumps(actions))), real(actions)))
    user, key = str(uuid.uuid4()), "ab" * 32
    entries = [StateEntry(i, "sz", f"k{i:02d}", chr(65 + i) * 170_000, OLD) for i in range(20)]
    result = write_entries(store, user, UserCodec(key), entries, T0_MS)
    assert result.upserted == 20
    assert len(sizes) >= 2 and max(sizes) < 3_600_000
    assert [e["value"][0] for e in read_namespace(store, user, UserCodec(key), "sz")] == [
        chr(65 + i) for i in range(20)
    ]


# ---- TTL housekeeping -------------------------------------------------------------------------------------------


def test_cleanup_expired_deletes_only_old_rows_of_configured_namespaces(api, ctx, on_table):
    other = other_client()
    api.put_client_state([entry("tmp", "old", "x", T0_MS - 8 * DAY), entry("tmp", "fresh", "y", T0_MS - DAY)])
    api.put_client_state([entry("tmp", "old-big", "L" * 250_000, T0_MS - 9 * DAY)])
    other.put_client_state([entry("tmp", "old", "z", T0_MS - 30 * DAY)])
    api.put_client_state([entry("keep", "old", "k", T0_MS - 365 * DAY)])
    deleted = ctx.client_state.cleanup_expired({"tmp": 7, "keep": 0, "bad": float("nan")}, T0_MS)
    assert deleted == 1 + 3 + 1
    assert values_of(api, "tmp") == {"fresh": ("y", T0_MS - DAY)}
    assert values_of(other, "tmp") == {}
    assert values_of(api, "keep") == {"old": ("k", T0_MS - 365 * DAY)}
    assert not on_table or table_items("SC#") == []
    assert ctx.client_state.cleanup_expired({"tmp": 7}, T0_MS, limit=1) == 0


def test_cleanup_respects_limit(ctx, api):
    api.put_client_state([entry("t", f"k{i}", "v", T0_MS - 10 * DAY) for i in range(5)])
    assert ctx.client_state.cleanup_expired({"t": 1}, T0_MS, limit=2) == 2
    assert len(values_of(api, "t")) == 3


def test_parse_ttl_config():
    from amsg.domain.client_state import parse_ttl_config

    assert parse_ttl_config('{"a": 7, "b": 0.5, "c": 0, "d": "3", "e": true, "f": -1}') == {"a": 7.0, "b": 0.5}
    assert parse_ttl_config("not json") == {} and parse_ttl_config("[1]") == {} and parse_ttl_config(None) == {}
