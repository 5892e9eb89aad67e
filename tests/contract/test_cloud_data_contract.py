"""The owner store's and the cloud-data management records' contract on the in-memory fakes, on moto and on
DynamoDB Local (docs/data-model.md): owner generations, records with a TTL, a cleanup operation's lease and its
place in the work index, a retirement committed with the operation's leased write."""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest
from amsg.errors import LeaseLost, OwnerChanged
from amsg.ports import LeasedWrite

from tests.contract.conftest import BACKENDS

U, V = "user-1", "user-2"
T = 1_893_369_600_000  # ms, whole seconds (TTLs are stored in seconds)
REF_A, REF_B = "a" * 64, "b" * 64


@pytest.fixture(params=BACKENDS)
def cloud(request: pytest.FixtureRequest) -> Iterator[types.SimpleNamespace]:
    """``owners`` and ``records`` (the CloudDataStore) on one backend."""
    if request.param == "memory":
        from tests.support.fakes.cloud_data import MemoryCloudDataStore, MemoryOwnerStore

        owners = MemoryOwnerStore()
        yield types.SimpleNamespace(owners=owners, records=MemoryCloudDataStore(owners))
        return
    from amsg.adapters.dynamo.cloud_data import DynamoCloudDataStore
    from amsg.adapters.dynamo.owners import DynamoOwnerStore
    from amsg.adapters.dynamo.table import DynamoTable

    if request.param == "moto":
        table = DynamoTable(request.getfixturevalue("moto_table"))
    else:
        table = DynamoTable(
            request.getfixturevalue("ddb_local_table"), endpoint_url=request.getfixturevalue("ddb_local_endpoint")
        )
    yield types.SimpleNamespace(owners=DynamoOwnerStore(table), records=DynamoCloudDataStore(table))


def leased(record_id: str, token: str, now_ms: int, **changes: object) -> LeasedWrite:
    fields: dict[str, object] = {"kind": "operation", "record_id": record_id, "data": "d", "token": token}
    fields.update({"now_ms": now_ms, "lease_ms": 60_000})
    fields.update(changes)
    return LeasedWrite(**fields)  # type: ignore[arg-type]


# ---- owners ------------------------------------------------------------------------------------------------


def test_an_owner_starts_active_at_generation_zero_and_each_change_adds_one(cloud):
    owners = cloud.owners
    assert owners.get(U, REF_A) is None and owners.guard_holds(U, REF_A, 0) and not owners.guard_holds(U, REF_A, 1)
    retired = owners.set_active(U, REF_A, "character", "alice", active=False, expected=0, now_ms=T)
    assert (retired.active, retired.generation, retired.updated_at) == (False, 1, T)
    assert owners.get(U, REF_A) == retired
    assert not owners.guard_holds(U, REF_A, 0) and not owners.guard_holds(U, REF_A, 1)
    restored = owners.set_active(U, REF_A, "other", "name", active=True, expected=1, now_ms=T + 1)
    assert (restored.owner_type, restored.owner_id) == ("character", "alice")  # recorded once, then kept
    assert (restored.active, restored.generation) == (True, 2) and owners.guard_holds(U, REF_A, 2)
    assert owners.get(V, REF_A) is None  # per user


@pytest.mark.parametrize("expected", [0, 1, 3])
def test_a_change_from_a_generation_that_is_not_the_stored_one_is_refused(cloud, expected):
    owners = cloud.owners
    owners.set_active(U, REF_A, "character", "alice", active=False, expected=0, now_ms=T)
    owners.set_active(U, REF_A, "character", "alice", active=True, expected=1, now_ms=T)
    with pytest.raises(OwnerChanged):
        owners.set_active(U, REF_A, "character", "alice", active=False, expected=expected, now_ms=T + 5)
    assert owners.get(U, REF_A).generation == 2
    with pytest.raises(OwnerChanged):
        owners.set_active(U, REF_B, "character", "bob", active=False, expected=1, now_ms=T)  # never retired
    assert owners.get(U, REF_B) is None


def test_owners_are_listed_by_type_then_id(cloud):
    owners = cloud.owners
    for ref, kind, ident in ((REF_A, "scene", "a"), (REF_B, "character", "zed"), ("c" * 64, "character", "amy")):
        owners.set_active(U, ref, kind, ident, active=False, expected=0, now_ms=T)
    owners.set_active(V, REF_A, "character", "b", active=False, expected=0, now_ms=T)
    assert [(s.owner_type, s.owner_id) for s in owners.list(U)] == [
        ("character", "amy"),
        ("character", "zed"),
        ("scene", "a"),
    ]


