"""The tenant registry of the multi-tenant line (docs/tenancy.md).

A tenant record holds the tenant's master key wrapped by the stack's KMS key (never in plaintext), its status
and the second before which its tokens are refused (rotation revokes every earlier token at once without a
claim the reference's token format does not have).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

ACTIVE = "active"
DISABLED = "disabled"
DELETING = "deleting"
STATUSES = frozenset({ACTIVE, DISABLED, DELETING})


@dataclass(frozen=True)
class TenantRecord:
    tenant_id: str
    wrapped_master_key: str  # KMS envelope, never plaintext
    token_generation: int  # bumped by every rotation
    status: str  # "active" | "disabled" | "deleting"
    created_at_ms: int
    updated_at_ms: int
    tokens_not_before_s: int = 0  # a token whose iat is earlier is refused (docs/tenancy.md, revocation)
    master_key_fingerprint: str = ""  # first 16 hex chars of SHA-256 of the master key (the reference's)
    rate_limit_rps: int | None = None  # this tenant's requests per second (None: the deployment's default)


@dataclass(frozen=True)
class TenantPage:
    records: list[TenantRecord]
    cursor: str | None  # None: the last page


class TenantExists(Exception):
    """``create`` lost: a tenant with this id exists already."""


class TenantInactive(Exception):
    """A push was about to be taken for a tenant that is no longer active (being deleted, or disabled): the
    claim's transaction checked the tenant's record and nothing was taken (docs/tenancy-data.md)."""


class TenantNotFound(Exception):
    """The tenant does not exist (or no longer does)."""


class TenantStore(Protocol):
    """The registry. ``create`` is a conditional write: of concurrent creates of one id exactly one wins."""

    def create(self, record: TenantRecord) -> None: ...  # raises TenantExists

    def get(self, tenant_id: str) -> TenantRecord | None: ...

    def list_page(self, cursor: str | None = None, limit: int = 100) -> TenantPage: ...

    def set_status(self, tenant_id: str, status: str, now_ms: int) -> TenantRecord: ...  # raises TenantNotFound

    def rotate_tokens(self, tenant_id: str, not_before_s: int, now_ms: int) -> TenantRecord: ...  # TenantNotFound

    def set_rate_limit(self, tenant_id: str, rps: int | None, now_ms: int) -> TenantRecord: ...  # TenantNotFound

    def count_request(self, tenant_id: str, second: int, limit: int) -> bool: ...

    def usage(self, tenant_id: str, due_shards: int) -> dict[str, int]: ...

    #   what the tenant holds now, counted from its indexes: pendingTasks, settledTasks
    #   counts one request in the tenant's window of ``second``; False (nothing counted) once ``limit`` are in it


class KeyWrapper(Protocol):
    """Envelope encryption of a tenant's master key; the tenant id is bound to the ciphertext, so a wrapped
    key copied into another tenant's record does not unwrap."""

    def wrap(self, tenant_id: str, plaintext: bytes) -> str: ...

    def unwrap(self, tenant_id: str, wrapped: str) -> bytes: ...  # raises KeyUnwrapError


class KeyUnwrapError(Exception):
    """The wrapped key does not decrypt for this tenant (tampered, moved, or the KMS key is unusable)."""


class MasterKeys(Protocol):
    def master_key(self, tenant_id: str) -> str | None: ...  # lowercase hex; None when unknown/disabled/deleting


@dataclass(frozen=True)
class TenantAccess:
    record: TenantRecord
    master_key: str  # lowercase hex


class TenantAccessor(MasterKeys, Protocol):
    """What the edge authenticates with: the active tenant's record (its revocation bound) and master key."""

    def tenant(self, tenant_id: str) -> TenantAccess | None: ...

    def access_of(self, record: TenantRecord | None) -> TenantAccess | None: ...  # of a record read just now


class TenantDirectory(Protocol):
    def active_tenant_ids(self) -> list[str]: ...
