"""``/client-state`` and ``/client-state/namespaces`` over the wire.

The wire client is independent of the server package; store-level checks (items in the table, TTL housekeeping,
the transaction split) use ``ctx`` directly.
"""

from __future__ import annotations

import json
import math
import uuid

import pytest

from tests.conftest import T0_MS, TABLE, moto_table_resource
from tests.support.inprocess import InProcessApi
from tests.support.wire_client import WireClient

OLD = T0_MS - 60_000
DAY = 86_400_000
# One PUT with a one-character namespace and key, sent by the JS client (compact JSON, no gzip): the largest
# value that fits MAX_RAW_BODY_BYTES (4 000 000) once encrypted and base64-enveloped.
MAX_VALUE_ONE_REQUEST = 2_999_859

# the routes over storage semantics: under `make unit` the in-memory fakes (tests/contract holds them to the
# adapter), under `make test` moto, where the checks of the table's items (`on_table`) run too; a test about the
# adapter itself (its items, transactions, races) is `dynamo_store` and always runs on moto
pytestmark = pytest.mark.memory_store
ITEMS = pytest.mark.dynamo_store  # changes the table's items
ADAPTER = pytest.mark.dynamo_store  # drives the adapter's internals (its reads, its transactions)


@pytest.fixture
def on_table(ctx) -> bool:
    """Whether the test runs on the DynamoDB adapter (moto), where the item layout is checked as well."""
    from tests.support.fakes import MemoryClientStateStore

    return not isinstance(ctx.client_state, MemoryClientStateStore)


def entry(namespace: str, key: str, value, updated_at: int = OLD, **extra):
    return {"namespace": namespace, "key": key, "value": value, "updatedAt": updated_at, **extra}


def values_of(api: WireClient, namespace: str) -> dict[str, tuple[str, int]]:
    resp = api.get_client_state(namespace)
    assert resp.status == 200, resp.text
    assert resp.data["namespace"] == namespace
    return {e["key"]: (e["value"], e["updatedAt"]) for e in resp.data["entries"]}


def table_items(prefix: str = "") -> list[dict]:
    table = moto_table_resource(TABLE)
    items, kwargs = [], {}
    while True:
        page = table.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return [i for i in items if i["SK"].startswith(prefix)]


def ref_bytes(plain: int) -> int:
    """What the reference stores for one value: hex ciphertext rows, chunked above 200 KiB."""
    if plain <= 204_800:
        return 2 * plain + 66
    n = math.ceil(plain / 204_800)
    return 17 + len(str(n)) + 2 * plain + 66 * n


def other_client(token: str | None = None) -> WireClient:
    client = WireClient(InProcessApi(), user_id=str(uuid.uuid4()), server_token=token)
    client.init()
    return client


# ---- round trip, order, encryption -------------------------------------------------------------------------


def test_put_then_get_round_trips_sorted_by_utf8_byte_order(api):
    keys = ["b", "a", "Z", "é", "ｚ", "😀", "a b"]
    resp = api.put_client_state([entry("ns", k, f"value of {k} ✓") for k in keys])
    assert resp.status == 200, resp.text
    assert resp.body == {"success": True, "data": {"upserted": 7, "skipped": 0}}

    got = api.get_client_state("ns")
    assert got.body["encrypted"] is True and got.body["version"] == 1
    assert "value of" not in got.text  # encrypted on the wire
    # code point order == UTF-8 byte order: U+FF5A sorts before U+1F600 (UTF-16 order would be the reverse)
    assert [e["key"] for e in got.data["entries"]] == ["Z", "a", "a b", "b", "é", "ｚ", "😀"]
    assert got.data["entries"][0] == {"namespace": "ns", "key": "Z", "value": "value of Z ✓", "updatedAt": OLD}


