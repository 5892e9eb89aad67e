"""In-memory ``OwnerStore`` and the management-record half of ``CloudDataStore``, with the DynamoDB adapter's
semantics (see docs/data-model.md): owner items whose generation counts retirements and restores, records with a
TTL that readers given ``now_ms`` treat as expired, a cleanup operation's lease and its place in the work index.

One lock for both (a leased owner retirement is one transaction in the adapter). Not modelled: the inventory
(``list_resources``, ``delete_resource``: they read every other store and condition deletes on each item's write
counter) and the owner guards of ordinary writes; both raise :class:`NotFaked`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from amsg.errors import LeaseLost, OwnerChanged
from amsg.ports import LeasedWrite, OwnerState, ResourceListing, StoredResource, guard_holds_for, owners_in_order

from tests.support.fakes.memory import NotFaked

# records kinds with a place in the work index (the adapter's WORK_KINDS)
WORK_KINDS = frozenset({"operation"})
# a leased record is written in one transaction action, so it must fit one item (the adapter's INLINE_CHARS)
LEASED_MAX_CHARS = 350_000

# ---- time: the only places that read a time value ---------------------------------------------------------


def _expiry_s(now_ms: int, ttl_s: int | None) -> int | None:
    """The TTL attribute (epoch seconds) a write with ``ttl_s`` stores."""
    return None if ttl_s is None else now_ms // 1000 + ttl_s


def _live(ttl: int | None, now_ms: int | None) -> bool:
    """Readers given ``now_ms`` treat a record past its TTL as absent (DynamoDB's TTL deletion lags)."""
    return now_ms is None or ttl is None or ttl > now_ms // 1000


# ----------------------------------------------------------------------------------------------------------


class MemoryOwnerStore:
    """Owner items per (user, ref): absent means active at generation 0; each retire or restore adds one."""

    def __init__(self, lock: threading.RLock | None = None) -> None:
        self._lock = lock or threading.RLock()
        self._owners: dict[tuple[str, str], OwnerState] = {}

    def get(self, user_id: str, ref: str) -> OwnerState | None:
        with self._lock:
            return self._owners.get((user_id, ref))

    def list(self, user_id: str) -> list[OwnerState]:
        with self._lock:
            return owners_in_order([state for (user, _), state in self._owners.items() if user == user_id])

    def guard_holds(self, user_id: str, ref: str, generation: int) -> bool:
        return guard_holds_for(self.get(user_id, ref), generation)

    def set_active(
        self, user_id: str, ref: str, owner_type: str, owner_id: str, *, active: bool, expected: int, now_ms: int
    ) -> OwnerState:
        with self._lock:
            self._check_expected(user_id, ref, expected)
            return self._bump(user_id, ref, owner_type, owner_id, active=active, now_ms=now_ms)

    def _check_expected(self, user_id: str, ref: str, expected: int) -> None:
        """The adapter's condition: no item at ``expected`` 0, else the item's generation is ``expected``."""
        state = self._owners.get((user_id, ref))
        if (state is None and expected != 0) or (state is not None and (expected == 0 or state.generation != expected)):
            raise OwnerChanged(ref)

    def _bump(self, user_id: str, ref: str, owner_type: str, owner_id: str, *, active: bool, now_ms: int) -> OwnerState:
        """Set ``active`` and add one to the generation; type and id are kept once recorded."""
        old = self._owners.get((user_id, ref))
        state = OwnerState(
            owner_type=old.owner_type if old else owner_type,
            owner_id=old.owner_id if old else owner_id,
            active=active,
            generation=(old.generation if old else 0) + 1,
            updated_at=now_ms,
        )
        self._owners[(user_id, ref)] = state
        return state


@dataclass(frozen=True)
class _Record:
    data: str
    updated_at: int
    ttl: int | None = None  # epoch seconds, as the adapter's TTL attribute
    lease_token: str | None = None
    lease_until: int | None = None
    in_work_index: bool = False  # the adapter's work_pk: set while the operation has work left
    work_at: int | None = None  # the adapter's work_sk (ms); the record is due once both are set


class MemoryCloudDataStore:
    """Management records per (user, kind, id) and the work index of cleanup operations, under the owners' lock
    (a leased retirement changes both in one step)."""

    def __init__(self, owners: MemoryOwnerStore) -> None:
        self._owners = owners
        self._lock = owners._lock
        self._records: dict[tuple[str, str, str], _Record] = {}

    # ---- the inventory: not faked -------------------------------------------------------------------------

    def list_resources(self, user_id: str) -> ResourceListing:
        raise NotFaked("the cloud-data inventory reads every store's items: use the moto `ctx` fixture")

    def delete_resource(self, user_id: str, resource: StoredResource, progress: LeasedWrite | None = None) -> bool:
        raise NotFaked("a resource delete is conditioned on its items' write counters: use the moto `ctx` fixture")

    # ---- management records -------------------------------------------------------------------------------

    def put_record(
        self,
        user_id: str,
        kind: str,
        record_id: str,
        data: str,
        *,
        now_ms: int,
        ttl_s: int | None,
        create_only: bool = False,
        work_at: int | None = None,
    ) -> bool:
        key = (user_id, kind, record_id)
        with self._lock:
            old = self._records.get(key)
            if create_only and old is not None and (old.ttl is None or old.ttl > now_ms // 1000):
                return False  # an expired record (not yet removed by TTL) counts as absent
            indexed = work_at is not None and kind in WORK_KINDS
            self._records[key] = _Record(
                data=data,
                updated_at=now_ms,
                ttl=_expiry_s(now_ms, ttl_s),
                in_work_index=indexed,
                work_at=max(0, work_at) if indexed and work_at is not None else None,
            )
        return True

    def set_record_ttl(self, user_id: str, kind: str, record_id: str, *, now_ms: int, ttl_s: int) -> None:
        key = (user_id, kind, record_id)
        with self._lock:
            if key in self._records:
                self._records[key] = replace(self._records[key], ttl=_expiry_s(now_ms, ttl_s))

    def delete_record(self, user_id: str, kind: str, record_id: str) -> None:
        with self._lock:
            self._records.pop((user_id, kind, record_id), None)

    def get_record(self, user_id: str, kind: str, record_id: str, *, now_ms: int | None = None) -> str | None:
        with self._lock:
            record = self._records.get((user_id, kind, record_id))
        return record.data if record is not None and _live(record.ttl, now_ms) else None

    def list_records(self, user_id: str, kind: str, *, now_ms: int | None = None) -> list[str]:
        """In the adapter's sort-key order (the record ids' UTF-8 bytes)."""
        with self._lock:
            found = [
                (record_id, record)
                for (user, k, record_id), record in self._records.items()
                if user == user_id and k == kind and _live(record.ttl, now_ms)
            ]
        found.sort(key=lambda pair: pair[0].encode("utf-8", "surrogatepass"))
        return [record.data for _, record in found if record.data]

    # ---- leases and the work index ------------------------------------------------------------------------

    def claim_record(self, user_id: str, kind: str, record_id: str, token: str, *, now_ms: int, lease_ms: int) -> bool:
        key = (user_id, kind, record_id)
        with self._lock:
            record = self._records.get(key)
            if record is None or (record.lease_until is not None and record.lease_until > now_ms):
                return False
            until = now_ms + lease_ms
            work_at = until if kind in WORK_KINDS else record.work_at
            self._records[key] = replace(record, lease_token=token, lease_until=until, work_at=work_at)
        return True

    def save_leased(self, user_id: str, write: LeasedWrite) -> None:
        with self._lock:
            self._records[self._leased_key(user_id, write)] = self._leased(user_id, write)

    def retire_owner_leased(
        self, user_id: str, ref: str, owner_type: str, owner_id: str, *, expected: int, now_ms: int, write: LeasedWrite
    ) -> int:
        with self._lock:
            updated = self._leased(user_id, write)  # LeaseLost first, as the adapter reports a double failure
            self._owners._check_expected(user_id, ref, expected)
            self._owners._bump(user_id, ref, owner_type, owner_id, active=False, now_ms=now_ms)
            self._records[self._leased_key(user_id, write)] = updated
        return expected + 1

    def due_records(self, kind: str, now_ms: int, limit: int) -> list[tuple[str, str]]:
        """Earliest first; records due at the same time in (user, id) order."""
        with self._lock:
            due = [
                (record.work_at, user, record_id)
                for (user, k, record_id), record in self._records.items()
                if k == kind and record.in_work_index and record.work_at is not None and record.work_at <= now_ms
            ]
        return [(user, record_id) for _, user, record_id in sorted(due)[:limit]]

    @staticmethod
    def _leased_key(user_id: str, write: LeasedWrite) -> tuple[str, str, str]:
        return (user_id, write.kind, write.record_id)

    def _leased(self, user_id: str, write: LeasedWrite) -> _Record:
        """The record after ``write``, iff ``write.token`` holds an unexpired lease on it (else LeaseLost)."""
        if len(write.data) > LEASED_MAX_CHARS:
            raise ValueError("a leased record must fit in one item")
        record = self._records.get(self._leased_key(user_id, write))
        held = record is not None and record.lease_token == write.token
        if record is None or not held or record.lease_until is None or record.lease_until <= write.now_ms:
            raise LeaseLost(write.record_id)
        if write.release:
            token, until, eligible = None, None, write.work_at
        else:
            token, until = record.lease_token, write.now_ms + write.lease_ms
            eligible = until
        indexed, work_at = record.in_work_index, record.work_at
        if write.kind in WORK_KINDS:
            indexed, work_at = eligible is not None, (max(0, eligible) if eligible is not None else None)
        return replace(
            record,
            data=write.data,
            updated_at=write.now_ms,
            lease_token=token,
            lease_until=until,
            in_work_index=indexed,
            work_at=work_at,
            ttl=_expiry_s(write.now_ms, write.ttl_s),
        )
