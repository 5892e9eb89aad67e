"""Ports: the small interfaces the API and engine code depend on. Adapters implement them.

Rows are plain dataclasses; payloads stay encrypted (storage format) until the domain decrypts them with the
user's key, so an adapter never sees plaintext task content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


@dataclass(frozen=True)
class OwnerState:
    """One cloud-data owner item: retired iff not ``active``; ``generation`` counts retirements and restores."""

    owner_type: str
    owner_id: str
    active: bool
    generation: int
    updated_at: int | None


class OwnerStore(Protocol):
    def get(self, user_id: str, ref: str) -> OwnerState | None:
        """The owner item (consistent read), or None when the owner was never retired."""
        ...

    def list(self, user_id: str) -> list[OwnerState]:
        """Every owner item of the user, ordered by (type, id)."""
        ...

    def guard_holds(self, user_id: str, ref: str, generation: int) -> bool:
        """Whether the owner is active at ``generation`` (a read; writes check it in their transactions)."""
        ...

    def set_active(
        self, user_id: str, ref: str, owner_type: str, owner_id: str, *, active: bool, expected: int, now_ms: int
    ) -> OwnerState:
        """Retire or restore, adding one to the generation iff it is still ``expected`` (else OwnerChanged)."""
        ...


@dataclass
class StoredResource:
    """One logical resource as stored (what the cloud-data inventory is built from; never sent as is)."""

    type: str  # task | state | credential | outbox | subscription
    identity: list[Any]
    byte_size: int  # stored ciphertext bytes
    updated_at: int | None
    status: str | None
    owner_ref: str | None = None
    cloud_meta: str | None = field(default=None, repr=False)  # encrypted {owner, kind, generation}
    payload: str | None = field(default=None, repr=False)  # task payload / outbox push ciphertext (owner clues)
    task_uuid: str | None = None  # outbox: the task the row came from
    version: str = ""  # changes with every write to any of its items
    rev: int | None = None  # the item's write counter as listed (deletes are conditioned on it)


@dataclass
class ResourceListing:
    resources: list[StoredResource] = field(default_factory=list)
    gaps: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class LeasedWrite:
    """A write of a leased management record (a cleanup operation's progress). It commits only while ``token``
    holds an unexpired lease; it renews the lease for ``lease_ms`` or, with ``release``, gives it up and makes the
    record due again at ``work_at`` (None: never, it is finished). ``ttl_s`` None: the record does not expire."""

    kind: str
    record_id: str
    data: str = field(repr=False)
    token: str
    now_ms: int
    lease_ms: int
    release: bool = False
    work_at: int | None = None
    ttl_s: int | None = None


class CloudDataStore(Protocol):
    def list_resources(self, user_id: str) -> ResourceListing: ...

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
        """A management record (``data`` is already encrypted); it expires after ``ttl_s`` (None: never).
        ``create_only``: False (nothing written) when the record exists (first writer wins). ``work_at``: the
        record (an operation) is due for background work from then on."""
        ...

    def set_record_ttl(self, user_id: str, kind: str, record_id: str, *, now_ms: int, ttl_s: int) -> None: ...

    def delete_record(self, user_id: str, kind: str, record_id: str) -> None: ...

    def get_record(self, user_id: str, kind: str, record_id: str, *, now_ms: int | None = None) -> str | None:
        """The record's data; expired records read as absent when ``now_ms`` is given."""
        ...

    def list_records(self, user_id: str, kind: str, *, now_ms: int | None = None) -> list[str]: ...

    def delete_resource(self, user_id: str, resource: StoredResource, progress: LeasedWrite | None = None) -> bool:
        """Delete one resource (all its items) iff it is unchanged since listed; False otherwise. With
        ``progress``: in one transaction with that leased write (raises LeaseLost when the lease is gone)."""
        ...

    def claim_record(self, user_id: str, kind: str, record_id: str, token: str, *, now_ms: int, lease_ms: int) -> bool:
        """Take the record's lease iff it is free or expired."""
        ...

    def save_leased(self, user_id: str, write: LeasedWrite) -> None:
        """Write under the lease (LeaseLost when it is no longer held)."""
        ...

    def retire_owner_leased(
        self, user_id: str, ref: str, owner_type: str, owner_id: str, *, expected: int, now_ms: int, write: LeasedWrite
    ) -> int:
        """Retire the owner iff at generation ``expected`` together with the leased write; the new generation.
        Raises OwnerChanged or LeaseLost."""
        ...

    def due_records(self, kind: str, now_ms: int, limit: int) -> list[tuple[str, str]]:
        """``(user_id, record_id)`` of records due for background work, earliest first."""
        ...


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
    next_send_at: str
    status: str = "pending"
    retry_count: int = 0
    last_error: str | None = None
    created_at: str = ""
    updated_at: str = ""
    lease_until: str | None = None
    retry_after: str | None = None
    serialize_group: str | None = None
    claim_version: int = 0
    rev: int = 0
    payload_token: str | None = None  # set when the payload is split across part items
    outbox_occurrence: str | None = None  # the occurrence whose push batch is already in the outbox
    correlation_id: str | None = None  # id of the API request that created the task (carried into run_task logs)
    owner: OwnerClaim | None = None  # the cloud-data owner the task (and all it derives) is guarded by
    deferred_until: str | None = None  # the delivery policy moved this occurrence (quiet hours or a cap) to then


@dataclass
class NewTask:
    user_id: str
    uuid: str
    encrypted_payload: str
    message_type: str
    next_send_at: str
    now_iso: str
    correlation_id: str | None = None  # the creating API request's id (logs only)
    owner: OwnerClaim | None = None


@dataclass
class CreatePrep:
    subscription: PushSubscriptionRow | None
    hint: Any = None  # adapter-private: what the create may reuse from the same read


@dataclass
class CreatedTask:
    id: int
    superseded: bool


@dataclass
class PushSubscriptionRow:
    encrypted_subscription: str
    updated_at: int


@dataclass
class SchemaReport:
    """What ``POST /init-tenant`` reports: one entry per required table/index/TTL setting."""

    ok: bool
    items: list[dict[str, Any]] = field(default_factory=list)
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
        next_send_at: str | None,
        now_iso: str,
        expected_rev: int,
        owner: OwnerClaim | None = None,
        keep_deferral: bool = False,
    ) -> str | None:
        """Conditional on status pending (+ no live lease when moving next_send_at) and, for an owned task, on its
        owner holding (``CloudGuardError`` otherwise); returns updated_at or None. Clears the retry state and a
        delivery-policy deferral, unless ``keep_deferral`` and the occurrence does not move."""
        ...

    def delete_task(self, user_id: str, uuid: str) -> bool: ...

    def find_task(self, uuid: str) -> TaskRow | None:
        """Any user's task by uuid (runTask); uses the deployment-wide uuid registry."""
        ...


