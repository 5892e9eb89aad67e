"""Settling what a run did (see docs/delivery.md): success (delete a one-shot, move a recurring task to its next
occurrence), failure (retry with back-off, or settle terminally), cancellation, retirement of the owner, a claim
handed back. Every write is fenced by the claim version."""

from __future__ import annotations

from dataclasses import dataclass

from amsg.context import AppContext
from amsg.crypto import UserCodec, compact_json
from amsg.domain.recurrence import plan_next_occurrence
from amsg.domain.redaction import sanitize_error_summary
from amsg.engine.env import DeliveryEnv
from amsg.engine.summary import DeliverySummary, TaskEntry
from amsg.failures import PushSendError, is_permanent_push_status
from amsg.observability import logger
from amsg.ports import Settlement, TaskRow
from amsg.task_payload import LastError, StoredPayload
from amsg.timeutil import iso_from_ms

RETRY_STEP_MS = 120_000
OWNER_RETIRED = "owner_retired"
PERMANENT_CODES = frozenset(
    {"PUSH_SUBSCRIPTION_MISSING", "PUSH_SUBSCRIPTION_STORE_UNSUPPORTED", "PUSH_PAYLOAD_TOO_LARGE"}
)
RECURRING = ("daily", "weekly")
CANCELLED_REASON = "任务在投递期间被取消或顶替"
TENANT_INACTIVE = "tenant_inactive"  # a cancelled entry's status: the tenant is being deleted or disabled


def recurrence_of(payload: StoredPayload | None) -> str:
    value = (payload or {}).get("recurrenceType")
    return value if value in RECURRING else "none"  # missing means none, on every path


def with_last_error(payload: StoredPayload | None, last_error: LastError | None, codec: UserCodec) -> str | None:
    if payload is None:
        return None
    updated = dict(payload)
    if last_error is None:
        if "lastError" not in updated:
            return None
        updated.pop("lastError")
    else:
        updated["lastError"] = last_error
    return codec.encrypt(compact_json(updated))


def occurrence_text(row: TaskRow) -> str:
    """The occurrence as ``last_error`` records it (the stored ISO text; empty when the task has none)."""
    return iso_from_ms(row.next_send_at_ms) if row.next_send_at_ms else ""


def finalize_success(
    ctx: AppContext,
    row: TaskRow,
    payload: StoredPayload,
    summary: DeliverySummary,
    delivered: list[str] | None = None,
    *,
    clear_named: bool = False,
) -> bool:
    now = ctx.now_ms()
    recurrence = recurrence_of(payload)
    if recurrence == "none":
        settlement = Settlement(
            next_send_at_ms=row.next_send_at_ms,
            delete=True,
            payload_rev=row.rev,
            payload_token=row.payload_token,
            task_id=row.id,
            registry_expires=row.registry_expires_s is not None,
        )
    else:
        occurrence = row.next_send_at_ms or now
        next_ms = plan_next_occurrence(occurrence, recurrence, now, payload.get("tzId")).next_ms
        codec = ctx.codec(row.user_id)
        settlement = Settlement(
            next_send_at_ms=next_ms,
            retry_count=0,
            last_error=None,
            encrypted_payload=with_last_error(payload, None, codec),
            payload_rev=row.rev,
            clear_outbox_ids=clear_named,
        )
    settlement.delivered, settlement.delivered_at_ms = tuple(delivered or ()), now
    try:
        written = ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, now)
    except Exception as exc:
        _settlement_left_for_later(row, summary, exc)
        return False
    if not written:
        record_cancelled(ctx, row, summary, "cancelled_after_delivery")
        return False
    summary.success_count += 1
    if recurrence == "none":
        summary.deleted_once_off += 1
    else:
        summary.updated_recurring += 1
    return True


def _settlement_left_for_later(row: TaskRow, summary: DeliverySummary, exc: Exception) -> None:
    """Pushes went out but the settlement failed through every retry. No second, simpler write: it would leave
    the task half-settled (a one-shot `sent` for good, a recurring one with a stale lastError). The task stays
    pending under our claim; once the lease expires a later tick claims it again and its run finds the batch
    handed over, so it settles it as delivered (delete or reschedule, lastError cleared) without pushing."""
    summary.failed_count += 1
    summary.failed.append(
        {
            "taskId": row.id,
            "reason": sanitize_error_summary(str(exc)),
            "messageDelivered": True,
            "status": "post_send_settlement_deferred",
        }
    )


