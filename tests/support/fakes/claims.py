"""An in-memory ``ClaimStore`` and the fenced outbox send claim, on the same tasks and outbox as the other fakes
(see docs/delivery.md for what the fences mean). Tasks, outbox rows and the group locks share one lock, so a
claim, a fenced append or a settlement is one atomic step, as the adapter's transaction is.

The send claim charges the frequency caps (the policy store's counters) in the same step. Not modelled: owner
guards (:class:`NotFaked`), payload parts and a tenant's pending count (absent from the fakes altogether).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from amsg.errors import ClaimLost
from amsg.failures import ClaimTaken
from amsg.ports import (
    APPEND_FALLBACK,
    KEEP,
    AppendFallback,
    CapCharge,
    CapReached,
    ClaimAlone,
    ClaimFence,
    ClaimStore,
    ClaimWanted,
    DueCandidate,
    DuePageToken,
    OutboxAppend,
    OutboxRow,
    OwnerClaim,
    RunSnapshot,
    Settlement,
    TaskRow,
    names_on_task,
)
from amsg.timeutil import iso_from_ms

from tests.support.fakes.memory import (
    MemoryDeliveryPolicyStore,
    MemoryOutboxStore,
    MemoryPushSubscriptionStore,
    NotFaked,
)
from tests.support.fakes.tasks import MemoryTaskStore

MAX_APPEND_ROWS = 98  # the adapter's transaction: the counter, the task and at most 98 rows


def due_shard(uuid: str, shard_count: int) -> int:
    """The shard of a task in the due index: the adapter's hash (first 8 hex of sha256(uuid) mod N)."""
    return int(hashlib.sha256(uuid.encode("utf-8")).hexdigest()[:8], 16) % max(1, shard_count)


@dataclass
class _Lease:
    """The delivery-side attributes the adapter keeps on the task item but ``TaskRow`` does not carry."""

    row_id: int  # the task these belong to (a task deleted and created again under its uuid starts afresh)
    owner: str | None = None
    adopted_cv: int | None = None


def _eligible_ms(row: TaskRow) -> int:
    """The time a pending task sits at in the due index: its lease expiry, its retry time, else its occurrence."""
    if row.lease_until_ms is not None:
        return row.lease_until_ms
    return row.retry_after_ms if row.retry_after_ms is not None else row.next_send_at_ms


def _due_key(row: TaskRow) -> str:
    return f"{iso_from_ms(_eligible_ms(row))}#{row.uuid}"