# ---- records -----------------------------------------------------------------------------------------------


def test_records_round_trip_per_user_and_kind_and_list_in_id_order(cloud):
    records = cloud.records
    for record_id in ("b", "a", "c"):
        assert records.put_record(U, "plan", record_id, f"data-{record_id}", now_ms=T, ttl_s=None)
    records.put_record(U, "snapshot", "a", "other kind", now_ms=T, ttl_s=None)
    records.put_record(V, "plan", "a", "other user", now_ms=T, ttl_s=None)
    assert records.get_record(U, "plan", "a") == "data-a" and records.get_record(U, "plan", "z") is None
    assert records.list_records(U, "plan") == ["data-a", "data-b", "data-c"]
    assert records.put_record(U, "plan", "a", "replaced", now_ms=T + 1, ttl_s=None)
    records.delete_record(U, "plan", "b")
    records.delete_record(U, "plan", "never")
    assert records.list_records(U, "plan") == ["replaced", "data-c"]


def test_create_only_is_first_writer_wins_and_an_expired_record_counts_as_absent(cloud):
    records = cloud.records
    assert records.put_record(U, "plan", "p", "first", now_ms=T, ttl_s=10, create_only=True)
    assert not records.put_record(U, "plan", "p", "second", now_ms=T + 9_000, ttl_s=10, create_only=True)
    assert records.get_record(U, "plan", "p", now_ms=T + 9_999) == "first"
    # past its TTL: absent to readers given the time, present (until TTL removes it) to those not given it
    assert records.get_record(U, "plan", "p", now_ms=T + 10_000) is None
    assert records.list_records(U, "plan", now_ms=T + 10_000) == []
    assert records.get_record(U, "plan", "p") == "first" and records.list_records(U, "plan") == ["first"]
    assert records.put_record(U, "plan", "p", "third", now_ms=T + 10_000, ttl_s=None, create_only=True)
    assert not records.put_record(U, "plan", "p", "fourth", now_ms=T + 10**9, ttl_s=None, create_only=True)
    assert records.get_record(U, "plan", "p", now_ms=T + 10**9) == "third"  # no TTL: never expires


def test_set_record_ttl_starts_the_expiry_of_an_existing_record_only(cloud):
    records = cloud.records
    records.put_record(U, "plan", "p", "data", now_ms=T, ttl_s=None)
    records.set_record_ttl(U, "plan", "p", now_ms=T + 1_000, ttl_s=5)
    assert records.get_record(U, "plan", "p", now_ms=T + 5_999) == "data"
    assert records.get_record(U, "plan", "p", now_ms=T + 6_000) is None
    records.set_record_ttl(U, "plan", "gone", now_ms=T, ttl_s=5)  # nothing created
    assert records.get_record(U, "plan", "gone") is None and records.list_records(U, "plan") == ["data"]


# ---- leases and the work index ------------------------------------------------------------------------------


def test_a_lease_is_taken_once_until_it_expires_and_only_its_holder_writes(cloud):
    records = cloud.records
    assert not records.claim_record(U, "operation", "op", "w1", now_ms=T, lease_ms=1_000)  # no record
    records.put_record(U, "operation", "op", "start", now_ms=T, ttl_s=None, work_at=T)
    assert records.claim_record(U, "operation", "op", "w1", now_ms=T, lease_ms=1_000)
    assert not records.claim_record(U, "operation", "op", "w2", now_ms=T + 999, lease_ms=1_000)
    records.save_leased(U, leased("op", "w1", T + 500, data="step 1"))  # renews to T + 60,500
    with pytest.raises(LeaseLost):
        records.save_leased(U, leased("op", "w2", T + 600, data="intruder"))
    assert records.get_record(U, "operation", "op") == "step 1"
    assert not records.claim_record(U, "operation", "op", "w2", now_ms=T + 60_499, lease_ms=1_000)
    assert records.claim_record(U, "operation", "op", "w2", now_ms=T + 60_500, lease_ms=1_000)
    with pytest.raises(LeaseLost):
        records.save_leased(U, leased("op", "w1", T + 60_600, data="late"))
    with pytest.raises(LeaseLost):  # the holder's own lease, once expired
        records.save_leased(U, leased("op", "w2", T + 61_500, data="expired"))
    with pytest.raises(LeaseLost):
        records.save_leased(U, leased("nothing", "w2", T, data="x"))
    assert records.get_record(U, "operation", "op") == "step 1"


