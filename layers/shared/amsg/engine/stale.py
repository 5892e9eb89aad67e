"""Late tasks: the stale guard, expiring a late one-shot or fast-forwarding a late recurring task, and deferring
a fire (a hook's deferral that would wake too late for its occurrence settles the task as stale instead)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amsg.context import AppContext
from amsg.crypto import UserCodec, compact_json
from amsg.domain.recurrence import advance_occurrence, plan_next_occurrence
from amsg.domain.redaction import sanitize_error_summary
from amsg.engine.env import DeliveryEnv
from amsg.engine.fire import AgenticFire
from amsg.engine.outcomes import RECURRING, occurrence_text, record_cancelled, recurrence_of, with_last_error
from amsg.engine.summary import DeliverySummary, TaskEntry
from amsg.hooks import HookContext, call_hook, load_hooks
from amsg.observability import logger
from amsg.ports import OwnerClaim, Settlement, TaskRow
from amsg.task_payload import LastError, StoredPayload
from amsg.timeutil import iso_from_ms


def batch_outboxed(row: TaskRow) -> bool:
    """Whether the batch of the task's current occurrence is already in the outbox (an earlier run appended it)."""
    return row.outbox_occurrence_ms is not None and row.outbox_occurrence_ms == row.next_send_at_ms


def is_stale(row: TaskRow, now_ms: int, stale_after_ms: int) -> bool:
    deferred = row.deferred_until_ms
    if deferred is not None:  # the delivery policy moved it: late means late after the deferral's end
        return now_ms - deferred > stale_after_ms
    occurrence = row.next_send_at_ms or None
    if occurrence is None or now_ms - occurrence <= stale_after_ms:
        return False
    if row.retry_count == 0:
        return True
    retry_after = row.retry_after_ms
    return retry_after is not None and now_ms - retry_after > stale_after_ms


def settle_stale(
    ctx: AppContext, row: TaskRow, payload: StoredPayload, codec: UserCodec, summary: DeliverySummary | Any
) -> bool:
    """Expire a stale one-shot or fast-forward a stale recurring task (no push, no LLM)."""
    now = ctx.now_ms()
    occurrence = row.next_send_at_ms or now
    recurrence = payload.get("recurrenceType") or "none"
    last_error: LastError = {"at": iso_from_ms(now), "occurrence": occurrence_text(row), "reason": "stale"}
    entry: TaskEntry = {"taskId": row.id, "taskUuid": row.uuid, "reason": "stale"}
    if recurrence in RECURRING:
        plan = plan_next_occurrence(occurrence, recurrence, now, payload.get("tzId"))
        next_iso = iso_from_ms(plan.next_ms)
        last_error.update({"skippedCount": plan.skipped_count, "nextSendAt": next_iso})
        settlement = Settlement(next_send_at_ms=plan.next_ms, retry_count=0, last_error=compact_json(last_error))
        entry.update({"action": "fast_forwarded", "nextSendAt": next_iso, "skippedCount": plan.skipped_count})
    else:
        failed = compact_json(last_error)
        settlement = Settlement(next_send_at_ms=row.next_send_at_ms, status="failed", last_error=failed)
        entry.update({"action": "expired", "skippedCount": 1})
    settlement.encrypted_payload = with_last_error(payload, last_error, codec)
    settlement.payload_rev = row.rev
    try:
        written = ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, now)
    except Exception as exc:
        summary.failed_count += 1
        summary.failed.append(
            {"taskId": row.id, "reason": sanitize_error_summary(str(exc)), "status": "stale_update_failed"}
        )
        return False
    if written:
        summary.stale.append(entry)
        _stale_skip_hook(
            ctx, row, payload, codec, entry, occurrence, recurrence, plan if recurrence in RECURRING else None
        )
    return written


def _stale_skip_hook(
    ctx: AppContext,
    row: TaskRow,
    payload: StoredPayload,
    codec: UserCodec,
    entry: TaskEntry,
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
        codec,
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
    try:
        call_hook(hook, hook_row(row), info)
    except Exception as exc:
        logger.warning("hook failed", extra={"hook": "on_stale_skip", "error": type(exc).__name__})


@dataclass
class HookTaskRow:
    """The task as ``on_stale_skip`` receives it: the stored columns, times as the ISO text hosts have always
    seen (the engine's rows carry epoch ms; see docs/architecture.md)."""

    user_id: str
    uuid: str
    id: int
    encrypted_payload: str
    message_type: str
    next_send_at: str
    status: str = "pending"
    retry_count: int = 0
    last_error: str | None = None
    created_at: str = ""
    updated_at: str = ""
    lease_until: str | None = None
    retry_after: str | None = None
    serialize_group: str | None = None
    claim_version: int = 0
    rev: int = 0
    payload_token: str | None = None
    outbox_occurrence: str | None = None
    correlation_id: str | None = None
    owner: OwnerClaim | None = None
    deferred_until: str | None = None


def hook_row(row: TaskRow) -> HookTaskRow:
    def iso(ms: int | None) -> str | None:
        return None if ms is None else iso_from_ms(ms)

    return HookTaskRow(
        **{name: getattr(row, name) for name in _SAME_FIELDS},
        next_send_at=iso(row.next_send_at_ms or None) or "",
        created_at=iso(row.created_at_ms) or "",
        updated_at=iso(row.updated_at_ms) or "",
        lease_until=iso(row.lease_until_ms),
        retry_after=iso(row.retry_after_ms),
        outbox_occurrence=iso(row.outbox_occurrence_ms),
        deferred_until=iso(row.deferred_until_ms),
    )


_SAME_FIELDS = (
    "user_id",
    "uuid",
    "id",
    "encrypted_payload",
    "message_type",
    "status",
    "retry_count",
    "last_error",
    "serialize_group",
    "claim_version",
    "rev",
    "payload_token",
    "correlation_id",
    "owner",
)


def defer_task(
    ctx: AppContext,
    row: TaskRow,
    payload: StoredPayload,
    codec: UserCodec,
    retry_after_ms: int,
    summary: DeliverySummary,
    *,
    policy: bool = False,
) -> None:
    """A hook or the delivery policy deferred the fire: move it to ``retry_after_ms`` without consuming a retry.

    A hook's deferral settles the task as stale once the wake-up would be too late for this occurrence (that
    is what ends endless defers). A policy deferral is not a lateness: the occurrence is kept however long the
    quiet window or the cap lasts, and staleness counts from the deferral's end (``deferred_until``); only a
    recurring task whose next occurrence is reached before the wake-up is settled by the stale rules
    (fast-forwarded), so an occurrence never overtakes the next one."""
    occurrence = row.next_send_at_ms or None
    wake = retry_after_ms
    if occurrence is not None and not policy and wake - occurrence > ctx.settings.stale_after_ms:
        settle_stale(ctx, row, payload, codec, summary)
        return
    recurrence = recurrence_of(payload)
    next_due = (
        advance_occurrence(occurrence, recurrence, 1, payload.get("tzId"))
        if policy and occurrence is not None and recurrence != "none"
        else None
    )
    if next_due is not None and next_due <= wake:
        settle_stale(ctx, row, payload, codec, summary)
        return
    settlement = Settlement(
        next_send_at_ms=row.next_send_at_ms, retry_after_ms=retry_after_ms, policy_deferred=policy, keep_deferral=True
    )
    try:
        written = ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, ctx.now_ms())
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
        {
            "taskId": row.id,
            "retryAfter": iso_from_ms(retry_after_ms),
            **({"reason": "delivery_policy"} if policy else {}),
        }
    )