class MemoryClaimStore:
    """The delivery side of :class:`MemoryTaskStore`: due index, claims fenced by ``claim_version``, adoption, the
    run's read, the fenced batch append, leases, settlements."""

    claim_batch = 25  # the DynamoDB store's transaction size, so the engine batches as it does in production

    def __init__(
        self,
        tasks: MemoryTaskStore,
        outbox: MemoryOutboxStore,
        subscriptions: MemoryPushSubscriptionStore,
        policies: MemoryDeliveryPolicyStore,
        *,
        due_shards: int = 1,
    ) -> None:
        if outbox._lock is not tasks._lock:
            raise ValueError("the claims need the tasks and the outbox under one lock")
        self._lock = tasks._lock
        self._tasks = tasks
        self._outbox = outbox
        self._subscriptions = subscriptions
        self._policies = policies
        self.due_shards = due_shards
        self._leases: dict[tuple[str, str], _Lease] = {}
        self._group_holders: dict[tuple[str, str], str] = {}

    # ---- helpers (called with the lock held) -------------------------------------------------------------

    def _task(self, user_id: str, uuid: str) -> TaskRow | None:
        return self._tasks._user(user_id).get(uuid)

    def _lease(self, row: TaskRow) -> _Lease:
        lease = self._leases.get((row.user_id, row.uuid))
        if lease is None or lease.row_id != row.id:
            lease = self._leases[(row.user_id, row.uuid)] = _Lease(row.id)
        return lease

    def _current(self, row: TaskRow | None, claim_version: int) -> bool:
        return row is not None and row.claim_version == claim_version and row.status == "pending"

    def _adoptable(self, row: TaskRow, now_ms: int) -> bool:
        adopted = self._lease(row).adopted_cv
        return adopted is None or adopted != row.claim_version or (row.lease_until_ms or 0) < now_ms

    def _take_lease(self, row: TaskRow, lease_until_ms: int, owner: str) -> None:
        row.lease_until_ms = lease_until_ms
        self._lease(row).owner = owner

    # ---- the tick ----------------------------------------------------------------------------------------

    def due_candidates(
        self, shard: int, now_ms: int, limit: int, start: DuePageToken | None = None
    ) -> tuple[list[DueCandidate], DuePageToken | None]:
        """The token is the due key of the page's last candidate (a text)."""
        after = None if start is None else start.wire
        if after and not isinstance(after, str):
            raise ValueError("not a due-index page token of the in-memory store")
        window_end = iso_from_ms(now_ms) + "#\uffff"
        with self._lock:
            rows = [
                (_due_key(row), replace(row))
                for user in self._tasks._tasks.values()
                for row in user.values()
                if row.status == "pending" and due_shard(row.uuid, self.due_shards) == shard
            ]
        keyed = sorted((key, row) for key, row in rows if key <= window_end and (not after or key > after))
        page = keyed[: max(0, limit)]
        candidates = [
            DueCandidate(row.user_id, row.uuid, row.next_send_at_ms, row.retry_count, row.retry_after_ms, key)
            for key, row in page
        ]
        return candidates, (DuePageToken(page[-1][0]) if page and len(page) == limit else None)

    def _claimable(self, row: TaskRow | None, expected_ms: int, now_ms: int) -> bool:
        return (
            row is not None
            and row.status == "pending"
            and row.next_send_at_ms == expected_ms
            and (row.lease_until_ms is None or row.lease_until_ms <= now_ms)
            and (row.retry_after_ms is None or row.retry_after_ms <= now_ms)
        )

    def _claim_locked(
        self, user_id: str, uuid: str, expected_ms: int, now_ms: int, lease_until_ms: int, owner: str
    ) -> TaskRow | None:
        row = self._task(user_id, uuid)
        if row is None or not self._claimable(row, expected_ms, now_ms):
            return None
        self._take_lease(row, lease_until_ms, owner)
        row.updated_at_ms = now_ms
        row.claim_version += 1
        return row

    def claim(
        self,
        user_id: str,
        uuid: str,
        *,
        expected_next_send_at_ms: int,
        now_ms: int,
        lease_until_ms: int,
        owner: str,
        group: str | None = None,
    ) -> TaskRow | None:
        with self._lock:
            if group is not None and self._group_busy(user_id, uuid, group, now_ms):
                return None
            row = self._claim_locked(user_id, uuid, expected_next_send_at_ms, now_ms, lease_until_ms, owner)
            if row is None:
                return None
            if group is not None:
                row.serialize_group = group
                self._group_holders[(user_id, group)] = uuid
            return replace(row)

    def _group_busy(self, user_id: str, uuid: str, group: str, now_ms: int) -> bool:
        """Another task of the group holds an unexpired pending lease (at most one of a group is in flight)."""
        holder = self._group_holders.get((user_id, group))
        if holder is None or holder == uuid:
            return False
        current = self._task(user_id, holder)
        return current is not None and current.status == "pending" and (current.lease_until_ms or 0) > now_ms

    def claim_many(
        self, wanted: Sequence[ClaimWanted], *, now_ms: int, lease_until_ms: int, owner: str
    ) -> list[TaskRow | ClaimAlone | None]:
        if len(wanted) > self.claim_batch:
            raise ValueError(f"at most {self.claim_batch} claims per batch")
        with self._lock:
            claimed = [
                self._claim_locked(w.user_id, w.uuid, w.expected_next_send_at_ms, now_ms, lease_until_ms, owner)
                for w in wanted
            ]
            return [None if row is None else replace(row) for row in claimed]

    def claim_many_together(
        self,
        parts: Sequence[tuple[ClaimStore, Sequence[ClaimWanted]]],
        *,
        now_ms: int,
        lease_until_ms: int,
        owner: str,
    ) -> list[list[TaskRow | ClaimAlone | None]]:
        """The fakes hold one key space: every part is this store (the tenant line runs on moto)."""
        if any(store is not self for store, _ in parts):
            raise NotFaked("claims across key spaces (the multi-tenant tick) are not faked")
        if sum(len(wanted) for _, wanted in parts) > self.claim_batch:
            raise ValueError(f"at most {self.claim_batch} claims per batch")
        with self._lock:
            return [
                self.claim_many(wanted, now_ms=now_ms, lease_until_ms=lease_until_ms, owner=owner)
                for _, wanted in parts
            ]

    def pending_counts(self, stores: Sequence[ClaimStore]) -> list[int | None]:
        """No pending count is kept outside a tenant's key space (the adapter's answer on the single line)."""
        return [None for _ in stores]

    # ---- run_task ----------------------------------------------------------------------------------------

    def adopt_claim(
        self,
        user_id: str,
        uuid: str,
        claim_version: int,
        next_send_at_ms: int,
        lease_until_ms: int,
        owner: str,
        now_ms: int,
    ) -> TaskRow | None:
        with self._lock:
            row = self._task(user_id, uuid)
            if (
                row is not None
                and self._current(row, claim_version)
                and row.lease_until_ms is not None
                and row.next_send_at_ms == next_send_at_ms
                and self._adoptable(row, now_ms)
            ):
                self._take_lease(row, lease_until_ms, owner)
                self._lease(row).adopted_cv = claim_version
                return replace(row)
            return self._refused_adoption(row, claim_version, now_ms, owner)

    def _refused_adoption(self, row: TaskRow | None, claim_version: int, now_ms: int, owner: str) -> TaskRow | None:
        """ClaimTaken while another run's adoption of this claim holds; the task when ``owner`` holds it; else None."""
        if (
            row is not None
            and self._current(row, claim_version)
            and self._lease(row).adopted_cv == claim_version
            and (row.lease_until_ms or 0) >= now_ms
        ):
            if self._lease(row).owner == owner:
                return replace(row)
            raise ClaimTaken(row.uuid)
        return None

    def open_run(self, user_id: str, uuid: str, claim_version: int, next_send_at_ms: int) -> RunSnapshot | None:
        with self._lock:
            row = self._task(user_id, uuid)
            if row is None or not self._current(row, claim_version) or row.lease_until_ms is None:
                return None
            if row.next_send_at_ms != next_send_at_ms:
                return None
            snapshot = RunSnapshot(
                replace(row),
                self._subscriptions.get_push_subscription(user_id),
                self._outbox._counters.get(user_id, 0),
                self._policies.get_policy(user_id),
            )
        return snapshot

    def append_batch(
        self,
        row: TaskRow,
        rows: Sequence[OutboxAppend],
        *,
        now_ms: int,
        lease_until_ms: int | None,
        owner: str,
        claim_first: str | None = None,
        outbox_seq: int | None = None,
    ) -> list[int] | AppendFallback | None:
        if row.owner is not None or not _fits(rows):
            return APPEND_FALLBACK
        with self._lock:
            task = self._task(row.user_id, row.uuid)
            if not self._append_fence(task, row, now_ms, lease_until_ms):
                if lease_until_ms is not None:
                    self._refused_adoption(task, row.claim_version, now_ms, owner)
                return None
            assert task is not None
            items = self._outbox._user(row.user_id)
            if any(item.message_id in items for item in rows):
                return APPEND_FALLBACK  # rows of this occurrence exist already
            first = self._outbox._counters.get(row.user_id, 0) + 1
            ids = list(range(first, first + len(rows)))
            named = names_on_task(task.outbox_message_ids, rows)
            for item, row_id in zip(rows, ids, strict=True):
                sending = now_ms if item.message_id == claim_first else None
                indexed = named is None or item.message_id not in named
                self._outbox._insert(items, item, row_id, sending, indexed=indexed)
                if sending is not None:
                    items[item.message_id].row.sending_cv = row.claim_version
            self._outbox._counters[row.user_id] = ids[-1]
            task.outbox_occurrence_ms = task.next_send_at_ms
            task.outbox_message_ids = named if named is not None else task.outbox_message_ids
            if lease_until_ms is not None:  # a claim lease that ends no earlier is kept (the adapter's rule)
                self._take_lease(task, max(lease_until_ms, task.lease_until_ms or 0), owner)
                self._lease(task).adopted_cv = task.claim_version
                lease_until_ms = task.lease_until_ms
        row.outbox_occurrence_ms = row.next_send_at_ms
        row.outbox_message_ids = task.outbox_message_ids
        if lease_until_ms is not None:
            row.lease_until_ms = lease_until_ms
        return ids

    def _append_fence(self, task: TaskRow | None, row: TaskRow, now_ms: int, lease_until_ms: int | None) -> bool:
        """Adopting: nobody claimed since (claim version and occurrence) and no other run's adoption holds;
        otherwise the lease must still be unexpired."""
        if task is None or not self._current(task, row.claim_version) or task.next_send_at_ms != row.next_send_at_ms:
            return False
        if lease_until_ms is not None:
            return task.lease_until_ms is not None and self._adoptable(task, now_ms)
        return task.lease_until_ms is not None and task.lease_until_ms > now_ms

    def renew_lease(self, user_id: str, uuid: str, claim_version: int, lease_until_ms: int, owner: str) -> bool:
        with self._lock:
            row = self._task(user_id, uuid)
            if row is None or not self._current(row, claim_version) or row.lease_until_ms is None:
                return False
            self._take_lease(row, lease_until_ms, owner)
            return True

    # ---- settlements -------------------------------------------------------------------------------------

    def settle(self, user_id: str, uuid: str, claim_version: int, settlement: Settlement, now_ms: int) -> bool:
        with self._lock:
            if settlement.delivered:  # the pushes went out: their rows say so whatever happens to the task
                self._outbox.mark_delivered(user_id, list(settlement.delivered), settlement.delivered_at_ms)
            row = self._task(user_id, uuid)
            if row is None:  # a delivered one-shot's task already gone counts as settled (the adapter's rule)
                return settlement.delete and bool(settlement.delivered)
            if row.claim_version != claim_version:
                return False
            if settlement.delete:
                return self._tasks.delete_task(user_id, uuid) is not None
            _apply(row, settlement, now_ms)
            self._lease(row).owner = None
            return True

    def delete_settled_before(self, cutoff_ms: int, *, shards: int, limit: int) -> int:
        with self._lock:
            done = sorted(
                (row.updated_at_ms or 0, row.user_id, row.uuid)
                for user in self._tasks._tasks.values()
                for row in user.values()
                if row.status in ("sent", "failed") and (row.updated_at_ms or 0) < cutoff_ms
            )
            for _, user_id, uuid in done[: max(0, limit)]:
                self._tasks.delete_task(user_id, uuid)
            return min(len(done), max(0, limit))


