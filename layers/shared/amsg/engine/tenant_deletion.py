"""Deleting a tenant (docs/tenancy-data.md): the operator starts it, the tick carries it out in bounded steps.

Starting marks the tenant ``deleting`` in the registry, after which nothing of it runs: its tokens are refused at
the edge, the tick no longer claims its tasks, run_task delivers none of its queued messages, and a delivery
already running takes no further push (each push claim checks the tenant's record in its own transaction).
Each tick then advances every pending deletion by whole Scan pages while it has time; a deletion finishes after
a pass that found nothing and began once every delivery that could have been running at the start has ended
(``grace_ms``), removing the registry record last.
"""

from __future__ import annotations

from collections.abc import Callable

from amsg.config import ConfigError
from amsg.context import AppContext
from amsg.ports.tenants import DELETING

# a run_task invocation lasts at most 15 minutes: a delivery running when the deletion started has ended by then
DELETION_GRACE_MS = 15 * 60_000
STEP_TIME_MARGIN_MS = 5_000


def start_tenant_deletion(ctx: AppContext, tenant_id: str) -> None:
    """Begin deleting a tenant and all of its data (the CLI's ``amsg tenants delete``). Idempotent. The work is
    recorded before the status changes, so a crash in between never leaves a deleting tenant nobody cleans."""
    registry, purge = ctx.tenant_registry, ctx.tenant_purge
    if registry is None or purge is None:
        raise ConfigError("tenant deletion needs the multi-tenant line (AMSG_TENANCY=multi)")
    now = ctx.now_ms()
    purge.start(tenant_id, now)
    registry.set_status(tenant_id, DELETING, now)  # TenantNotFound: the recorded work just sweeps leftovers


def advance_tenant_deletions(
    ctx: AppContext, remaining_ms: Callable[[], int], *, grace_ms: int = DELETION_GRACE_MS
) -> dict[str, int]:
    """Advance every pending deletion while there is time; the counts for the tick's summary."""
    purge = ctx.tenant_purge
    if purge is None:
        return {}
    deleted = finished = 0
    for tenant_id in purge.pending():
        while remaining_ms() > STEP_TIME_MARGIN_MS:
            progress = purge.step(tenant_id, ctx.now_ms(), grace_ms=grace_ms)
            deleted += progress.deleted
            if progress.finished:
                finished += 1
                break
            if progress.waiting:
                break  # the grace period: a later tick makes the last pass
    return {"tenantItemsDeleted": deleted, "tenantDeletionsFinished": finished}