def fail_task(
    ctx: AppContext,
    row: TaskRow,
    payload: StoredPayload | None,
    codec: UserCodec,
    exc: BaseException,
    summary: DeliverySummary,
    env: DeliveryEnv,
) -> None:
    """Retry with back-off, or settle terminally. The outcome is written before SQS is acked, so a crash redelivers."""
    now = ctx.now_ms()
    info = failure_info(exc, row, now)
    reason, permanent, last_error = info.reason, info.permanent, info.last_error
    limit = getattr(exc, "retry_limit", None)
    if not isinstance(limit, int):
        limit = env.max_retries if env.max_retries is not None else ctx.settings.max_delivery_retries
    raw_last_error: LastError = {**last_error, "reason": reason}
    recurrence = recurrence_of(payload)
    summary.failed_count += 1
    entry: TaskEntry = {"taskId": row.id, "reason": last_error["reason"]}
    if permanent or row.retry_count >= limit:
        if recurrence != "none":
            occurrence = row.next_send_at_ms or now
            next_ms = plan_next_occurrence(occurrence, recurrence, now, (payload or {}).get("tzId")).next_ms
            settlement = Settlement(next_send_at_ms=next_ms, retry_count=0, last_error=compact_json(last_error))
            entry.update(
                {"retryCount": row.retry_count, "status": "occurrence_skipped", "nextSendAt": iso_from_ms(next_ms)}
            )
        else:
            settlement = Settlement(
                next_send_at_ms=row.next_send_at_ms, status="failed", last_error=compact_json(last_error)
            )
            entry.update({"retryCount": row.retry_count, "status": "permanently_failed"})
        if permanent:
            entry["permanent"] = True
        settlement.encrypted_payload = with_last_error(payload, raw_last_error, codec)
        settlement.payload_rev = row.rev
    else:
        retry_at = now + (row.retry_count + 1) * RETRY_STEP_MS
        settlement = Settlement(
            next_send_at_ms=row.next_send_at_ms,
            retry_after_ms=retry_at,
            keep_deferral=True,
            retry_count=row.retry_count + 1,
            last_error=compact_json(last_error),
        )
        entry.update({"retryCount": row.retry_count + 1, "nextRetryAt": iso_from_ms(retry_at)})
    try:
        written = ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, now)
    except Exception as write_error:
        entry.update({"status": "retry_update_failed", "updateError": sanitize_error_summary(str(write_error))})
        summary.failed.append(entry)
        raise
    if not written:
        summary.failed_count -= 1
        record_cancelled(ctx, row, summary, "cancelled_mid_delivery")
        return
    summary.failed.append(entry)


@dataclass
class FailureInfo:
    reason: str
    code: str | None
    push_status: int | None
    permanent: bool
    last_error: LastError


def failure_info(exc: BaseException, row: TaskRow, now_ms: int) -> FailureInfo:
    """Classify a failed attempt and build the sanitized ``last_error`` (no secret in it)."""
    reason = str(getattr(exc, "message", None) or exc) or type(exc).__name__
    code = getattr(exc, "code", None)
    code = code if isinstance(code, str) and code else None
    push_status = exc.status if isinstance(exc, PushSendError) else None
    permanent = (
        getattr(exc, "permanent", False) is True or code in PERMANENT_CODES or is_permanent_push_status(push_status)
    )
    last_error: LastError = {
        "at": iso_from_ms(now_ms),
        "occurrence": occurrence_text(row),
        "reason": sanitize_error_summary(reason),
    }
    if code:
        last_error["errorCode"] = code[:64]
    if push_status is not None:
        last_error["pushStatus"] = push_status
    return FailureInfo(reason, code, push_status, permanent, last_error)


def cancel_retired(ctx: AppContext, row: TaskRow, summary: DeliverySummary) -> None:
    """The task's owner was retired: the task fails without a retry (out of the due index, so it never fires
    again; a restore does not revive it) and its unsent outbox rows are discarded. Its cleanup deletes it."""
    now = ctx.now_ms()
    last_error: LastError = {"reason": "owner retired", "errorCode": "CLOUD_OWNER_RETIRED", "at": iso_from_ms(now)}
    settlement = Settlement(next_send_at_ms=row.next_send_at_ms, status="failed", last_error=compact_json(last_error))
    try:
        ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, now)
    except Exception as exc:  # the claim lease expires; the next run finds the owner retired again
        logger.warning("retired task settle failed", extra={"error": type(exc).__name__})
    record_cancelled(ctx, row, summary, OWNER_RETIRED)


def record_cancelled(ctx: AppContext, row: TaskRow, summary: DeliverySummary, status: str) -> None:
    summary.cancelled.append({"taskId": row.id, "reason": CANCELLED_REASON, "status": status})
    logger.info("delivery cancelled", extra={"taskUuid": row.uuid, "status": status})
    try:
        # fenced: only while this run's claim is the task's and the run ended it (docs/delivery.md, fencing)
        ctx.outbox.discard_undelivered_for_task(
            row.user_id, row.uuid, claim_version=row.claim_version, named=row.outbox_message_ids
        )
    except Exception as exc:
        logger.warning("outbox discard failed", extra={"error": type(exc).__name__})


def record_tenant_inactive(row: TaskRow, summary: DeliverySummary) -> None:
    """The tenant stopped being active while its task was delivered (a push claim found its record deleting or
    disabled): the run stops without pushing and writes nothing more. The claim is left to expire, as for a
    queued message of an inactive tenant; the tick, serving active tenants only, claims the task again only
    once the tenant is enabled (its batch is then found in the outbox), and a deletion removes it with the
    rest of the tenant (docs/tenancy-data.md)."""
    summary.cancelled.append({"taskId": row.id, "reason": CANCELLED_REASON, "status": TENANT_INACTIVE})
    logger.info("delivery stopped: tenant inactive", extra={"taskUuid": row.uuid})


def release_claim(ctx: AppContext, row: TaskRow) -> None:
    try:
        ctx.claims.settle(
            row.user_id,
            row.uuid,
            row.claim_version,
            Settlement(next_send_at_ms=row.next_send_at_ms, retry_after_ms=row.retry_after_ms, keep_deferral=True),
            ctx.now_ms(),
        )
    except Exception as exc:  # the lease expires by itself
        logger.warning("releasing a claim failed", extra={"error": type(exc).__name__})