class ClaimStore(Protocol):
    """The delivery side of the tasks: tick claims, run_task adopts; every write after a claim is fenced."""

    def due_candidates(self, shard: int, now_iso: str, limit: int, start: Any = None) -> tuple[list[DueCandidate], Any]:
        """One page of the due index (eligible time <= now); returns (candidates, next page token or None)."""
        ...

    def claim(
        self,
        user_id: str,
        uuid: str,
        *,
        expected_next_send_at: str,
        now_iso: str,
        lease_until: str,
        owner: str,
        group: str | None = None,
    ) -> TaskRow | None:
        """Conditional claim (pending, occurrence as read, lease free, retry due); bumps ``claim_version``.
        With a serialize ``group`` the claim also takes the group's lock in the same transaction."""
        ...

    def claim_many(
        self, wanted: Sequence[ClaimWanted], *, now_iso: str, lease_until: str, owner: str
    ) -> list[TaskRow | object | None]:
        """:meth:`claim` for up to ``CLAIM_BATCH`` ungrouped tasks in one round trip (and one read back): per task, the
        claimed row, None when its condition failed, or ``CLAIM_ALONE`` when the batch could not run (the
        caller claims that task alone, so one faulty task never holds back the others)."""
        ...

    def adopt_claim(
        self, user_id: str, uuid: str, claim_version: int, next_send_at: str, lease_until: str, owner: str, now_iso: str
    ) -> TaskRow | None:
        """Take over the tick's claim if it is still current, switching to the run lease, in one write. A claim
        is adopted once: while the run that adopted it holds its lease, raises ``amsg.failures.ClaimTaken``."""
        ...

    def open_run(self, user_id: str, uuid: str, claim_version: int, next_send_at: str) -> RunSnapshot | None:
        """run_task's one read: the task (None unless the message's claim is still current), the user's push
        subscription, outbox counter and delivery policy, in one round trip. Adoption happens in
        :meth:`append_batch`."""
        ...

    def append_batch(
        self,
        row: TaskRow,
        rows: Sequence[OutboxAppend],
        *,
        now_ms: int,
        lease_until: str | None,
        owner: str,
        claim_first: str | None = None,
        outbox_seq: int | None = None,
    ) -> list[int] | object | None:
        """Append a new occurrence's batch in one transaction that also adopts the claim (fenced by
        ``claim_version``, lease unexpired; ``lease_until`` becomes the lease) and records the occurrence on
        the task, optionally claiming row ``claim_first`` for sending. Returns the row ids, None when the claim
        is no longer ours, or :data:`APPEND_FALLBACK` when the batch does not fit one transaction or rows of
        these ids already exist (the caller then uses the outbox's general append)."""
        ...

    def renew_lease(self, user_id: str, uuid: str, claim_version: int, lease_until: str, owner: str) -> bool: ...

    def settle(self, user_id: str, uuid: str, claim_version: int, settlement: Settlement, now_iso: str) -> bool:
        """Apply a settlement if the claim is still ours; False means the row is gone or was taken over."""
        ...

    def delete_settled_before(self, cutoff_iso: str, *, shards: int, limit: int) -> int: ...