def test_served_under_api_v1_as_well(api):
    headers = {"Content-Type": "application/json", "X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
    from tests.support.wire_client import encrypt

    body = json.dumps(encrypt({"entries": [entry("v1", "k", "x")]}, api.user_key))
    assert api.request("PUT", "/api/v1/client-state", headers=headers, body=body).status == 200
    got = api.get_encrypted("/api/v1/client-state?namespace=v1")
    assert got.data["entries"][0]["value"] == "x"
    assert api.get_encrypted("/api/v1/client-state/namespaces").data["namespaces"][0]["namespace"] == "v1"
    assert api.request("DELETE", "/api/v1/client-state").data == {"deleted": 1}


def test_get_unknown_namespace_is_empty(api):
    assert api.get_client_state("nothing-here").data == {"namespace": "nothing-here", "entries": []}
    assert api.get_client_state("x" * 5000).data["entries"] == []  # longer than any valid namespace


# ---- whole-request validation and check order ---------------------------------------------------------------


@pytest.mark.parametrize("body", [{}, {"entries": None}, {"entries": {}}, {"entries": "x"}, {"entries": []}])
def test_entries_must_be_a_non_empty_array(api, body):
    resp = api.send_encrypted("PUT", "/client-state", body)
    assert (resp.status, resp.code) == (400, "INVALID_STATE_ENTRIES")


def test_too_many_entries(api):
    resp = api.put_client_state([entry("n", f"k{i}", "v") for i in range(201)])
    assert (resp.status, resp.code) == (400, "TOO_MANY_STATE_ENTRIES")
    assert resp.body["error"]["details"] == {"count": 201}
    ok = api.put_client_state([entry("n", f"k{i}", "v") for i in range(200)])
    assert ok.data == {"upserted": 200, "skipped": 0}


def test_put_gate_order(api):
    enc = {"X-Payload-Encrypted": "true", "X-Encryption-Version": "1", "Content-Type": "application/json"}
    # X-Payload-Encrypted is checked before X-User-Id
    resp = api.request("PUT", "/client-state", headers={"X-Encryption-Version": "1"}, body="{}", user=False)
    assert resp.code == "ENCRYPTION_REQUIRED"
    resp = api.request("PUT", "/client-state", headers=enc, body="{}", user=False)
    assert resp.code == "USER_ID_REQUIRED"
    resp = api.request("PUT", "/client-state", headers={**enc, "X-User-Id": "nope"}, body="{}", user=False)
    assert resp.code == "INVALID_USER_ID_FORMAT"
    resp = api.request("PUT", "/client-state", headers={**enc, "X-Encryption-Version": "2"}, body="{}")
    assert resp.code == "UNSUPPORTED_ENCRYPTION_VERSION"
    resp = api.request("PUT", "/client-state", headers=enc, body='{"iv": 1}')
    assert (resp.status, resp.code) == (400, "INVALID_ENCRYPTED_PAYLOAD")
    from tests.support.wire_client import encrypt

    wrong_key = json.dumps(encrypt({"entries": []}, "00" * 32))
    assert api.request("PUT", "/client-state", headers=enc, body=wrong_key).code == "DECRYPTION_FAILED"
    assert api.send_encrypted("PUT", "/client-state", [1, 2]).code == "INVALID_PAYLOAD_FORMAT"


def test_client_token_is_checked_first(make_context):
    make_context(AMSG_CLIENT_TOKEN="s3cret")
    good = other_client("s3cret")
    bad = WireClient(InProcessApi(), user_id=good.user_id, server_token="wrong", user_key=good.user_key)
    assert bad.put_client_state([entry("n", "k", "v")]).code == "INVALID_CLIENT_TOKEN"
    assert bad.request("PUT", "/client-state", body="{}", user=False).status == 401
    assert bad.get_client_state(None).code == "INVALID_CLIENT_TOKEN"
    assert bad.clear_client_state().code == "INVALID_CLIENT_TOKEN"
    assert bad.client_state_namespaces(limit="0").code == "INVALID_CLIENT_TOKEN"
    assert good.put_client_state([entry("n", "k", "v")]).status == 200


# ---- per-entry rejections ------------------------------------------------------------------------------------


def test_every_rejection_code(api):
    emoji_ns = "😀" * 64  # 128 UTF-16 units: allowed
    entries = [
        "not an object",  # 0
        ["array"],  # 1
        None,  # 2
        entry(5, "k", "v"),  # 3 namespace not a string
        entry(" \t\ufeff", "k", "v"),  # 4 blank after JS trim (U+FEFF is JS whitespace)
        entry("n" * 129, "k", "v"),  # 5 too long
        entry("😀" * 65, "k", "v"),  # 6 130 UTF-16 units
        entry("bad\x01ns", "k", "v"),  # 7 control char
        entry("n", None, "v"),  # 8 key not a string
        entry("n", "   ", "v"),  # 9 blank key
        entry("n", "k" * 257, "v"),  # 10 too long
        entry("n", "k\x1fk", "v"),  # 11 control char
        entry("n", "k", 42),  # 12 value not string/null
        entry("n", "k", {"a": 1}),  # 13
        entry("n", "k", "v", 0),  # 14 updatedAt
        entry("n", "k", "v", -5),  # 15
        entry("n", "k", "v", 1.5),  # 16
        entry("n", "k", "v", "123"),  # 17
        {"namespace": "n", "key": "k", "value": "v"},  # 18 missing updatedAt
        entry("n", "k", "v", version=0),  # 19 version
        entry("n", "k", "v", version="7"),  # 20
        entry("n", "k", "v", builtAt=2.5),  # 21 builtAt alias
        entry("n", "k", "v", version=None, builtAt=-1),  # 22 JS ``??``: null version falls through to builtAt
        entry(7, 8, 9),  # 23 first failing check wins; neither namespace nor key echoed
        entry(emoji_ns, "k" * 256, "ok"),  # 24 valid at both limits
        entry("n", "k", "v", True),  # 25 booleans are not numbers
    ]
    resp = api.put_client_state(entries)
    assert resp.status == 200, resp.text
    data = resp.data
    assert (data["upserted"], data["skipped"]) == (1, 0)
    by_index = {r["index"]: r for r in data["rejected"]}
    expected = {
        0: "INVALID_STATE_ENTRY", 1: "INVALID_STATE_ENTRY", 2: "INVALID_STATE_ENTRY",
        3: "INVALID_STATE_NAMESPACE", 4: "INVALID_STATE_NAMESPACE", 5: "INVALID_STATE_NAMESPACE",
        6: "INVALID_STATE_NAMESPACE", 7: "INVALID_STATE_NAMESPACE",
        8: "INVALID_STATE_KEY", 9: "INVALID_STATE_KEY", 10: "INVALID_STATE_KEY", 11: "INVALID_STATE_KEY",
        12: "INVALID_STATE_VALUE", 13: "INVALID_STATE_VALUE",
        14: "INVALID_STATE_UPDATED_AT", 15: "INVALID_STATE_UPDATED_AT", 16: "INVALID_STATE_UPDATED_AT",
        17: "INVALID_STATE_UPDATED_AT", 18: "INVALID_STATE_UPDATED_AT",
        19: "INVALID_STATE_VERSION", 20: "INVALID_STATE_VERSION", 21: "INVALID_STATE_VERSION",
        22: "INVALID_STATE_VERSION", 23: "INVALID_STATE_NAMESPACE", 25: "INVALID_STATE_UPDATED_AT",
    }  # fmt: skip
    assert {i: r["code"] for i, r in by_index.items()} == expected
    assert [r["index"] for r in data["rejected"]] == sorted(expected)  # in request order
    assert by_index[0] == {"index": 0, "code": "INVALID_STATE_ENTRY", "message": "entries[0] 必须是对象"}
    assert "namespace" not in by_index[3] and by_index[3]["key"] == "k"
    assert by_index[8]["namespace"] == "n" and "key" not in by_index[8]
    assert by_index[23].keys() == {"index", "code", "message"}
    assert by_index[12] == {
        "index": 12, "code": "INVALID_STATE_VALUE", "message": by_index[12]["message"], "namespace": "n", "key": "k"
    }  # fmt: skip
    assert values_of(api, emoji_ns) == {"k" * 256: ("ok", OLD)}


def test_state_value_too_large_reports_bytes(api, monkeypatch):
    """The 5 MiB limit cannot be reached through a ≤ 4 MB body, so the limit is lowered to show the shape."""
    import amsg.api.client_state as route

    monkeypatch.setattr(route, "DEFAULT_MAX_STATE_VALUE_BYTES", 10)
    resp = api.put_client_state([entry("n", "small", "é" * 5), entry("n", "big", "é" * 6), entry("n", "gone", None)])
    assert resp.data["upserted"] == 1 and resp.data["deleted"] == 1
    assert resp.data["rejected"] == [
        {
            "index": 1,
            "code": "STATE_VALUE_TOO_LARGE",
            "message": "entries[1].value 超过单条总上限",
            "bytes": 12,
            "maxBytes": 10,
            "namespace": "n",
            "key": "big",
        }
    ]


def test_value_limit_is_five_mib_of_utf8():
    from amsg.domain.client_state import StateEntry, validate_entry

    assert isinstance(validate_entry(entry("n", "k", "a" * 5_242_880), 0), StateEntry)
    over = validate_entry(entry("n", "k", "a" * 5_242_879 + "é"), 3)
    assert over["code"] == "STATE_VALUE_TOO_LARGE" and over["bytes"] == 5_242_880 + 1 and over["maxBytes"] == 5_242_880


# ---- last-write-wins -----------------------------------------------------------------------------------------


def test_older_write_is_skipped_and_reported(api):
    assert api.put_client_state([entry("n", "k", "new", OLD)]).data == {"upserted": 1, "skipped": 0}
    resp = api.put_client_state([entry("n", "k", "stale", OLD - 1), entry("n", "other", "x", OLD - 1)])
    assert resp.data == {"upserted": 1, "skipped": 1, "skippedEntries": [{"namespace": "n", "key": "k"}]}
    assert values_of(api, "n")["k"] == ("new", OLD)


def test_equal_guard_overwrites_and_newer_wins(api):
    api.put_client_state([entry("n", "k", "first", OLD)])
    assert api.put_client_state([entry("n", "k", "second", OLD)]).data == {"upserted": 1, "skipped": 0}
    assert values_of(api, "n")["k"] == ("second", OLD)
    api.put_client_state([entry("n", "k", "third", OLD + 1)])
    assert values_of(api, "n")["k"] == ("third", OLD + 1)


def test_guard_is_clamped_to_server_now(api, ctx):
    future = T0_MS + DAY
    api.put_client_state([entry("n", "k", "skewed clock", future)])
    assert values_of(api, "n")["k"] == ("skewed clock", T0_MS)  # stored guard = min(guard, now)
    assert api.put_client_state([entry("n", "k", "older", T0_MS - 1)]).data["skipped"] == 1
    assert api.put_client_state([entry("n", "k", "same now", T0_MS)]).data["upserted"] == 1


def test_rows_from_the_future_are_overwritable(api, ctx):
    api.put_client_state([entry("n", "k", "written at T0", T0_MS)])
    ctx.clock.advance(-10 * 60_000)  # the server clock went back: the stored row is now "from the future"
    resp = api.put_client_state([entry("n", "k", "much older", T0_MS - DAY)])
    assert resp.data == {"upserted": 1, "skipped": 0}
    assert values_of(api, "n")["k"] == ("much older", T0_MS - DAY)
    # and a future row can be deleted by an older delete too
    ctx.clock.advance(10 * 60_000)
    api.put_client_state([entry("n", "k", "again", T0_MS)])
    ctx.clock.advance(-1)
    assert api.put_client_state([entry("n", "k", None, 1)]).data == {"upserted": 0, "skipped": 0, "deleted": 1}
    assert values_of(api, "n") == {}


def test_version_guard_beats_updated_at(api):
    api.put_client_state([entry("n", "k", "v5000", OLD - 5, version=5000)])
    assert values_of(api, "n")["k"] == ("v5000", 5000)
    # newer updatedAt but older version: skipped (content age wins over request order)
    resp = api.put_client_state([entry("n", "k", "v4000", OLD, version=4000)])
    assert resp.data["skippedEntries"] == [{"namespace": "n", "key": "k"}]
    resp = api.put_client_state([entry("n", "k", "built6000", OLD, builtAt=6000)])
    assert resp.data == {"upserted": 1, "skipped": 0}
    assert values_of(api, "n")["k"] == ("built6000", 6000)
    # version wins over builtAt when both are given (``version ?? builtAt``)
    api.put_client_state([entry("n", "k", "both", OLD, version=7000, builtAt=1)])
    assert values_of(api, "n")["k"] == ("both", 7000)
    # without a version the plain updatedAt is compared against the stored guard (7000 here)
    assert api.put_client_state([entry("n", "k", "plain", OLD)]).data["upserted"] == 1


def test_value_null_deletes(api):
    api.put_client_state([entry("n", "a", "1"), entry("n", "b", "2")])
    resp = api.put_client_state([entry("n", "a", None, OLD), entry("n", "absent", None, OLD)])
    assert resp.data == {"upserted": 0, "skipped": 0, "deleted": 2}  # deleting an absent key counts as deleted
    assert values_of(api, "n") == {"b": ("2", OLD)}
    blocked = api.put_client_state([entry("n", "b", None, OLD - 1)])
    assert blocked.data == {"upserted": 0, "skipped": 1, "skippedEntries": [{"namespace": "n", "key": "b"}]}
    assert values_of(api, "n") == {"b": ("2", OLD)}
    # after a delete the key is absent: any guard may write it again
    api.put_client_state([entry("n", "b", None, OLD)])
    assert api.put_client_state([entry("n", "b", "back", 1)]).data["upserted"] == 1


def test_same_key_twice_in_one_request_applies_in_order(api):
    resp = api.put_client_state([entry("n", "k", "first", OLD), entry("n", "k", "second", OLD + 1)])
    assert resp.data == {"upserted": 2, "skipped": 0}
    assert values_of(api, "n")["k"] == ("second", OLD + 1)
    resp = api.put_client_state([entry("n", "k", "newest", OLD + 5), entry("n", "k", "late", OLD + 2)])
    assert resp.data == {"upserted": 1, "skipped": 1, "skippedEntries": [{"namespace": "n", "key": "k"}]}
    assert values_of(api, "n")["k"] == ("newest", OLD + 5)


@ADAPTER
def test_concurrent_newer_write_between_read_and_commit_is_never_lost(api, ctx, monkeypatch):
    """Force the race deterministically: after our read, another writer commits a newer value. Our conditional
    write fails, the part is re-read and re-decided, and the newer value survives."""
    from amsg.crypto import UserCodec
    from amsg.domain.client_state import StateEntry, write_entries

    store = ctx.client_state
    api.put_client_state([entry("n", "k", "base", OLD)])
    real_read = store._read_roots
    calls = []

    def racing_read(pk, sks):
        found = real_read(pk, sks)
        if not calls:
            calls.append(1)
            newer = StateEntry(0, "n", "k", "concurrent newer", OLD + 100)
            write_entries(store, api.user_id, UserCodec(api.user_key), [newer], ctx.now_ms())
        return found

    monkeypatch.setattr(store, "_read_roots", racing_read)
    resp = api.put_client_state([entry("n", "k", "ours, older", OLD + 50)])
    assert resp.data == {"upserted": 0, "skipped": 1, "skippedEntries": [{"namespace": "n", "key": "k"}]}
    assert values_of(api, "n")["k"] == ("concurrent newer", OLD + 100)


# ---- large values --------------------------------------------------------------------------------------------


def test_300kb_value_round_trips_byte_exact(api, on_table):
    value = ('🐱 mixed ascii and 多字节 text \\ " \n' * 20_000)[:240_000]
    assert len(value.encode("utf-8")) > 204_800  # chunked by the reference, split across items here
    resp = api.put_client_state([entry("big", "k", value), entry("big", "small", "s")], compact=True)
    assert resp.data == {"upserted": 2, "skipped": 0}
    assert values_of(api, "big")["k"] == (value, OLD)
    assert not on_table or table_items("SC#big\x1fk\x1f"), "value stored as parts"


def test_largest_single_request_value_round_trips_and_one_byte_more_is_413(api, on_table):
    value = "".join(chr(0x21 + (i * 7919) % 90) for i in range(MAX_VALUE_ONE_REQUEST)).replace('"', "#")
    value = value.replace("\\", "/")  # keep JSON escaping out of the size arithmetic
    resp = api.put_client_state([entry("n", "k", value)], compact=True)
    assert resp.status == 200, resp.text[:300]
    assert resp.data == {"upserted": 1, "skipped": 0}
    got = api.get_client_state("n")
    assert got.data["entries"][0]["value"] == value
    if on_table:
        parts = table_items("SC#n\x1fk\x1f")
        assert len(parts) == math.ceil((2 * MAX_VALUE_ONE_REQUEST + 66) / 350_000)

    too_big = api.put_client_state([entry("n", "k", value + "x")], compact=True)
    assert (too_big.status, too_big.code) == (413, "REQUEST_BODY_TOO_LARGE")
    assert too_big.body["error"]["details"] == {"maxBytes": 4_000_000}

    # overwrite with a small value: the old parts go; deleting leaves nothing behind
    api.put_client_state([entry("n", "k", "tiny", OLD + 1)])
    assert not on_table or table_items("SC#") == []
    assert values_of(api, "n")["k"] == ("tiny", OLD + 1)


def test_gzip_request_carries_a_larger_value(api, on_table):
    value = "g" * 3_900_000
    resp = api.put_client_state([entry("gz", "k", value)], compact=True, gzip_body=True)
    assert resp.status == 200, resp.text[:300]
    assert values_of(api, "gz")["k"][0] == value
    api.put_client_state([entry("gz", "k", None, OLD)])
    assert not on_table or table_items("SC#") == []


@ITEMS
def test_incomplete_parts_read_as_absent(api, ctx):
    api.put_client_state([entry("n", "big", "x" * 400_000), entry("n", "small", "s")])
    part = table_items("SC#n\x1fbig\x1f")[0]
    moto_table_resource(TABLE).delete_item(Key={"PK": part["PK"], "SK": part["SK"]})
    assert values_of(api, "n") == {"small": ("s", OLD)}


def test_response_over_lambda_limit_is_413(api):
    value = "r" * 2_500_000
    api.put_client_state([entry("huge", "a", value)], compact=True)
    api.put_client_state([entry("huge", "b", value)], compact=True)
    resp = api.get_client_state("huge")
    assert (resp.status, resp.code) == (413, "RESPONSE_TOO_LARGE")


# ---- namespaces ---------------------------------------------------------------------------------------------


def test_namespaces_fold_chunks_count_reference_bytes_and_sort(api):
    big = "b" * 300_000
    api.put_client_state([entry("notes", "k", "yy", 10)])
    api.put_client_state([entry("amsg:char:a", "k1", "abcd", 100), entry("amsg:char:a", "big", big, 300)])
    api.put_client_state([entry("amsg:char:b", "k1", "x", 50)])
    resp = api.client_state_namespaces()
    assert resp.status == 200 and resp.body["encrypted"] is True
    assert "amsg:char" not in resp.text
    a_bytes = ref_bytes(4) + ref_bytes(300_000)
    assert resp.data == {
        "namespaces": [
            {"namespace": "amsg:char:a", "entryCount": 2, "byteSize": a_bytes, "updatedAt": 300},
            {"namespace": "amsg:char:b", "entryCount": 1, "byteSize": ref_bytes(1), "updatedAt": 50},
            {"namespace": "notes", "entryCount": 1, "byteSize": ref_bytes(2), "updatedAt": 10},
        ],
        "truncated": False,
        "limit": 200,
    }  # fmt: skip
    assert ref_bytes(300_000) == 18 + 600_000 + 132


def test_namespaces_limit_and_truncated(api):
    api.put_client_state([entry(f"ns-{i}", "k", "v") for i in range(5)])
    over = api.client_state_namespaces(limit=3).data
    assert [n["namespace"] for n in over["namespaces"]] == ["ns-0", "ns-1", "ns-2"]
    assert (over["truncated"], over["limit"]) == (True, 3)
    exact = api.client_state_namespaces(limit=5).data
    assert (len(exact["namespaces"]), exact["truncated"]) == (5, False)
    assert api.client_state_namespaces(limit="99999").data["limit"] == 200
    assert api.get_encrypted("/client-state/namespaces?limit=").data["limit"] == 200
    for bad in ["0", "-1", "abc", "1.5", " 3", "+3", "1e2"]:
        resp = api.client_state_namespaces(limit=bad)
        assert (resp.status, resp.code) == (400, "INVALID_NAMESPACE_LIMIT"), bad
    assert api.request("GET", "/client-state/namespaces", user=False).code == "USER_ID_REQUIRED"


def test_namespaces_empty(api):
    assert api.client_state_namespaces().data == {"namespaces": [], "truncated": False, "limit": 200}


# ---- deletes ------------------------------------------------------------------------------------------------


def test_delete_namespace_counts_reference_rows_and_keeps_other_namespaces(api, on_table):
    api.put_client_state([entry("a", "k1", "v1"), entry("a", "big", "z" * 500_000), entry("b", "k1", "keep")])
    resp = api.delete_client_state_namespace("a")
    assert resp.body == {"success": True, "data": {"deleted": 1 + (1 + 3), "namespace": "a"}}
    assert values_of(api, "a") == {}
    assert values_of(api, "b") == {"k1": ("keep", OLD)}
    assert not on_table or table_items("SC#") == []
    assert api.delete_client_state_namespace("a").data == {"deleted": 0, "namespace": "a"}


def test_delete_namespace_over_one_transaction(api):
    api.put_client_state([entry("many", f"k{i:03d}", "v") for i in range(150)])
    assert api.delete_client_state_namespace("many").data == {"deleted": 150, "namespace": "many"}
    assert values_of(api, "many") == {}


def test_delete_namespace_rejects_blank_and_reserved(api):
    for raw in ["%20", "", "%09"]:
        resp = api.request("DELETE", f"/client-state?namespace={raw}")
        assert (resp.status, resp.code) == (400, "INVALID_STATE_NAMESPACE"), raw
    resp = api.delete_client_state_namespace("\x1famsg-chunks\x1fn")
    assert (resp.status, resp.code) == (400, "INVALID_STATE_NAMESPACE")


def test_delete_all(api, on_table):
    api.put_client_state([entry("a", "k", "v"), entry("b", "k", "v"), entry("b", "big", "q" * 450_000)])
    resp = api.clear_client_state()
    assert resp.body == {"success": True, "data": {"deleted": 2 + 4}}
    assert not on_table or (table_items("S#") == [] and table_items("SC#") == [])
    assert api.clear_client_state().data == {"deleted": 0}


def test_get_requires_a_namespace(api):
    for path in ["/client-state", "/client-state?namespace=", "/client-state?namespace=%20%20"]:
        resp = api.request("GET", path)
        assert (resp.status, resp.code) == (400, "NAMESPACE_REQUIRED"), path
    resp = api.get_client_state("a\x00b")
    assert (resp.status, resp.code) == (400, "INVALID_STATE_NAMESPACE")
    assert api.request("GET", "/client-state?namespace=x", user=False).code == "USER_ID_REQUIRED"


# ---- isolation, support ---------------------------------------------------------------------------------------


def test_users_are_isolated(api):
    other = other_client()
    api.put_client_state([entry("shared", "k", "mine")])
    other.put_client_state([entry("shared", "k", "theirs", OLD - 5)])  # older guard, but a different user
    assert values_of(api, "shared") == {"k": ("mine", OLD)}
    assert values_of(other, "shared") == {"k": ("theirs", OLD - 5)}
    assert other.delete_client_state_namespace("shared").data["deleted"] == 1
    assert other.clear_client_state().data == {"deleted": 0}
    assert values_of(api, "shared") == {"k": ("mine", OLD)}
    assert [n["namespace"] for n in api.client_state_namespaces().data["namespaces"]] == ["shared"]
    assert other.client_state_namespaces().data["namespaces"] == []