def _fits(rows: Sequence[OutboxAppend]) -> bool:
    """The adapter's one-transaction batch (counted in rows: payload sizes are not modelled)."""
    return 0 < len(rows) <= MAX_APPEND_ROWS and len({row.message_id for row in rows}) == len(rows)


def _apply(row: TaskRow, s: Settlement, now_ms: int) -> None:
    """A settlement that keeps the task: the occurrence, the retry, the status; the lease is released."""
    if s.encrypted_payload is not None and row.rev == (s.payload_rev if s.payload_rev is not None else -1):
        row.encrypted_payload = s.encrypted_payload  # else an update-message changed it since: keep that
        row.rev += 1
    row.updated_at_ms = now_ms
    row.next_send_at_ms = s.next_send_at_ms
    row.lease_until_ms = None
    if s.status is not None:
        row.status = s.status
        row.retry_after_ms = None
    else:
        row.retry_after_ms = s.retry_after_ms
    if s.policy_deferred and s.retry_after_ms is not None and s.status is None:
        row.deferred_until_ms = s.retry_after_ms
    elif not (s.keep_deferral and s.status is None):
        row.deferred_until_ms = None
    if s.clear_outbox_ids:
        row.outbox_message_ids = ()
    if s.retry_count is not KEEP:
        row.retry_count = s.retry_count  # type: ignore[assignment]
    if s.last_error is not KEEP:
        row.last_error = s.last_error  # type: ignore[assignment]


