"""In-memory stores with the DynamoDB adapter's semantics (see docs/data-model.md), one lock per store.

What is faked is what the contract suite in ``tests/contract/`` checks. The outbox's fenced ``claim_send`` (and
the cap counters it charges) needs the tasks under the same lock: it is in ``claims.py``; here it raises
:class:`NotFaked`. Cloud-data owner guards are not faked at all: a test that needs them fails loudly and
belongs on moto or DynamoDB Local.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from amsg.ports import (
    CapCharge,
    ClaimFence,
    CredentialWrite,
    DeliveryPolicyRow,
    OutboxAppend,
    OutboxRow,
    OwnerClaim,
    PushSubscriptionRow,
)

DAY_MS = 86_400_000
RETENTION_MS = 28 * DAY_MS  # any outbox row, after creation
ACKED_RETENTION_MS = 7 * DAY_MS  # an acked row, after the ack
MAX_CREDENTIALS_PER_UPSERT = 100  # one DynamoDB transaction


class NotFaked(NotImplementedError):
    """The in-memory fakes do not model this; run the test on moto or DynamoDB Local."""


def _distinct(ids: Iterable[str], *, non_empty: bool = False) -> list[str]:
    return list(dict.fromkeys(i for i in ids if isinstance(i, str) and (i or not non_empty)))


def _no_owner(owner: OwnerClaim | None) -> None:
    if owner is not None:
        raise NotFaked("cloud-data owner guards are not faked")


# ---- outbox ----------------------------------------------------------------------------------------------


@dataclass
class _OutboxItem:
    row: OutboxRow
    ttl_s: int  # epoch seconds, as the adapter's TTL attribute
    indexed: bool = True  # in the by-task index; else only the task's ``outbox_message_ids`` find it

    def live(self, now_ms: int | None) -> bool:
        return now_ms is None or self.ttl_s > now_ms // 1000


def _ttl_for(created_ms: int) -> int:
    return (created_ms + RETENTION_MS) // 1000


class MemoryOutboxStore:
    """The per-user outbox: ids from a per-user counter, upsert on message id, TTL-filtered reads."""

    def __init__(self, lock: threading.RLock | None = None) -> None:
        self._lock = lock or threading.RLock()  # shared with the tasks when a claim fences a write
        self._rows: dict[str, dict[str, _OutboxItem]] = {}
        self._counters: dict[str, int] = {}

    def _user(self, user_id: str) -> dict[str, _OutboxItem]:
        return self._rows.setdefault(user_id, {})

    # -- engine-facing --

    def append(self, user_id: str, rows: Sequence[OutboxAppend], *, fence: ClaimFence | None = None) -> list[int]:
        if fence is not None and type(self) is MemoryOutboxStore:
            raise NotFaked("a fenced append checks the task: FencedMemoryOutboxStore")
        merged: dict[str, OutboxAppend] = {}
        for row in rows:
            _no_owner(row.owner)
            merged[row.message_id] = row  # first position, last content
        with self._lock:
            items = self._user(user_id)
            ids = {message_id: self._upsert(user_id, items, row) for message_id, row in merged.items()}
        return [ids[row.message_id] for row in rows]

    def _upsert(self, user_id: str, items: dict[str, _OutboxItem], row: OutboxAppend) -> int:
        old = items.get(row.message_id)
        if old is None:
            row_id = self._counters.get(user_id, 0) + 1
            self._counters[user_id] = row_id
            self._insert(items, row, row_id)
            return row_id
        if old.row.acked_at is None:  # an acked row is final; otherwise the id and task columns stay
            old.row.encrypted_push = row.encrypted_push
            old.row.created_at = row.created_at
            old.row.delivered_at = None
            old.row.sending_at = None
            old.row.sending_cv = None
            old.row.unconfirmed_at = None
            old.ttl_s = _ttl_for(row.created_at)
            old.indexed = True  # the general append's upsert writes the row's index entry
        return old.row.id

    @staticmethod
    def _insert(
        items: dict[str, _OutboxItem],
        row: OutboxAppend,
        row_id: int,
        sending_at: int | None = None,
        *,
        indexed: bool = True,
    ) -> None:
        stored = OutboxRow(
            id=row_id,
            message_id=row.message_id,
            encrypted_push=row.encrypted_push,
            created_at=row.created_at,
            task_uuid=row.task_uuid,
            session_id=row.session_id,
            message_index=row.message_index,
            total_messages=row.total_messages,
            sending_at=sending_at,
        )
        items[row.message_id] = _OutboxItem(stored, _ttl_for(row.created_at), indexed)

    def claim_send(self, user_id: str, message_id: str, **_: object) -> bool:
        raise NotFaked("claim_send is fenced by the task's claim version in one transaction")

    def release_send(self, user_id: str, message_id: str, *, claim_version: int | None = None) -> None:
        with self._lock:
            item = self._user(user_id).get(message_id)
            if item is None or item.row.delivered_at is not None or item.row.unconfirmed_at is not None:
                return
            if claim_version is not None and item.row.sending_cv not in (None, claim_version):
                return  # another claim's send claim
            item.row.sending_at = None
            item.row.sending_cv = None

    def mark_unconfirmed(self, user_id: str, message_id: str, at_ms: int) -> bool:
        with self._lock:
            item = self._user(user_id).get(message_id)
            if item is None or item.row.sending_at is None or item.row.delivered_at is not None:
                return False
            item.row.unconfirmed_at = at_ms
            return True

    def mark_delivered(self, user_id: str, message_ids: Sequence[str], at_ms: int) -> int:
        if isinstance(message_ids, str):
            message_ids = [message_ids]
        with self._lock:
            items = self._user(user_id)
            touched = [items[m] for m in _distinct(message_ids) if m in items]
            for item in touched:
                item.row.delivered_at = at_ms
        return len(touched)

    def _discard(self, user_id: str, message_ids: Iterable[str], *, untaken: bool = False) -> int:
        items = self._user(user_id)
        gone = [
            m
            for m in message_ids
            if m in items
            and items[m].row.delivered_at is None
            and items[m].row.acked_at is None
            and not (untaken and items[m].row.sending_at is not None)
        ]
        for message_id in gone:
            del items[message_id]
        return len(gone)

    def discard_undelivered(self, user_id: str, message_ids: Sequence[str]) -> int:
        with self._lock:
            return self._discard(user_id, _distinct(message_ids))

    def _of_task(self, user_id: str, task_uuid: str, named: Sequence[str]) -> list[str]:
        """The task's rows a reader finds: those in the by-task index and those it names (the adapter's rule)."""
        return [
            m
            for m, item in self._user(user_id).items()
            if item.row.task_uuid == task_uuid and (item.indexed or m in named)
        ]

    def discard_undelivered_for_task(
        self, user_id: str, task_uuid: str, *, claim_version: int | None = None, named: Sequence[str] = ()
    ) -> int:
        if claim_version is not None and type(self) is MemoryOutboxStore:
            raise NotFaked("a fenced discard checks the task: FencedMemoryOutboxStore")
        with self._lock:
            return self._discard(user_id, self._of_task(user_id, task_uuid, named), untaken=claim_version is not None)

    def list_for_task(
        self, user_id: str, task_uuid: str, *, since_ms: int = 0, limit: int = 500, named: Sequence[str] = ()
    ) -> list[OutboxRow]:
        with self._lock:
            items = self._user(user_id)
            rows = [
                replace(items[m].row)
                for m in self._of_task(user_id, task_uuid, named)
                if items[m].row.created_at >= since_ms
            ]
        rows.sort(key=lambda row: (row.created_at, row.id))
        return rows[:limit]

    # -- API-facing --

    def list_unacked(self, user_id: str, since: int, limit: int, now_ms: int) -> list[OutboxRow]:
        if limit <= 0:
            return []
        with self._lock:
            rows = [
                replace(item.row)
                for item in self._user(user_id).values()
                if item.row.acked_at is None and item.row.id > since and item.live(now_ms)
            ]
        rows.sort(key=lambda row: row.id)
        return rows[:limit]

    def ack(self, user_id: str, message_ids: Sequence[str], now_ms: int) -> int:
        acked_ttl = (now_ms + ACKED_RETENTION_MS) // 1000
        newly = 0
        with self._lock:
            items = self._user(user_id)
            for message_id in _distinct(message_ids):
                item = items.get(message_id)
                if item is None or item.row.acked_at is not None or not item.live(now_ms):
                    continue
                item.row.acked_at = now_ms
                item.ttl_s = min(item.ttl_s, acked_ttl)
                newly += 1
        return newly

    def delete(self, user_id: str, message_ids: Sequence[str] | None, now_ms: int | None = None) -> int:
        with self._lock:
            items = self._user(user_id)
            wanted = list(items) if message_ids is None else _distinct(message_ids)
            removed = [items.pop(m) for m in wanted if m in items]
        return sum(1 for item in removed if item.live(now_ms))


# ---- LLM credentials -------------------------------------------------------------------------------------


@dataclass
class _Credential:
    encrypted_value: str
    created_at_ms: int
    updated_at_ms: int


class MemoryCredentialStore:
    """Credentials per user, listed in binary (UTF-8) credId order as the table's sort key orders them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, _Credential]] = {}

    def _user(self, user_id: str) -> dict[str, _Credential]:
        return self._users.setdefault(user_id, {})

    def upsert(self, user_id: str, entries: Sequence[CredentialWrite], now_ms: int) -> int:
        latest: dict[str, CredentialWrite] = {}
        for entry in entries:
            _no_owner(entry.owner)
            latest[entry.cred_id] = entry
        if len(latest) > MAX_CREDENTIALS_PER_UPSERT:
            raise ValueError(f"at most {MAX_CREDENTIALS_PER_UPSERT} credentials per upsert")
        with self._lock:
            creds = self._user(user_id)
            for cred_id, entry in latest.items():
                created = creds[cred_id].created_at_ms if cred_id in creds else now_ms
                creds[cred_id] = _Credential(entry.encrypted_value, created, now_ms)
        return len(latest)

    def count(self, user_id: str) -> int:
        with self._lock:
            return len(self._user(user_id))

    def list(self, user_id: str) -> list[tuple[str, int | None]]:
        with self._lock:
            creds = dict(self._user(user_id))
        return [(cred_id, creds[cred_id].updated_at_ms) for cred_id in sorted(creds, key=lambda c: c.encode("utf-8"))]

    def get_values(self, user_id: str, cred_ids: Sequence[str]) -> dict[str, str]:
        with self._lock:
            creds = self._user(user_id)
            return {c: creds[c].encrypted_value for c in _distinct(cred_ids, non_empty=True) if c in creds}

    def existing_cred_ids(self, user_id: str, cred_ids: Sequence[str]) -> set[str]:
        return set(self.get_values(user_id, cred_ids))

    def delete_ids(self, user_id: str, cred_ids: Sequence[str]) -> int:
        with self._lock:
            creds = self._user(user_id)
            return sum(1 for c in _distinct(cred_ids, non_empty=True) if creds.pop(c, None) is not None)

    def delete_all(self, user_id: str) -> int:
        with self._lock:
            return len(self._users.pop(user_id, {}))

    def delete_prefix(self, user_id: str, prefix: str) -> int:
        if not isinstance(prefix, str) or not prefix:
            return 0  # the API rejects an empty prefix; delete_all is the explicit way
        with self._lock:
            creds = self._user(user_id)
            gone = [c for c in creds if c.startswith(prefix)]
            for cred_id in gone:
                del creds[cred_id]
        return len(gone)


