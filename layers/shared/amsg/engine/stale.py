"""Late tasks: the stale guard, expiring a late one-shot or fast-forwarding a late recurring task, and deferring
a fire (a hook's deferral that would wake too late for its occurrence settles the task as stale instead)."""

from __future__ import annotations

from typing import Any

from amsg.context import AppContext
from amsg.crypto import compact_json
from amsg.domain.recurrence import advance_occurrence, plan_next_occurrence
from amsg.domain.redaction import sanitize_error_summary
from amsg.engine.env import DeliveryEnv
from amsg.engine.fire import AgenticFire
from amsg.engine.outcomes import RECURRING, record_cancelled, recurrence_of, with_last_error
from amsg.engine.summary import DeliverySummary
from amsg.hooks import HookContext, call_hook, load_hooks
from amsg.observability import logger
from amsg.ports import Settlement, TaskRow
from amsg.timeutil import iso_from_ms, parse_iso_ms


def is_stale(row: TaskRow, now_ms: int, stale_after_ms: int) -> bool:
    deferred = parse_iso_ms(row.deferred_until) if row.deferred_until else None
    if deferred is not None:  # the delivery policy moved it: late means late after the deferral's end
        return now_ms - deferred > stale_after_ms
    occurrence = parse_iso_ms(row.next_send_at)
    if occurrence is None or now_ms - occurrence <= stale_after_ms:
        return False
    if row.retry_count == 0:
        return True
    retry_after = parse_iso_ms(row.retry_after) if row.retry_after else None
    return retry_after is not None and now_ms - retry_after > stale_after_ms


def settle_stale(
    ctx: AppContext, row: TaskRow, payload: dict[str, Any], user_key: str, summary: DeliverySummary | Any
) -> bool:
    """Expire a stale one-shot or fast-forward a stale recurring task (no push, no LLM)."""
    now = ctx.now_ms()
    occurrence = parse_iso_ms(row.next_send_at) or now
    recurrence = payload.get("recurrenceType") or "none"
    last_error: dict[str, Any] = {"at": iso_from_ms(now), "occurrence": row.next_send_at, "reason": "stale"}
    entry: dict[str, Any] = {"taskId": row.id, "taskUuid": row.uuid, "reason": "stale"}
    if recurrence in RECURRING:
        plan = plan_next_occurrence(occurrence, recurrence, now, payload.get("tzId"))
        next_iso = iso_from_ms(plan.next_ms)
        last_error.update({"skippedCount": plan.skipped_count, "nextSendAt": next_iso})
        settlement = Settlement(next_send_at=next_iso, retry_count=0, last_error=compact_json(last_error))
        entry.update({"action": "fast_forwarded", "nextSendAt": next_iso, "skippedCount": plan.skipped_count})
    else:
        settlement = Settlement(next_send_at=row.next_send_at, status="failed", last_error=compact_json(last_error))
        entry.update({"action": "expired", "skippedCount": 1})
    settlement.encrypted_payload = with_last_error(payload, last_error, user_key)
    settlement.payload_rev = row.rev
    try:
        written = ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, iso_from_ms(now))
    except Exception as exc:
        summary.failed_count += 1
        summary.failed.append(
            {"taskId": row.id, "reason": sanitize_error_summary(str(exc)), "status": "stale_update_failed"}
        )
        return False
    if written:
        summary.stale.append(entry)
        _stale_skip_hook(
            ctx, row, payload, user_key, entry, occurrence, recurrence, plan if recurrence in RECURRING else None
        )
    return written


def _stale_skip_hook(
    ctx: AppContext,
    row: TaskRow,
    payload: dict[str, Any],
    user_key: str,
    entry: dict[str, Any],
    occurrence: int,
    recurrence: str,
    plan: Any,
) -> None:
    """``on_stale_skip(row, info)``: best-effort, after the stale settle was written."""
    hook = load_hooks(ctx.settings.hooks_module).on_stale_skip
    if hook is None:
        return
    fire = AgenticFire(
        ctx,
        row,
        payload,
        user_key,
        DeliveryEnv(push_sender=ctx.delivery.push_sender, llm=None),
        load_hooks(ctx.settings.hooks_module),
    )
    metadata = payload.get("metadata")
    info = HookContext(
        fire,
        guarded_writes=False,
        task=fire.view,
        user_id=row.user_id,
        now=fire.now,
        scratch=fire.scratch,
        reason="stale",
        action=entry["action"],
        metadata=metadata if isinstance(metadata, dict) else None,
        recurrence_type=payload.get("recurrenceType") or "none",
        occurrence_ms=occurrence,
        skipped_count=entry["skippedCount"],
        skipped_occurrences=list(plan.skipped_occurrences) if plan is not None else [occurrence],
        skipped_truncated=bool(plan.skipped_truncated) if plan is not None else False,
        next_send_at=entry.get("nextSendAt"),
    )
    safe_row = TaskRow(**{**row.__dict__})
    try:
        call_hook(hook, safe_row, info)
    except Exception as exc:
        logger.warning("hook failed", extra={"hook": "on_stale_skip", "error": type(exc).__name__})


def defer_task(
    ctx: AppContext,
    row: TaskRow,
    payload: dict[str, Any],
    user_key: str,
    retry_after: str,
    summary: DeliverySummary,
    *,
    policy: bool = False,
) -> None:
    """A hook or the delivery policy deferred the fire: move it to ``retry_after`` without consuming a retry.

    A hook's deferral settles the task as stale once the wake-up would be too late for this occurrence (that
    is what ends endless defers). A policy deferral is not a lateness: the occurrence is kept however long the
    quiet window or the cap lasts, and staleness counts from the deferral's end (``deferred_until``); only a
    recurring task whose next occurrence is reached before the wake-up is settled by the stale rules
    (fast-forwarded), so an occurrence never overtakes the next one."""
    occurrence = parse_iso_ms(row.next_send_at)
    wake = parse_iso_ms(retry_after) or ctx.now_ms()
    if occurrence is not None and not policy and wake - occurrence > ctx.settings.stale_after_ms:
        settle_stale(ctx, row, payload, user_key, summary)
        return
    recurrence = recurrence_of(payload)
    next_due = (
        advance_occurrence(occurrence, recurrence, 1, payload.get("tzId"))
        if policy and occurrence is not None and recurrence != "none"
        else None
    )
    if next_due is not None and next_due <= wake:
        settle_stale(ctx, row, payload, user_key, summary)
        return
    settlement = Settlement(
        next_send_at=row.next_send_at, retry_after=retry_after, policy_deferred=policy, keep_deferral=True
    )
    try:
        written = ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, iso_from_ms(ctx.now_ms()))
    except Exception as exc:
        summary.failed_count += 1
        summary.failed.append(
            {"taskId": row.id, "reason": sanitize_error_summary(str(exc)), "status": "defer_update_failed"}
        )
        return
    if not written:
        record_cancelled(ctx, row, summary, "cancelled_mid_delivery")
        return
    summary.deferred.append(
        {"taskId": row.id, "retryAfter": retry_after, **({"reason": "delivery_policy"} if policy else {})}
    )
