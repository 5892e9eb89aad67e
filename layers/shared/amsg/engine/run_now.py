"""``runTask(uuid)``: run one task now through the same chain as run_task, claiming for itself (``amsg run-task``
on the command line, or in process). Instant messages are :mod:`amsg.engine.instant`."""

from __future__ import annotations

import uuid as uuid_lib

from amsg.context import AppContext
from amsg.engine.claiming import SKIP, serialize_group
from amsg.engine.env import delivery_env
from amsg.engine.run_task import deliver_under_lease
from amsg.engine.summary import DeliverySummary
from amsg.hooks import load_hooks
from amsg.jsonio import JsonObject
from amsg.timeutil import iso_from_ms


def run_task_now(ctx: AppContext, task_uuid: str, *, owner: str | None = None) -> JsonObject:
    """Run one task now (CLI / in-process) with the reference's reasons when it cannot run."""
    if not isinstance(task_uuid, str) or not task_uuid.strip():
        raise TypeError("runTask requires a non-empty uuid")
    env = delivery_env(ctx)
    if env.push_sender is None:
        return {
            "ran": False,
            "reason": "not_configured",
            "detail": ctx.delivery.push_problem or "push is not configured",
        }
    row = ctx.tasks.find_task(task_uuid.strip())
    if row is None:
        return {"ran": False, "reason": "not_found"}
    if row.status != "pending":
        return {"ran": False, "reason": "already_settled", "status": row.status}
    now = ctx.now_ms()
    if row.next_send_at_ms > now:
        return {"ran": False, "reason": "not_due", "nextSendAt": iso_from_ms(row.next_send_at_ms)}
    if row.retry_after_ms is not None and row.retry_after_ms > now:
        return {"ran": False, "reason": "retry_pending", "retryAfter": iso_from_ms(row.retry_after_ms)}
    owner = owner or f"runTask:{uuid_lib.uuid4()}"
    group = serialize_group(ctx, load_hooks(ctx.settings.hooks_module), row.user_id, row.uuid, None)
    claimed = None
    if group is not SKIP:
        claimed = ctx.claims.claim(
            row.user_id,
            row.uuid,
            expected_next_send_at_ms=row.next_send_at_ms,
            now_ms=now,
            lease_until_ms=now + ctx.settings.run_lease_ms,
            owner=owner,
            group=group,
        )
    if claimed is None:
        summary = DeliverySummary(total_tasks=1, claim_skipped=1)
        return {"ran": True, "summary": summary.as_dict(started_ms=now, now_ms=ctx.now_ms())}
    return {"ran": True, "summary": deliver_under_lease(ctx, claimed, env, owner, now)}