# ---- one-item-per-user stores ----------------------------------------------------------------------------


class MemoryPushSubscriptionStore:
    """One subscription per user, overwritten without comparison; an empty one reads as none."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, PushSubscriptionRow] = {}

    def get_push_subscription(self, user_id: str) -> PushSubscriptionRow | None:
        with self._lock:
            row = self._rows.get(user_id)
        return replace(row) if row is not None and row.encrypted_subscription else None

    def put_push_subscription(self, user_id: str, encrypted: str, updated_at: int) -> None:
        with self._lock:
            self._rows[user_id] = PushSubscriptionRow(encrypted_subscription=encrypted, updated_at=updated_at)

    def delete_push_subscription(self, user_id: str) -> bool:
        with self._lock:
            return self._rows.pop(user_id, None) is not None

    def mark_push_subscription_gone(self, user_id: str, encrypted: str, at_ms: int) -> bool:
        with self._lock:
            row = self._rows.get(user_id)
            if row is None or row.encrypted_subscription != encrypted:
                return False
            row.gone = True
            return True


class MemoryDeliveryPolicyStore:
    """The user's encrypted delivery policy and its frequency-cap counters: per user and counter, the set of
    occurrences counted, charged by the fenced send claim (``FencedMemoryOutboxStore`` in claims.py)."""

    def __init__(self, lock: threading.RLock | None = None) -> None:
        self._lock = lock or threading.RLock()
        self._rows: dict[str, DeliveryPolicyRow] = {}
        self.counted: dict[tuple[str, str], set[str]] = {}

    def get_policy(self, user_id: str) -> DeliveryPolicyRow | None:
        with self._lock:
            row = self._rows.get(user_id)
        return replace(row) if row is not None else None

    def put_policy(self, user_id: str, encrypted: str, updated_at: int) -> None:
        with self._lock:
            self._rows[user_id] = DeliveryPolicyRow(encrypted_policy=encrypted, updated_at=updated_at)

    def delete_policy(self, user_id: str) -> bool:
        with self._lock:
            return self._rows.pop(user_id, None) is not None

    def cap_room(self, user_id: str, charges: Sequence[CapCharge]) -> int | None:
        with self._lock:
            full = [charge.window_end_ms for charge in charges if self.is_full(user_id, charge)]
        return max(full) if full else None

    def is_full(self, user_id: str, charge: CapCharge) -> bool:
        """The window has no room for ``charge`` (an occurrence counted already always fits again)."""
        counted = self.counted.get((user_id, charge.counter), set())
        return charge.occurrence not in counted and len(counted) >= charge.max

    def charge(self, user_id: str, charge: CapCharge) -> None:
        self.counted.setdefault((user_id, charge.counter), set()).add(charge.occurrence)