KEEP = object()
"""Sentinel: leave this attribute as it is."""

APPEND_FALLBACK = object()
"""Sentinel of :meth:`ClaimStore.append_batch`: not appended, use the outbox's general append."""

CLAIM_BATCH = 25
"""Most claims per :meth:`ClaimStore.claim_many` call (DynamoDB allows 100 per transaction; a smaller batch loses
less to a conflict and the tick keeps every claim worker busy)."""

CLAIM_ALONE = object()
"""Sentinel of :meth:`ClaimStore.claim_many`: the batch could not run for this task; claim it alone."""


@dataclass(frozen=True)
class ClaimWanted:
    """A due candidate the tick wants to claim: the task and the occurrence it read from the due index."""

    user_id: str
    uuid: str
    expected_next_send_at: str


@dataclass
class RunSnapshot:
    row: TaskRow
    subscription: PushSubscriptionRow | None
    outbox_seq: int
    policy: DeliveryPolicyRow | None = None


@dataclass
class Settlement:
    """What a fenced write after a claim does to the task (see docs/delivery.md).

    ``delete`` removes the task (one-shot success). ``status`` 'failed'/'sent' takes it out of the due index.
    Otherwise the task stays pending and becomes due again at ``retry_after`` or ``next_send_at``. Every
    settlement releases the lease unless ``keep_lease``.
    """

    next_send_at: str
    delete: bool = False
    status: str | None = None
    retry_after: str | None = None
    retry_count: object = KEEP
    last_error: object = KEEP  # JSON text; None clears it
    encrypted_payload: str | None = None  # rewritten only if the payload is unchanged since the claim
    payload_rev: int | None = None
    policy_deferred: bool = False  # ``retry_after`` is a delivery-policy deferral (kept as ``deferred_until``)
    # outbox rows pushed by this run and not yet marked delivered: marked in the same write when possible,
    # and marked in any case (whether or not the settlement itself applies)
    delivered: tuple[str, ...] = ()
    delivered_at_ms: int = 0
    payload_token: str | None = None  # the claimed row's split-payload token (its parts go with a delete)


@dataclass
class DueCandidate:
    user_id: str
    uuid: str
    next_send_at: str
    retry_count: int = 0
    retry_after: str | None = None
    due_key: str = ""  # its key in the due index (eligible time, then uuid): the order "earlier due first"


class PushSubscriptionStore(Protocol):
    def get_push_subscription(self, user_id: str) -> PushSubscriptionRow | None: ...

    def put_push_subscription(self, user_id: str, encrypted: str, updated_at: int) -> None: ...

    def delete_push_subscription(self, user_id: str) -> bool: ...


# ---- message outbox (see docs/delivery.md) ---------------------------------------------------------------


@dataclass
class OutboxAppend:
    """One finalized push to record **before** sending it (outbox first).

    ``encrypted_push`` is the storage ciphertext (``iv:tag:ct`` hex, :func:`amsg.crypto.encrypt_for_storage`
    under the user key) of the compact push JSON; the store never sees plaintext. ``created_at`` is epoch ms.
    """

    message_id: str
    encrypted_push: str = field(repr=False)
    created_at: int
    task_uuid: str | None = None
    session_id: str | None = None
    message_index: int | None = None
    total_messages: int | None = None
    owner: OwnerClaim | None = None  # inherited from the firing task: the append commits only while it holds


