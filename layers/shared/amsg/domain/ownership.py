"""Cloud-data ownership of ordinary writes: who owns a task, a client-state key or a credential.

A write may say which host-defined owner (``{type, id, label?}``, e.g. a character) a resource belongs to and
which generation of that owner it was made for (``ownerGeneration``, default 0). An owner starts active at
generation 0; retiring or restoring it adds one to its generation. A write for an owner commits only while the
owner is active at the generation it asserts, checked in the same transaction as the write (see
docs/data-model.md), so nothing captured before a retirement can land after it, not even after a restore.

This module is pure: it validates what a request says and builds the value the adapters store. The adapters
decide against what is stored (ownership already recorded on an item cannot be changed by an ordinary write).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from amsg.crypto import UserCodec, compact_json
from amsg.domain.jsvalues import is_plain_object
from amsg.errors import CloudGuardError
from amsg.jsonio import JsonObject
from amsg.ports import OwnerClaim
from amsg.task_payload import OwnerGuard, PublicOwner

OWNER_TYPE_MAX = 100
OWNER_ID_MAX = 300
MAX_SAFE_INTEGER = 2**53 - 1
# The guard a task carries inside its encrypted payload (clients cannot set it: it is replaced on every write).
GUARD_FIELD: Final = "__cloudOwnerGuard"


def owner_ref(owner_type: str, owner_id: str) -> str:
    """The stable reference of an owner inside one user's data: sha256 of the compact JSON ``[type, id]``."""
    return hashlib.sha256(compact_json([owner_type, owner_id]).encode("utf-8", "surrogatepass")).hexdigest()


def valid_owner(owner: Any) -> bool:
    """The write-time rule: ``type`` ≤ 100 and ``id`` ≤ 300 characters, both non-blank after trimming."""
    if not is_plain_object(owner):
        return False
    kind, ident = owner.get("type"), owner.get("id")
    return (
        isinstance(kind, str)
        and isinstance(ident, str)
        and bool(kind.strip())
        and bool(ident.strip())
        and len(kind) <= OWNER_TYPE_MAX
        and len(ident) <= OWNER_ID_MAX
    )


def valid_cloud_owner(owner: Any) -> TypeGuard[JsonObject]:
    """The management-route rule: the same lengths, non-empty but not trimmed (a blank id passes)."""
    if not is_plain_object(owner):
        return False
    kind, ident = owner.get("type"), owner.get("id")
    return (
        isinstance(kind, str)
        and isinstance(ident, str)
        and 0 < len(kind) <= OWNER_TYPE_MAX
        and 0 < len(ident) <= OWNER_ID_MAX
        and ("label" not in owner or owner["label"] is None or isinstance(owner["label"], str))
    )


def public_owner(owner: Mapping[str, Any]) -> PublicOwner:
    """``{type, id, label?}`` (a label only when it is a string)."""
    out: PublicOwner = {"type": owner["type"], "id": owner["id"]}
    if isinstance(owner.get("label"), str):
        out["label"] = owner["label"]
    return out


def asserted_generation(value: Any) -> int:
    """``ownerGeneration``: absent or null means 0; otherwise a safe integer ≥ 0."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise CloudGuardError("INVALID_CLOUD_OWNER_GENERATION", "ownerGeneration 必须是非负安全整数")
    if not 0 <= int(value) <= MAX_SAFE_INTEGER:
        raise CloudGuardError("INVALID_CLOUD_OWNER_GENERATION", "ownerGeneration 必须是非负安全整数")
    return int(value)


@dataclass(frozen=True)
class Ownership:
    """What one write says: its owner (or none), its kind and the generation it asserts."""

    owner: JsonObject | None
    kind: str | None
    generation: int

    def claim(self, codec: UserCodec) -> OwnerClaim | None:
        """The adapter's view: owner reference, asserted generation and the encrypted ownership record."""
        if self.owner is None:
            return None
        record = {"owner": public_owner(self.owner), "kind": self.kind, "generation": self.generation}
        return OwnerClaim(
            ref=owner_ref(self.owner["type"], self.owner["id"]),
            generation=self.generation,
            meta=codec.encrypt(compact_json(record)),
        )

    def guard_field(self) -> OwnerGuard | None:
        """The ``__cloudOwnerGuard`` value a task payload carries (None for an unowned task)."""
        if self.owner is None:
            return None
        return {"owner": public_owner(self.owner), "generation": self.generation}


def ownership_of(explicit: Mapping[str, Any]) -> Ownership:
    """Read ``owner`` (or ``metadata.cloudOwner``), ``kind`` and ``ownerGeneration`` from a payload or an entry.

    Raises :class:`CloudGuardError` (``INVALID_CLOUD_OWNER`` / ``INVALID_CLOUD_OWNER_GENERATION``): ordinary
    endpoints answer it as 409.
    """
    owner = explicit.get("owner")
    if owner is None:
        metadata = explicit.get("metadata")
        if is_plain_object(metadata):
            owner = metadata.get("cloudOwner")
    kind = explicit.get("kind")
    if not isinstance(kind, str):
        kind = None
    generation = asserted_generation(explicit.get("ownerGeneration"))
    if owner is None:
        return Ownership(None, kind, generation)
    if not valid_owner(owner):
        raise CloudGuardError("INVALID_CLOUD_OWNER", "owner 必须是 {type, id}，type ≤ 100、id ≤ 300 个非空字符")
    return Ownership(dict(owner), kind, generation)
