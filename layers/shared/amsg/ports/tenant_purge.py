"""Deleting a tenant's data as resumable background work (docs/tenancy-data.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PurgeProgress:
    tenant_id: str
    deleted: int  # items removed by this step
    finished: bool  # the tenant's namespace is empty and its registry record is gone
    waiting: bool = False  # nothing to do until the grace period has passed


@dataclass(frozen=True)
class PurgeStatus:
    """Where a pending deletion stands (for an operator waiting on it)."""

    tenant_id: str
    started_at_ms: int
    deleted: int  # items removed so far
    clean_pass: bool  # a whole pass found nothing: it finishes once the grace period has passed


class TenantPurge(Protocol):
    def start(self, tenant_id: str, now_ms: int) -> None:
        """Record that the tenant's data is to be deleted (idempotent: a second start keeps the progress)."""
        ...

    def pending(self) -> list[str]:
        """Tenants whose deletion has started and not finished."""
        ...

    def status(self, tenant_id: str) -> PurgeStatus | None:
        """The deletion's progress; None when none is pending (never started, or finished)."""
        ...

    def step(self, tenant_id: str, now_ms: int, *, grace_ms: int) -> PurgeProgress:
        """One bounded step: remove one page of the tenant's items, remember where to resume. Finishes only
        after a whole pass that found nothing and began at least ``grace_ms`` after the deletion started (a
        delivery already running then has ended), removing the deletion record and the registry record."""
        ...