def test_the_work_index_holds_operations_with_work_left_earliest_first(cloud):
    records = cloud.records
    records.put_record(U, "operation", "late", "l", now_ms=T, ttl_s=None, work_at=T + 3_000)
    records.put_record(V, "operation", "early", "e", now_ms=T, ttl_s=None, work_at=T + 1_000)
    records.put_record(U, "operation", "idle", "i", now_ms=T, ttl_s=None)  # no work_at: not in the index
    records.put_record(U, "plan", "plan", "p", now_ms=T, ttl_s=None, work_at=T)  # not a work kind
    assert records.due_records("operation", T + 999, 10) == []
    assert records.due_records("operation", T + 5_000, 10) == [(V, "early"), (U, "late")]
    assert records.due_records("operation", T + 5_000, 1) == [(V, "early")]
    assert records.due_records("plan", T + 5_000, 10) == []
    # a claim moves the operation to its lease's end: a dead worker's operation becomes due again by itself
    assert records.claim_record(V, "operation", "early", "w", now_ms=T + 1_000, lease_ms=10_000)
    assert records.due_records("operation", T + 5_000, 10) == [(U, "late")]
    assert records.due_records("operation", T + 11_000, 10) == [(U, "late"), (V, "early")]
    # a renewal moves it again; a release makes it due at its next attempt, or never when it is finished
    records.save_leased(V, leased("early", "w", T + 2_000, lease_ms=20_000))
    assert records.due_records("operation", T + 21_999, 10) == [(U, "late")]
    records.save_leased(V, leased("early", "w", T + 2_000, release=True, work_at=T + 2_500))
    assert records.due_records("operation", T + 2_500, 10) == [(V, "early")]
    assert records.claim_record(V, "operation", "early", "w2", now_ms=T + 2_500, lease_ms=1_000)  # released
    records.save_leased(V, leased("early", "w2", T + 2_600, release=True, work_at=None, ttl_s=60))
    assert records.due_records("operation", T + 10**9, 10) == [(U, "late")]
    assert records.get_record(V, "operation", "early", now_ms=T + 62_600) is None  # the finished one expires
    # a claim of a finished operation leaves it out of the index
    assert records.claim_record(U, "operation", "idle", "w", now_ms=T, lease_ms=1_000)
    assert records.due_records("operation", T + 10**9, 10) == [(U, "late")]


def test_a_leased_write_removes_the_ttl_unless_it_names_one(cloud):
    records = cloud.records
    records.put_record(U, "operation", "op", "start", now_ms=T, ttl_s=5, work_at=T)
    assert records.claim_record(U, "operation", "op", "w", now_ms=T, lease_ms=60_000)
    records.save_leased(U, leased("op", "w", T + 1_000, data="kept"))
    assert records.get_record(U, "operation", "op", now_ms=T + 10**6) == "kept"


def test_a_retirement_commits_with_the_leased_write_or_not_at_all(cloud):
    owners, records = cloud.owners, cloud.records
    records.put_record(U, "operation", "op", "start", now_ms=T, ttl_s=None, work_at=T)
    assert records.claim_record(U, "operation", "op", "w", now_ms=T, lease_ms=60_000)
    with pytest.raises(OwnerChanged):
        records.retire_owner_leased(
            U, REF_A, "character", "alice", expected=1, now_ms=T + 1, write=leased("op", "w", T + 1, data="x")
        )
    assert owners.get(U, REF_A) is None and records.get_record(U, "operation", "op") == "start"
    with pytest.raises(LeaseLost):  # both fail: the lease is what the caller hears about
        records.retire_owner_leased(
            U, REF_A, "character", "alice", expected=1, now_ms=T + 1, write=leased("op", "w2", T + 1, data="x")
        )
    with pytest.raises(LeaseLost):
        records.retire_owner_leased(
            U, REF_A, "character", "alice", expected=0, now_ms=T + 1, write=leased("op", "w2", T + 1, data="x")
        )
    assert owners.get(U, REF_A) is None
    generation = records.retire_owner_leased(
        U, REF_A, "character", "alice", expected=0, now_ms=T + 2, write=leased("op", "w", T + 2, data="retired")
    )
    state = owners.get(U, REF_A)
    assert generation == 1 and (state.active, state.generation, state.updated_at) == (False, 1, T + 2)
    assert records.get_record(U, "operation", "op") == "retired"


def test_a_leased_record_must_fit_one_item(cloud):
    records = cloud.records
    records.put_record(U, "operation", "op", "start", now_ms=T, ttl_s=None)
    assert records.claim_record(U, "operation", "op", "w", now_ms=T, lease_ms=60_000)
    with pytest.raises(ValueError):
        records.save_leased(U, leased("op", "w", T + 1, data="x" * 350_001))
    records.save_leased(U, leased("op", "w", T + 1, data="x" * 350_000))