@dataclass
class OutboxRow:
    """A stored outbox row. ``encrypted_push`` is None when a split payload lost a part (read as undecryptable)."""

    id: int
    message_id: str
    encrypted_push: str | None = field(repr=False)
    created_at: int
    task_uuid: str | None = None
    session_id: str | None = None
    message_index: int | None = None
    total_messages: int | None = None
    delivered_at: int | None = None
    acked_at: int | None = None
    sending_at: int | None = None  # set by claim_send: some run took this row to push it


class OutboxStore(Protocol):
    """The per-user outbox. Every method is scoped to one user partition.

    Ids are positive integers, strictly increasing per user in commit order (a per-user counter compare-and-set
    inside the append transaction), never reused, never changed; a row's id is the ``GET /outbox`` cursor.
    Retention is TTL-driven (28 d after ``created_at``; after an ack min(that, ack + 7 d)); readers that the
    client observes (:meth:`list_unacked`, :meth:`ack`, :meth:`delete` counts) treat expired rows as absent.
    """

    # -- engine-facing ------------------------------------------------------------------------------------

    def append(self, user_id: str, rows: Sequence[OutboxAppend]) -> list[int]:
        """Upsert on ``(user_id, message_id)``; returns the row id of each input row, in input order.

        * new message id: inserted with the next per-user id (allocated in the same transaction);
        * existing, not acked: updated in place (same id): payload and ``created_at`` replaced,
          ``delivered_at`` and ``sending_at`` cleared (a retry of the same occurrence re-delivers it);
        * existing, acked: untouched — ack is final, an acked row is never revived (its id is still returned).

        Duplicate message ids inside ``rows`` collapse to the last one (same id for both). Batches of up to 99
        rows (and ~3 MB) commit atomically; bigger batches are split into several transactions. Raises on
        storage failure (the engine then treats the batch as not outboxed).
        """
        ...

    def claim_send(
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
        """Take one row for pushing, atomically with a check that the task is still pending under
        ``claim_version`` (fencing) and, for an owned task, that its owner holds (``CloudGuardError``
        otherwise). False when the row is gone, acked, delivered or already taken, or the task claim moved
        on. A taken row is never pushed by another run (exactly-once pushes). ``delivered`` names the
        previous row of the batch, marked delivered in the same write.

        ``caps`` are counted in the same transaction; when one is full nothing is written and
        :class:`CapReached` is raised."""
        ...

    def release_send(self, user_id: str, message_id: str) -> None:
        """Undo :meth:`claim_send` after a failed push so a retry may send the row again."""
        ...

    def mark_delivered(self, user_id: str, message_ids: Sequence[str], at_ms: int) -> int:
        """Set ``delivered_at = at_ms`` on the existing rows (whatever their ack state); returns rows touched."""
        ...

    def discard_undelivered(self, user_id: str, message_ids: Sequence[str]) -> int:
        """Delete the given rows that were neither delivered nor acked (cancellation mid-batch); count."""
        ...

    def discard_undelivered_for_task(self, user_id: str, task_uuid: str) -> int:
        """Delete the task's rows that were neither delivered nor acked (cancel, supersede); count."""
        ...

    def list_for_task(self, user_id: str, task_uuid: str, *, since_ms: int = 0, limit: int = 500) -> list[OutboxRow]:
        """The task's rows with ``created_at >= since_ms`` in any state, ordered by (created_at, id), at most
        ``limit`` (strongly consistent; used to redeliver a committed batch)."""
        ...

    # -- API-facing ---------------------------------------------------------------------------------------

    def list_unacked(self, user_id: str, since: int, limit: int, now_ms: int) -> list[OutboxRow]:
        """Unacked, unexpired rows with ``id > since`` in id order, up to ``limit`` (strongly consistent)."""
        ...

    def ack(self, user_id: str, message_ids: Sequence[str], now_ms: int) -> int:
        """Mark rows acked (idempotent, final); returns how many rows were newly acked."""
        ...

    def delete(self, user_id: str, message_ids: Sequence[str] | None, now_ms: int | None = None) -> int:
        """Hard delete regardless of state; ``None`` = every row of the user. Returns rows deleted (rows already
        past retention at ``now_ms`` are removed but not counted)."""
        ...


# ---- LLM credentials (see docs/data-model.md) ------------------------------------------------------------


@dataclass
class CredentialWrite:
    cred_id: str
    encrypted_value: str = field(repr=False)  # storage ciphertext of the value JSON
    owner: OwnerClaim | None = None
    generation: int = 0  # asserted for an owner already recorded on the item when the entry names none


class CredentialStore(Protocol):
    def upsert(self, user_id: str, entries: Sequence[CredentialWrite], now_iso: str) -> int:
        """≤ 100 distinct credIds in one all-or-nothing transaction (keeps ``created_at``); returns entry count."""
        ...

    def count(self, user_id: str) -> int: ...

    def list(self, user_id: str) -> list[tuple[str, str]]:
        """``[(credId, updatedAt ISO)]`` in binary credId order (strongly consistent)."""
        ...

    def get_values(self, user_id: str, cred_ids: Sequence[str]) -> dict[str, str]:
        """``{credId: encrypted_value}`` for the ids that exist (consistent BatchGetItem)."""
        ...

    def existing_cred_ids(self, user_id: str, cred_ids: Sequence[str]) -> set[str]: ...

    def delete_ids(self, user_id: str, cred_ids: Sequence[str]) -> int: ...

    def delete_all(self, user_id: str) -> int: ...

    def delete_prefix(self, user_id: str, prefix: str) -> int: ...


class SchemaInspector(Protocol):
    def check_schema(self, now_ms: int) -> SchemaReport: ...


# ---------------------------------------------------------------------------------------------------------
# LLM. The port raises amsg.failures.LlmCallError for every
# failure: delivery code reads only its ``permanent``/``code``/``llm_status``, never a transport's errors.


@dataclass
class LlmRequest:
    """One chat-completions call: normalized URL, resolved key, composed body (see amsg.domain.llm)."""

    url: str
    api_key: str = field(repr=False)
    body: dict[str, Any] = field(repr=False)
    # False for agentic rounds: a reply with only tool_calls is legitimate there.
    require_content: bool = True


@dataclass
class LlmReply:
    """Trimmed content, extracted reasoning, the 2xx status; ``response`` is for agentic tool_calls."""

    content: str
    reasoning: str | None
    raw_status: int
    response: dict[str, Any] = field(default_factory=dict, repr=False)


class LlmClient(Protocol):
    def complete(self, request: LlmRequest, *, timeout_s: float) -> LlmReply:
        """POST the request within ``timeout_s`` (the caller's remaining budget); raises LlmCallError."""
        ...


# ---- Web Push ---------------------------------------------------------------------------------------------
#
# Failure model: ``PushSender.send`` returns normally on a 2xx and RAISES :class:`amsg.failures.PushSendError`
# on anything else. An exception rather than a result object: the engine's failure path is exception-driven like
# the reference's (``code``/``statusCode``/``permanent`` on the thrown error), a forgotten ``if not result.ok``
# would silently count a failed push as delivered, and the reasoning push is isolated with a try/except anyway.

MAX_PUSH_PAYLOAD_BYTES = 3993
"""Plaintext limit: 4096 − 103 aes128gcm overhead (16 salt, 4 rs, 1 idlen, 65 keyid, 1 pad, 16 tag)."""

SCHEDULED_PUSH_TTL_S = 2_419_200
"""TTL header of the scheduled sender: 4 weeks."""


class PushSender(Protocol):
    def send(
        self,
        subscription: Mapping[str, Any],
        payload: bytes | str,
        *,
        ttl: int = SCHEDULED_PUSH_TTL_S,
        timeout_s: float | None = None,
    ) -> int:
        """Encrypt ``payload`` (UTF-8 JSON) for ``subscription`` (browser ``toJSON()`` shape) and POST it.

        Returns the 2xx status; raises :class:`amsg.failures.PushSendError` on any other outcome. ``timeout_s``
        overrides the sender's HTTP timeout for this call (the instant path's remaining budget).
        """
        ...


class CoalescingScope(Protocol):
    def participant(self) -> AbstractContextManager[None]:
        """Take part (the calling thread, for one record): its storage calls may share round trips."""
        ...


class CallCoalescer(Protocol):
    """Storage calls made at about the same time by the records of one batch, delivered concurrently, share
    round trips; every call keeps exactly the outcome it would have had alone (see docs/delivery.md)."""

    def session(self, participants: int) -> CoalescingScope:
        """A scope for ``participants`` records starting together (more may join as earlier ones finish)."""
        ...


class TaskQueue(Protocol):
    def send_many(self, messages: list[dict[str, Any]]) -> list[int]:
        """Enqueue JSON messages (batches of 10); returns the indexes that could not be enqueued."""
        ...


# ---- client state -----------------------------------------------------------------------------------------
#
# Values cross this port as storage ciphertext (``encrypt_for_storage`` text); the domain encrypts and
# decrypts (amsg.domain.client_state), so the store never sees plaintext. The same store serves the HTTP
# routes and the hooks' ``read_state``/``write_state``.


@dataclass(frozen=True)
class StateWrite:
    """One logical write: ``value`` None deletes the key. ``guard`` is the LWW value, already clamped to now."""

    namespace: str
    key: str
    value: str | None
    guard: int
    plain_bytes: int = 0  # UTF-8 bytes of the plaintext: the reference-equivalent row/byte accounting
    owner: OwnerClaim | None = None
    generation: int = 0  # asserted for an owner already recorded on the item when the entry names none


@dataclass
class StateWriteResult:
    """Per logical entry: ``outcomes[i]`` True = written/deleted, False = blocked by last-write-wins."""

    upserted: int = 0
    skipped: int = 0
    deleted: int = 0
    skipped_entries: list[dict[str, str]] = field(default_factory=list)
    outcomes: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class StateRow:
    namespace: str
    key: str
    value: str  # storage ciphertext of the whole value (large values already reassembled)
    updated_at: int


@dataclass(frozen=True)
class NamespaceStats:
    namespace: str
    entry_count: int
    byte_size: int  # what the reference would store (ciphertext, chunk rows included)
    updated_at: int


@dataclass
class NamespaceListing:
    namespaces: list[NamespaceStats]
    truncated: bool


class ClientStateStore(Protocol):
    def upsert(
        self,
        user_id: str,
        writes: list[StateWrite],
        *,
        now_ms: int,
        fence: tuple[str, int] | None = None,
        inherit: OwnerClaim | None = None,
    ) -> StateWriteResult:
        """Last-write-wins batch. Raises PartialWriteError when a later transaction fails after earlier ones.
        With ``fence`` = (task uuid, claim version) every transaction also checks that the user's task is
        still pending under that claim, and ClaimLost is raised when it is not (nothing of that part written).
        Owned keys (and ``inherit``, the firing task's owner) are checked in the same transactions
        (``CloudGuardError``)."""
        ...

    def get_namespace(self, user_id: str, namespace: str) -> list[StateRow]:
        """Complete entries of one namespace, ordered by key (incomplete large values are omitted)."""
        ...

    def delete_all(self, user_id: str) -> int:
        """Delete every entry of the user; returns the reference-equivalent row count."""
        ...

    def delete_namespace(self, user_id: str, namespace: str) -> int:
        """Delete one namespace (atomic per 100 items); returns the reference-equivalent row count."""
        ...

    def list_namespaces(self, user_id: str, limit: int) -> NamespaceListing: ...

    def cleanup_expired(self, ttl_days: Mapping[str, float], now_ms: int, *, limit: int = 100) -> int:
        """TTL housekeeping across users (bounded); returns the reference-equivalent row count."""
        ...


# ---- delivery policy (quiet hours and frequency caps; see docs/delivery-policy.md) ------------------------


@dataclass
class DeliveryPolicyRow:
    encrypted_policy: str = field(repr=False)  # storage ciphertext of the policy JSON under the user key
    updated_at: int


@dataclass(frozen=True)
class CapCharge:
    """One frequency-cap counter a fire is charged to, in the send-claim transaction.

    ``counter`` identifies the user's counter for one scope and fixed window (opaque to the store; character
    ids appear only as an HMAC). ``occurrence`` (task uuid and occurrence) is what is counted: charging the
    same occurrence again is a no-op, so a retry or a takeover never counts a fire twice.
    """

    counter: str
    max: int
    window_end_ms: int
    occurrence: str


class CapReached(Exception):
    """A frequency cap has no room before ``until_ms`` (the end of its window); nothing was written."""

    def __init__(self, until_ms: int) -> None:
        super().__init__(f"frequency cap reached until {until_ms}")
        self.until_ms = until_ms


class DeliveryPolicyStore(Protocol):
    def get_policy(self, user_id: str) -> DeliveryPolicyRow | None: ...

    def put_policy(self, user_id: str, encrypted: str, updated_at: int) -> None: ...

    def delete_policy(self, user_id: str) -> bool: ...

    def cap_room(self, user_id: str, charges: Sequence[CapCharge]) -> int | None:
        """A read-only pre-check before generation: the end of the first window among ``charges`` that is
        already full (without counting this occurrence), or None when each has room."""
        ...