class FencedMemoryOutboxStore(MemoryOutboxStore):
    """The outbox whose send claim is fenced by the task's claim: taken only while the claim is current and its
    lease unexpired, in one step with the row (a run that lost its lease sends nothing)."""

    def __init__(self, tasks: MemoryTaskStore, policies: MemoryDeliveryPolicyStore) -> None:
        if policies._lock is not tasks._lock:
            raise ValueError("the send claim charges the caps under the tasks' lock")
        super().__init__(lock=tasks._lock)
        self._tasks = tasks
        self._policies = policies

    def claim_send(  # type: ignore[override]
        self,
        user_id: str,
        message_id: str,
        *,
        task_uuid: str,
        claim_version: int,
        now_ms: int,
        owner: OwnerClaim | None = None,
        caps: Sequence[CapCharge] = (),
        delivered: str | None = None,
    ) -> bool:
        if owner is not None:
            raise NotFaked("cloud-data owner guards are not faked")
        with self._lock:
            if delivered is not None:
                self.mark_delivered(user_id, [delivered], now_ms)
            item = self._user(user_id).get(message_id)
            if item is None or not self._sendable(item.row, user_id, task_uuid, claim_version, now_ms):
                return False
            full = [charge.window_end_ms for charge in caps if self._policies.is_full(user_id, charge)]
            if full:
                raise CapReached(max(full))  # nothing written
            for charge in caps:
                self._policies.charge(user_id, charge)
            item.row.sending_at = now_ms
            item.row.sending_cv = claim_version
            return True

    def append(self, user_id: str, rows: Sequence[OutboxAppend], *, fence: ClaimFence | None = None) -> list[int]:
        with self._lock:  # the claim check and the rows in one step
            if fence is not None and not self._claim_holds(user_id, fence.task_uuid, fence.claim_version, fence.now_ms):
                raise ClaimLost("the task claim fencing this append is gone")
            return super().append(user_id, rows)

    def discard_undelivered_for_task(
        self, user_id: str, task_uuid: str, *, claim_version: int | None = None, named: Sequence[str] = ()
    ) -> int:
        with self._lock:
            if claim_version is not None:
                task = self._tasks._user(user_id).get(task_uuid)
                if task is None or task.claim_version != claim_version or task.status == "pending":
                    return 0  # the run that holds this claim has not ended the task: nothing of it is ours
            mine = self._of_task(user_id, task_uuid, named)
            return self._discard(user_id, mine, untaken=claim_version is not None)

    def _sendable(self, row: OutboxRow, user_id: str, task_uuid: str, claim_version: int, now_ms: int) -> bool:
        """Row untaken, undelivered, unacked; the task's claim current and its lease unexpired."""
        if row.sending_at is not None or row.delivered_at is not None or row.acked_at is not None:
            return False
        return self._claim_holds(user_id, task_uuid, claim_version, now_ms)

    def _claim_holds(self, user_id: str, task_uuid: str, claim_version: int, now_ms: int) -> bool:
        """The task is pending under ``claim_version`` and its lease unexpired (the adapter's claim check)."""
        task = self._tasks._user(user_id).get(task_uuid)
        return (
            task is not None
            and task.claim_version == claim_version
            and task.status == "pending"
            and task.lease_until_ms is not None
            and task.lease_until_ms > now_ms
        )
