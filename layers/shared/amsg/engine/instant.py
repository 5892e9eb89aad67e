"""``messageType: 'instant'``: delivered inside ``POST /schedule-message`` (see docs/delivery.md).

The task row was just created; we claim it for ourselves, try up to 3 times (sleeping k s after the k-th
failure) within a total deadline of ~27 s (the HTTP API caps integrations at 30 s), then delete it on
success or mark it failed with ``last_error`` (so ``GET /message`` answers 409 with the reason).
"""

from __future__ import annotations

import uuid as uuid_lib
from typing import Any

from amsg.context import AppContext
from amsg.crypto import compact_json
from amsg.engine.delivery import Cancelled, failure_info, process_occurrence
from amsg.engine.lease import LeaseKeeper
from amsg.engine.runner import delivery_env
from amsg.errors import api_error
from amsg.http.responses import ApiResponse, ok
from amsg.observability import logger
from amsg.ports import CreatedTask, Settlement
from amsg.timeutil import iso_from_ms

MAX_RETRIES = 2


def deliver_instant(
    ctx: AppContext,
    user_id: str,
    task_uuid: str,
    payload: dict[str, Any],
    created: CreatedTask,
    supersede_requested: bool,
) -> ApiResponse:
    started = ctx.now_ms()
    deadline = started + ctx.settings.instant_deadline_ms
    env = delivery_env(ctx, remaining_ms=lambda: deadline - ctx.now_ms())
    env.defer_supported = False  # the row lives only for this request: a hook cannot move it
    owner = f"instant:{uuid_lib.uuid4()}"
    row = ctx.tasks.get_task(user_id, task_uuid)
    claimed = (
        ctx.claims.claim(
            user_id,
            task_uuid,
            expected_next_send_at=row.next_send_at,
            now_iso=iso_from_ms(started),
            lease_until=iso_from_ms(deadline + ctx.settings.run_lease_ms),
            owner=owner,
        )
        if row is not None
        else None
    )
    if claimed is None:
        raise api_error(
            "MESSAGE_SEND_FAILED", details={"code": "TASK_NOT_FOUND", "message": "任务不存在", "retriesAttempted": 0}
        )

    def renew() -> bool:
        lease = iso_from_ms(max(deadline, ctx.now_ms()) + ctx.settings.run_lease_ms)
        return ctx.claims.renew_lease(user_id, task_uuid, claimed.claim_version, lease, owner)

    attempt = 0
    with LeaseKeeper(renew, ctx.settings.heartbeat_ms / 1000) as keeper:
        env.lease_lost = keeper.lost.is_set
        while True:
            try:
                outcome = process_occurrence(ctx, claimed, payload, ctx.user_key(user_id), env)
                break
            except Cancelled:
                raise api_error(
                    "MESSAGE_SEND_FAILED",
                    details={"code": "TASK_NOT_FOUND", "message": "任务在投递期间被取消", "retriesAttempted": attempt},
                ) from None
            except Exception as exc:
                info = failure_info(exc, claimed, ctx.now_ms())
                pause_ms = 1000 * (attempt + 1)
                if info.permanent or attempt >= MAX_RETRIES or ctx.now_ms() + pause_ms >= deadline:
                    return _fail(ctx, claimed, info, attempt)
                logger.info("instant delivery attempt failed; retrying", extra={"attempt": attempt + 1})
                env.sleep(pause_ms / 1000)
                attempt += 1
    sent_at = iso_from_ms(ctx.now_ms())
    if not ctx.claims.settle(
        user_id, task_uuid, claimed.claim_version, Settlement(claimed.next_send_at, delete=True), sent_at
    ):
        raise api_error(
            "MESSAGE_SEND_FAILED",
            details={"code": "POST_SEND_CLEANUP_FAILED", "message": "任务删除失败", "retriesAttempted": attempt},
        )
    data: dict[str, Any] = {
        "uuid": task_uuid,
        "contactName": payload.get("contactName"),
        "messagesSent": outcome.messages_sent,
        "sentAt": sent_at,
        "status": "sent",
        "retriesUsed": attempt,
    }
    if outcome.reasoning_error:
        data["reasoningError"] = outcome.reasoning_error
    if supersede_requested:
        data["superseded"] = created.superseded
    return ok(data)


def _fail(ctx: AppContext, row: Any, info: Any, attempt: int) -> ApiResponse:
    settlement = Settlement(
        next_send_at=row.next_send_at, status="failed", retry_count=attempt, last_error=compact_json(info.last_error)
    )
    try:
        ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, iso_from_ms(ctx.now_ms()))
    except Exception as exc:
        logger.warning("marking the instant task failed did not succeed", extra={"error": type(exc).__name__})
    details: dict[str, Any] = {
        "code": "PROCESSING_ERROR",
        "message": info.last_error["reason"],
        "retriesAttempted": attempt,
    }
    if info.permanent:
        details["permanent"] = True
    raise api_error("MESSAGE_SEND_FAILED", details=details)
