"""Claims, leases and settlements of due tasks (see docs/delivery.md). Times are epoch ms (``*_ms``)."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from amsg.ports.delivery_policy import DeliveryPolicyRow
from amsg.ports.outbox import OutboxAppend
from amsg.ports.tasks import PushSubscriptionRow, TaskRow
from amsg.ports.tenants import TenantRecord


class ClaimStore(Protocol):
    """The delivery side of the tasks: tick claims, run_task adopts; every write after a claim is fenced."""

    @property
    def claim_batch(self) -> int:
        """Most claims per :meth:`claim_many` / :meth:`claim_many_together` call: the store's transaction size."""
        ...

    def due_candidates(
        self, shard: int, now_ms: int, limit: int, start: DuePageToken | None = None
    ) -> tuple[list[DueCandidate], DuePageToken | None]:
        """One page of the due index (eligible time <= now) from ``start`` (None: the earliest due); returns
        (candidates, the next page's token or None). Only the store that issued a token reads it."""
        ...

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
        """Conditional claim (pending, occurrence as read, lease free, retry due); bumps ``claim_version``.
        With a serialize ``group`` the claim also takes the group's lock in the same transaction."""
        ...

    def claim_many(
        self, wanted: Sequence[ClaimWanted], *, now_ms: int, lease_until_ms: int, owner: str
    ) -> list[TaskRow | ClaimAlone | None]:
        """:meth:`claim` for up to :attr:`claim_batch` ungrouped tasks in one round trip (and one read back): per
        task, the claimed row, None when its condition failed, or ``CLAIM_ALONE`` when the batch could not run
        (the caller claims that task alone, so one faulty task never holds back the others)."""
        ...

    def claim_many_together(
        self,
        parts: Sequence[tuple[ClaimStore, Sequence[ClaimWanted]]],
        *,
        now_ms: int,
        lease_until_ms: int,
        owner: str,
    ) -> list[list[TaskRow | ClaimAlone | None]]:
        """:meth:`claim_many` over several stores of one table (the key spaces of the tenants a tick serves): up
        to :attr:`claim_batch` claims in all, in one round trip and one read back; one result list per part."""
        ...

    def pending_counts(self, stores: Sequence[ClaimStore]) -> list[int | None]:
        """The count of pending tasks of each store's key space (stores of one table), in one round trip per 100:
        an exact count for a tenant's space (0 when it never had a task), None where no count is kept."""
        ...

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
        """Take over the tick's claim if it is still current, switching to the run lease, in one write. A claim
        is adopted once: while the run that adopted it holds its lease, raises ``amsg.failures.ClaimTaken``."""
        ...

    def open_run(self, user_id: str, uuid: str, claim_version: int, next_send_at_ms: int) -> RunSnapshot | None:
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
        lease_until_ms: int | None,
        owner: str,
        claim_first: str | None = None,
        outbox_seq: int | None = None,
    ) -> list[int] | AppendFallback | None:
        """Append a new occurrence's batch in one transaction that also adopts the claim (fenced by
        ``claim_version``, lease unexpired; the lease then ends at ``lease_until_ms``, or later when the claim's
        lease already did: that one is kept, and ``row.lease_until_ms`` says which) and records the occurrence on
        the task, optionally claiming row ``claim_first`` for sending. Returns the row ids, None when the claim
        is no longer ours, or :data:`APPEND_FALLBACK` when the batch does not fit one transaction or rows of
        these ids already exist (the caller then uses the outbox's general append)."""
        ...

    def renew_lease(self, user_id: str, uuid: str, claim_version: int, lease_until_ms: int, owner: str) -> bool: ...

    def settle(self, user_id: str, uuid: str, claim_version: int, settlement: Settlement, now_ms: int) -> bool:
        """Apply a settlement if the claim is still ours; False means the row is gone or was taken over. One
        exception: a delivered one-shot's delete (``delete`` with pushes in ``delivered``) outside a tenant's key
        space finds its task already gone and counts it settled: the pushes left, whatever removed the task
        since (docs/decisions.md, 43)."""
        ...

    def delete_settled_before(self, cutoff_ms: int, *, shards: int, limit: int) -> int: ...


