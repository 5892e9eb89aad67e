"""An in-memory ``ClientStateStore`` with the DynamoDB adapter's semantics (docs/data-model.md, client state).

One logical value per (user, namespace, key), kept whole: the adapter's split into parts and its transaction
cuts are storage layout, invisible through the port while nothing fails. What the port shows is modelled: the
reference's last-write-wins rule (a guard ≥ the stored one wins, and a stored guard "from the future" loses to
anything), entries of one request applied in order, a delete of an absent key counting as deleted, the
reference-equivalent row and byte accounting, namespaces too long to address, and the TTL sweep's per-call key
budget. Owner guards and the claim fence commit with other stores in one transaction; they are not faked and
raise :class:`NotFaked`, so such a test stays on moto or DynamoDB Local.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from amsg.domain.client_state import DAY_MS, reference_footprint
from amsg.ports import NamespaceListing, NamespaceStats, OwnerClaim, StateRow, StateWrite, StateWriteResult

from tests.support.fakes.memory import NotFaked

MAX_NAMESPACE_BYTES = 4 * 128  # as the adapter: a longer namespace cannot be valid, so it has no rows


@dataclass(frozen=True)
class _Stored:
    value: str
    updated_at: int
    ref_rows: int
    ref_bytes: int


def _addressable(namespace: str) -> bool:
    return len(namespace.encode("utf-8")) <= MAX_NAMESPACE_BYTES


def _ttl_cutoff(days: object, now_ms: int) -> int | None:
    """``now − days`` in ms for a usable TTL, else None (the adapter skips the namespace)."""
    if isinstance(days, bool) or not isinstance(days, int | float) or not math.isfinite(days) or days <= 0:
        return None
    before = math.ceil(now_ms - days * DAY_MS)
    return before if before > 0 else None


class MemoryClientStateStore:
    """Client state per user; one lock makes each call one atomic step, as one adapter transaction is."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, dict[tuple[str, str], _Stored]] = {}

    def _user(self, user_id: str) -> dict[tuple[str, str], _Stored]:
        return self._users.setdefault(user_id, {})

    def upsert(
        self,
        user_id: str,
        writes: list[StateWrite],
        *,
        now_ms: int,
        fence: tuple[str, int] | None = None,
        inherit: OwnerClaim | None = None,
    ) -> StateWriteResult:
        if fence is not None or inherit is not None or any(w.owner is not None for w in writes):
            raise NotFaked("client state owner guards and the claim fence commit with other stores")
        result = StateWriteResult()
        with self._lock:
            rows = self._user(user_id)
            for write in writes:
                applied = self._apply(rows, write, now_ms)
                result.outcomes.append(applied)
                if not applied:
                    result.skipped += 1
                    result.skipped_entries.append({"namespace": write.namespace, "key": write.key})
                elif write.value is None:
                    result.deleted += 1
                else:
                    result.upserted += 1
        return result

    @staticmethod
    def _apply(rows: dict[tuple[str, str], _Stored], write: StateWrite, now_ms: int) -> bool:
        name = (write.namespace, write.key)
        current = rows.get(name)
        if current is not None and not (current.updated_at <= write.guard or current.updated_at > now_ms):
            return False
        if write.value is None:
            rows.pop(name, None)
        else:
            ref_rows, ref_bytes = reference_footprint(write.plain_bytes)
            rows[name] = _Stored(write.value, write.guard, ref_rows, ref_bytes)
        return True

    def get_namespace(self, user_id: str, namespace: str) -> list[StateRow]:
        with self._lock:
            found = [(key, row) for (ns, key), row in self._user(user_id).items() if ns == namespace]
        found.sort(key=lambda pair: pair[0])  # code point order == UTF-8 byte order
        return [StateRow(namespace, key, row.value, row.updated_at) for key, row in found]

    def list_namespaces(self, user_id: str, limit: int) -> NamespaceListing:
        stats: dict[str, list[int]] = {}
        with self._lock:
            for (ns, _key), row in self._user(user_id).items():
                entry = stats.setdefault(ns, [0, 0, 0])
                entry[0] += 1
                entry[1] += row.ref_bytes
                entry[2] = max(entry[2], row.updated_at)
        ordered = sorted(stats)
        return NamespaceListing(
            namespaces=[NamespaceStats(ns, *stats[ns]) for ns in ordered[:limit]],
            truncated=len(ordered) > limit,
        )

    def delete_all(self, user_id: str) -> int:
        with self._lock:
            return sum(row.ref_rows for row in self._users.pop(user_id, {}).values())

    def delete_namespace(self, user_id: str, namespace: str) -> int:
        if not _addressable(namespace):
            return 0
        with self._lock:
            rows = self._user(user_id)
            doomed = [name for name in rows if name[0] == namespace]
            return sum(rows.pop(name).ref_rows for name in doomed)

    def cleanup_expired(self, ttl_days: Mapping[str, float], now_ms: int, *, limit: int = 100) -> int:
        """Oldest first per namespace (the retention index's order), at most ``limit`` keys over all of them."""
        deleted = 0
        budget = limit
        with self._lock:
            for namespace, days in ttl_days.items():
                before = _ttl_cutoff(days, now_ms)
                if budget <= 0:
                    break
                if before is None or not _addressable(namespace):
                    continue
                expired = sorted(
                    (row.updated_at, user_id, key)
                    for user_id, rows in self._users.items()
                    for (ns, key), row in rows.items()
                    if ns == namespace and row.updated_at < before
                )
                for _at, user_id, key in expired[:budget]:
                    budget -= 1
                    deleted += self._users[user_id].pop((namespace, key)).ref_rows
        return deleted
