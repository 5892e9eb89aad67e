"""Client state (see docs/data-model.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from amsg.ports.tasks import OwnerClaim

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