class Keep(enum.Enum):
    """A settlement attribute left as it is (a one-member enum: typed, and compared with ``is``)."""

    KEEP = "keep"


KEEP: Final = Keep.KEEP


class AppendFallback(enum.Enum):
    """:meth:`ClaimStore.append_batch` did not append: use the outbox's general append."""

    APPEND_FALLBACK = "append-fallback"


APPEND_FALLBACK: Final = AppendFallback.APPEND_FALLBACK


class ClaimAlone(enum.Enum):
    """:meth:`ClaimStore.claim_many` could not run the batch for this task: claim it alone."""

    CLAIM_ALONE = "claim-alone"


CLAIM_ALONE: Final = ClaimAlone.CLAIM_ALONE


@dataclass(frozen=True)
class DuePageToken:
    """Where the next page of a due index starts (:meth:`ClaimStore.due_candidates`). Opaque to the engine: the
    store that issued it encodes and reads it; a claim job carries it to the claimer in a queue message as its
    JSON form :attr:`wire` (a text, or an object of texts) and hands it back as ``DuePageToken(wire)``."""

    wire: str | Mapping[str, str]


@dataclass(frozen=True)
class ClaimWanted:
    """A due candidate the tick wants to claim: the task and the occurrence it read from the due index."""

    user_id: str
    uuid: str
    expected_next_send_at_ms: int


@dataclass
class RunSnapshot:
    row: TaskRow
    subscription: PushSubscriptionRow | None
    outbox_seq: int
    policy: DeliveryPolicyRow | None = None
    # in a tenant's key space: the tenant's registry record, read in the same request when the registry lives in
    # the same table (None: not found there; run_task then asks the registry itself)
    tenant: TenantRecord | None = None


@dataclass
class Settlement:
    """What a fenced write after a claim does to the task (see docs/delivery.md).

    ``delete`` removes the task (one-shot success). ``status`` 'failed'/'sent' takes it out of the due index.
    Otherwise the task stays pending and becomes due again at ``retry_after_ms`` or ``next_send_at_ms``. Every
    settlement releases the lease unless ``keep_lease``.
    """

    next_send_at_ms: int
    delete: bool = False
    status: str | None = None
    retry_after_ms: int | None = None
    retry_count: int | Keep = KEEP
    last_error: str | Keep | None = KEEP  # JSON text; None clears it
    encrypted_payload: str | None = None  # rewritten only if the payload is unchanged since the claim
    payload_rev: int | None = None
    policy_deferred: bool = False  # ``retry_after_ms`` is a delivery-policy deferral (kept as ``deferred_until``)
    # the same occurrence stays pending (a retry, a hook's deferral, a released claim): an earlier policy
    # deferral's ``deferred_until`` stays its eligible time, from which DeliveryLatency and staleness count
    keep_deferral: bool = False
    # outbox rows pushed by this run and not yet marked delivered: marked in the same write when possible,
    # and marked in any case (whether or not the settlement itself applies)
    delivered: tuple[str, ...] = ()
    delivered_at_ms: int = 0
    payload_token: str | None = None  # the claimed row's split-payload token (its parts go with a delete)
    # the claimed row's id: a delivered one-shot's uuid registry entry is deleted while it names this task, with no
    # read of the task first (docs/decisions.md, 43)
    task_id: int | None = None
    # the claimed row's uuid registry entry expires by itself: a delivered one-shot leaves it (docs/decisions.md, 47)
    registry_expires: bool = False
    # every row the task names by message id is delivered (the occurrence settled with nothing unconfirmed): the
    # task stops naming them (docs/decisions.md, 45)
    clear_outbox_ids: bool = False


@dataclass
class DueCandidate:
    user_id: str
    uuid: str
    next_send_at_ms: int
    retry_count: int = 0
    retry_after_ms: int | None = None
    due_key: str = ""  # its key in the due index (eligible time, then uuid): the order "earlier due first"
