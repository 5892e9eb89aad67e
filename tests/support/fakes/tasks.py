"""An in-memory ``TaskStore`` with the DynamoDB adapter's semantics (see docs/data-model.md): per-user ids from
a counter, a deployment-wide uuid registry, supersede in the creating write, the pending/revision/lease
conditions of an update, binary uuid order in a listing.

Not modelled: payload parts (a payload of any size is kept inline, so ``payload_token`` stays None), owner
guards (an owned create or update raises :class:`NotFaked`) and the delivery side (claims, leases and
settlements are :class:`tests.support.fakes.claims.MemoryClaimStore`'s, on these same rows).
"""

from __future__ import annotations

import threading
from dataclasses import replace

from amsg.errors import TaskUuidConflict
from amsg.ports import CreatedTask, CreatePrep, DeletedTask, NewTask, OwnerClaim, TaskRow

from tests.support.fakes.memory import MemoryPushSubscriptionStore, NotFaked

# ---- time: the only places that read a time value (the ports carry epoch ms) ------------------------------


def _stamp(now_ms: int) -> int:
    """The value written to ``created_at_ms`` / ``updated_at_ms`` and returned by an update."""
    return now_ms


def _lease_free(lease_until_ms: int | None, now_ms: int) -> bool:
    """The adapter's lease gate: no lease, or one that ended at or before ``now_ms``."""
    return lease_until_ms is None or lease_until_ms <= now_ms


# ----------------------------------------------------------------------------------------------------------


def _no_owner(owner: OwnerClaim | None) -> None:
    if owner is not None:
        raise NotFaked("cloud-data owner guards on tasks are not faked")


class MemoryTaskStore:
    """Tasks per user under one lock, shared with the claims and the outbox (each method is one atomic step)."""

    def __init__(self, subscriptions: MemoryPushSubscriptionStore, lock: threading.RLock | None = None) -> None:
        self._lock = lock or threading.RLock()  # shared with the claims and the outbox (tests/support/fakes/claims.py)
        self._subscriptions = subscriptions  # prepare_create reads the subscription with the counter
        self._tasks: dict[str, dict[str, TaskRow]] = {}
        self._counters: dict[str, int] = {}
        self._registry: dict[str, str] = {}  # uuid -> user id, across users

    def _user(self, user_id: str) -> dict[str, TaskRow]:
        return self._tasks.setdefault(user_id, {})

    # ---- create -----------------------------------------------------------------------------------------

    def prepare_create(self, user_id: str, supersedes_uuid: str | None = None) -> CreatePrep:
        return CreatePrep(subscription=self._subscriptions.get_push_subscription(user_id))

    def create_task(
        self, task: NewTask, supersedes_uuid: str | None = None, *, prepared: CreatePrep | None = None
    ) -> CreatedTask:
        _no_owner(task.owner)
        with self._lock:
            if task.uuid in self._registry:
                raise TaskUuidConflict(task.uuid)
            tasks = self._user(task.user_id)
            old = tasks.pop(supersedes_uuid, None) if supersedes_uuid else None
            if old is not None:
                self._registry.pop(old.uuid, None)
            new_id = self._counters.get(task.user_id, 0) + 1
            self._counters[task.user_id] = new_id
            tasks[task.uuid] = self._new_row(task, new_id)
            self._registry[task.uuid] = task.user_id
        named = old.outbox_message_ids if old is not None else ()
        return CreatedTask(id=new_id, superseded=old is not None, superseded_outbox_ids=named)

    @staticmethod
    def _new_row(task: NewTask, new_id: int) -> TaskRow:
        return TaskRow(
            user_id=task.user_id,
            uuid=task.uuid,
            id=new_id,
            encrypted_payload=task.encrypted_payload,
            message_type=task.message_type,
            next_send_at_ms=task.next_send_at_ms,
            created_at_ms=_stamp(task.now_ms),
            updated_at_ms=_stamp(task.now_ms),
            rev=1,
            correlation_id=task.correlation_id or None,
        )

    # ---- read -------------------------------------------------------------------------------------------

    def get_task(self, user_id: str, uuid: str) -> TaskRow | None:
        with self._lock:
            row = self._user(user_id).get(uuid)
            return replace(row) if row is not None else None

    def list_tasks(self, user_id: str) -> list[TaskRow]:
        with self._lock:
            rows = [replace(row) for row in self._user(user_id).values()]
        return sorted(rows, key=lambda row: row.uuid.encode("utf-8"))  # the sort key's order

    def find_task(self, uuid: str) -> TaskRow | None:
        with self._lock:
            user_id = self._registry.get(uuid)
        return self.get_task(user_id, uuid) if user_id is not None else None

    # ---- update and delete ------------------------------------------------------------------------------

    def update_pending_task(
        self,
        user_id: str,
        uuid: str,
        *,
        encrypted_payload: str,
        next_send_at_ms: int | None,
        now_ms: int,
        expected_rev: int,
        owner: OwnerClaim | None = None,
        keep_deferral: bool = False,
        registry_kept: bool = False,
    ) -> int | None:
        _no_owner(owner)
        with self._lock:
            row = self._user(user_id).get(uuid)
            if row is None or row.status != "pending" or row.rev != expected_rev:
                return None
            if next_send_at_ms is not None and not _lease_free(row.lease_until_ms, now_ms):
                return None  # never move the occurrence of a task that is being delivered
            row.encrypted_payload = encrypted_payload
            row.updated_at_ms = _stamp(now_ms)
            row.retry_count = 0
            row.rev += 1
            if not (keep_deferral and next_send_at_ms is None):
                row.retry_after_ms = None
                row.deferred_until_ms = None
            if next_send_at_ms is not None:
                row.next_send_at_ms = next_send_at_ms
            return row.updated_at_ms

    def set_registry_expiry(self, row: TaskRow, until_s: int | None) -> None:
        """This registry's entries never expire (a delivered task's entry goes with it)."""

    def delete_task(self, user_id: str, uuid: str) -> DeletedTask | None:
        with self._lock:
            gone = self._user(user_id).pop(uuid, None)
            if gone is None:
                return None
            if self._registry.get(uuid) == user_id:
                del self._registry[uuid]
            return DeletedTask(outbox_message_ids=gone.outbox_message_ids)

    # ---- test hooks: a delivery-side state put directly (the API-side contract needs no real claim) ------------

    def set_delivery_state(self, user_id: str, uuid: str, **fields: object) -> None:
        """Put a task into a state only the engine reaches (a live lease, a retry, a deferral, a status)."""
        allowed = {"lease_until_ms", "retry_after_ms", "deferred_until_ms", "status", "retry_count"}
        unknown = set(fields) - allowed
        if unknown:
            raise NotFaked(f"not a delivery-side field of the fake: {sorted(unknown)}")
        with self._lock:
            row = self._user(user_id)[uuid]
            for name, value in fields.items():
                setattr(row, name, value)
