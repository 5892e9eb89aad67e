"""Cloud-data owners and resources (see docs/data-model.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class OwnerState:
    """One cloud-data owner item: retired iff not ``active``; ``generation`` counts retirements and restores."""

    owner_type: str
    owner_id: str
    active: bool
    generation: int
    updated_at: int | None


def guard_holds_for(state: OwnerState | None, generation: int) -> bool:
    """An owner guard at ``generation`` holds for the owner as read (no item: active at generation 0)."""
    if state is None:
        return generation == 0
    return state.active and state.generation == generation


def owners_in_order(states: list[OwnerState]) -> list[OwnerState]:
    """The order ``OwnerStore.list`` answers in: by (type, id)."""
    return sorted(states, key=lambda s: (s.owner_type, s.owner_id))


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
    identity: list[str]  # what names it within the user's type: [uuid], [namespace, key], [credId], ...
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
