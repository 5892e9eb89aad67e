"""Tasks, push subscriptions and the schema check (see docs/data-model.md).

Every time crossing these ports is an integer of epoch milliseconds (``*_ms``); the adapter converts to the
stored form (see docs/architecture.md, "Times and the user codec").

Rows are plain dataclasses; payloads stay encrypted (storage format) until the domain decrypts them with the
user's key, so an adapter never sees plaintext task content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Required, TypedDict


@dataclass(frozen=True)
class OwnerClaim:
    """The cloud-data owner a write asserts (see :mod:`amsg.domain.ownership`).

    ``ref`` names the owner item (sha256 of ``[type, id]``); the write commits only while that owner is active at
    ``generation``. ``meta`` is the encrypted ownership record stored on the item (None: keep the stored one).
    """

    ref: str
    generation: int
    meta: str | None = field(default=None, repr=False)


@dataclass
class TaskRow:
    """One task (the reference's columns plus our DynamoDB fencing fields; see docs/data-model.md)."""

    user_id: str
    uuid: str
    id: int
    encrypted_payload: str
    message_type: str
    next_send_at_ms: int
    status: str = "pending"
    retry_count: int = 0
    last_error: str | None = None
    created_at_ms: int | None = None
    updated_at_ms: int | None = None
    lease_until_ms: int | None = None
    retry_after_ms: int | None = None
    serialize_group: str | None = None
    claim_version: int = 0
    rev: int = 0
    payload_token: str | None = None  # set when the payload is split across part items
    outbox_occurrence_ms: int | None = None  # the occurrence whose push batch is already in the outbox
    # rows of the task's batches that are in no by-task index, by message id (docs/decisions.md, 45)
    outbox_message_ids: tuple[str, ...] = ()
    correlation_id: str | None = None  # id of the API request that created the task (carried into run_task logs)
    owner: OwnerClaim | None = None  # the cloud-data owner the task (and all it derives) is guarded by
    deferred_until_ms: int | None = None  # the delivery policy moved this occurrence (quiet hours or a cap) to then
    # when the task's uuid registry entry expires by itself (a one-shot's: docs/decisions.md, 47); None: never
    registry_expires_s: int | None = None


@dataclass
class NewTask:
    user_id: str
    uuid: str
    encrypted_payload: str
    message_type: str
    next_send_at_ms: int
    now_ms: int
    correlation_id: str | None = None  # the creating API request's id (logs only)
    owner: OwnerClaim | None = None
    # a one-shot (no recurrence): a store may let its uuid registry entry expire (docs/decisions.md, 47)
    one_shot: bool = False


class StoreHint:
    """Base of a value a store hands out and reads back itself (what a create may reuse from the read before
    it): callers only carry it, so no storage shape crosses the port."""


@dataclass
class CreatePrep:
    subscription: PushSubscriptionRow | None
    hint: StoreHint | None = None


@dataclass
class CreatedTask:
    id: int
    superseded: bool
    superseded_outbox_ids: tuple[str, ...] = ()  # the superseded task's ``outbox_message_ids``, for its discard


@dataclass(frozen=True)
class DeletedTask:
    """What a deleted task left to clean up: the outbox rows it named (its discard must find them by id)."""

    outbox_message_ids: tuple[str, ...] = ()


@dataclass
class PushSubscriptionRow:
    encrypted_subscription: str
    updated_at: int
    gone: bool = False  # the push service answered 404/410 for it: no push goes there until the client PUTs again


class SchemaItem(TypedDict, total=False):
    """One required table, index or TTL setting as ``POST /init-tenant`` reports it."""

    name: Required[str]
    description: Required[str]
    critical: Required[bool]
    status: Required[str]  # success | failed
    error: str  # why it failed


@dataclass
class SchemaReport:
    """What ``POST /init-tenant`` reports: one entry per required table/index/TTL setting."""

    ok: bool
    items: list[SchemaItem] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    error: str | None = None


class TaskStore(Protocol):
    def prepare_create(self, user_id: str, supersedes_uuid: str | None = None) -> CreatePrep:
        """One read before a create: the user's push subscription (scheduling requires one) together with
        what :meth:`create_task` would otherwise read itself (the id counter, the superseded task)."""
        ...

    def create_task(
        self, task: NewTask, supersedes_uuid: str | None = None, *, prepared: CreatePrep | None = None
    ) -> CreatedTask:
        """Allocate the per-user id and insert atomically; raises TaskUuidConflict on a taken uuid. With
        ``prepared`` (same user and superseded uuid) the first attempt reuses what was read."""
        ...

    def get_task(self, user_id: str, uuid: str) -> TaskRow | None: ...

    def list_tasks(self, user_id: str) -> list[TaskRow]: ...

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
        """Conditional on status pending (+ no live lease when moving the occurrence) and, for an owned task, on its
        owner holding (``CloudGuardError`` otherwise); returns the new updated_at (ms) or None. Clears the retry
        state and a delivery-policy deferral, unless ``keep_deferral`` and the occurrence does not move.
        ``registry_kept``: the task's uuid registry entry no longer expires (the caller made it so first)."""
        ...

    def delete_task(self, user_id: str, uuid: str) -> DeletedTask | None:
        """Delete the task and its uuid registry entry; None when there was none."""
        ...

    def set_registry_expiry(self, row: TaskRow, until_s: int | None) -> None:
        """Move the expiry of ``row``'s uuid registry entry to ``until_s`` (None: it never expires), putting the
        entry back if it is gone, while it names this task; a store whose entries never expire does nothing."""
        ...

    def find_task(self, uuid: str) -> TaskRow | None:
        """Any user's task by uuid (runTask); uses the deployment-wide uuid registry."""
        ...


class PushSubscriptionStore(Protocol):
    def get_push_subscription(self, user_id: str) -> PushSubscriptionRow | None: ...

    def put_push_subscription(self, user_id: str, encrypted: str, updated_at: int) -> None:
        """Store the user's subscription (a fresh one: any gone mark goes)."""
        ...

    def delete_push_subscription(self, user_id: str) -> bool: ...

    def mark_push_subscription_gone(self, user_id: str, encrypted: str, at_ms: int) -> bool:
        """Mark the stored subscription gone, only if it is still ``encrypted`` (the one pushed to: a subscription
        the client replaced meanwhile stays usable). False when it changed or is absent."""
        ...


class SchemaInspector(Protocol):
    def check_schema(self, now_ms: int) -> SchemaReport: ...
