"""The message outbox (see docs/delivery.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from amsg.ports.delivery_policy import CapCharge
from amsg.ports.tasks import OwnerClaim

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
    # the task's one-transaction append records this row's message id on the task (``TaskRow.outbox_message_ids``)
    # instead of writing it to the by-task index: the readers of a task's rows find it there (docs/decisions.md, 45)
    named_by_task: bool = False


# the most characters of message ids a task names (``ob_mids``): a few ids (~30 characters each) keep an
# ordinary task under the 1 KB DynamoDB bills a write by; more would make every later write of it dearer
MAX_NAMED_CHARS = 256


def names_on_task(named: Sequence[str], rows: Sequence[OutboxAppend]) -> tuple[str, ...] | None:
    """What the task's ``ob_mids`` becomes when the one-transaction append writes ``rows``: the ids it names
    (``named``, as read under the claim) and those of the rows it names from now on; None when nothing changes
    or the list would pass :data:`MAX_NAMED_CHARS` (then every row gets its by-task index entry); only printable
    ids are named (a store may separate them with a control character)."""
    new = [row.message_id for row in rows if row.named_by_task and row.task_uuid is not None]
    if not new or not all(message_id.isprintable() for message_id in new):
        return None
    merged = tuple(dict.fromkeys([*named, *new]))
    return merged if sum(len(message_id) for message_id in merged) <= MAX_NAMED_CHARS else None


@dataclass(frozen=True)
class ClaimFence:
    """A delivery run's claim on the task whose rows it writes: the write commits only while the task is pending
    under ``claim_version`` with its lease unexpired at ``now_ms`` (else :class:`amsg.errors.ClaimLost`)."""

    task_uuid: str
    claim_version: int
    now_ms: int


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
    sending_cv: int | None = None  # the task claim version of that run (only it may hand the row back)
    unconfirmed_at: int | None = None  # its push left and no answer came: never pushed again, waits for the pull


class OutboxStore(Protocol):
    """The per-user outbox. Every method is scoped to one user partition.

    Ids are positive integers, strictly increasing per user in commit order (a per-user counter compare-and-set
    inside the append transaction), never reused, never changed; a row's id is the ``GET /outbox`` cursor.
    Retention is TTL-driven (28 d after ``created_at``; after an ack min(that, ack + 7 d)); readers that the
    client observes (:meth:`list_unacked`, :meth:`ack`, :meth:`delete` counts) treat expired rows as absent.
    """

    # -- engine-facing ------------------------------------------------------------------------------------

    def append(self, user_id: str, rows: Sequence[OutboxAppend], *, fence: ClaimFence | None = None) -> list[int]:
        """Upsert on ``(user_id, message_id)``; returns the row id of each input row, in input order.

        ``fence`` (a delivery run's appends): each transaction also checks the run's task claim, and
        :class:`amsg.errors.ClaimLost` is raised (nothing of that transaction written) once it no longer holds,
        so a superseded run never re-arms rows the newer claim works.

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

    def release_send(self, user_id: str, message_id: str, *, claim_version: int | None = None) -> None:
        """Undo :meth:`claim_send` after a push that surely did not go out, so a retry may send the row again.
        With ``claim_version`` only the send claim that claim took is handed back (a run releases nothing of
        another's); an unconfirmed or delivered row is never released."""
        ...

    def mark_unconfirmed(self, user_id: str, message_id: str, at_ms: int) -> bool:
        """Record that the row's push left without an answer (``unconfirmed_at``): it keeps its send claim for
        good, so nobody pushes it again; the client pulls it. False when the row is gone, delivered or unclaimed."""
        ...

    def mark_delivered(self, user_id: str, message_ids: Sequence[str], at_ms: int) -> int:
        """Set ``delivered_at = at_ms`` on the existing rows (whatever their ack state); returns rows touched."""
        ...

    def discard_undelivered(self, user_id: str, message_ids: Sequence[str]) -> int:
        """Delete the given rows that were neither delivered nor acked; count."""
        ...

    def discard_undelivered_for_task(
        self, user_id: str, task_uuid: str, *, claim_version: int | None = None, named: Sequence[str] = ()
    ) -> int:
        """Delete the task's rows nobody received; count. ``named``: the message ids the task records
        (``TaskRow.outbox_message_ids``), rows that no by-task index holds.

        Without ``claim_version`` (the API's cancel and update, which delete the task first: the user no longer
        wants any of it) every row neither delivered nor acked. With it (a delivery run's cancellation) only rows
        nobody took for sending (a claimed row may have been pushed), each delete committing only while the task
        still carries that claim version and is no longer pending, i.e. the run itself ended it: a superseded
        run, or one whose task was deleted or claimed again, deletes nothing (docs/delivery.md, fencing)."""
        ...

    def list_for_task(
        self, user_id: str, task_uuid: str, *, since_ms: int = 0, limit: int = 500, named: Sequence[str] = ()
    ) -> list[OutboxRow]:
        """The task's rows with ``created_at >= since_ms`` in any state, ordered by (created_at, id), at most
        ``limit`` (strongly consistent; used to redeliver a committed batch); ``named`` as for
        :meth:`discard_undelivered_for_task`."""
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
