"""``messageType: 'instant'``: delivered inside ``POST /schedule-message`` (see docs/delivery.md).

The task row was just created; we claim it for ourselves, try up to 3 times (sleeping k s after the k-th
failure) within a total deadline of ~27 s (the HTTP API caps integrations at 30 s) that also keeps a margin of
the Lambda's own remaining time for answering, then delete it on success or mark it failed with ``last_error``
(so ``GET /message`` answers 409 with the reason).

No push is sent once the answer can no longer be a success: before every push the time left must cover it and
the pacing before the pushes still to come. When it does not, the request answers the failure and the task is
left pending with one retry, which the next tick delivers through run_task: the rows already in the outbox go
out once (see docs/delivery.md).

The result is an outcome, not an HTTP answer: ``POST /schedule-message`` turns :class:`InstantSent` into its
200 answer and :class:`InstantFailed` into ``500 MESSAGE_SEND_FAILED`` with the failure's details.
"""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from amsg.context import AppContext
from amsg.crypto import compact_json
from amsg.engine.delivery import process_occurrence
from amsg.engine.env import Cancelled, delivery_env
from amsg.engine.lease import LeaseKeeper
from amsg.engine.outcomes import FailureInfo, failure_info
from amsg.engine.sending import DeadlineExceeded
from amsg.jsonio import JsonObject
from amsg.observability import logger
from amsg.ports import Settlement, TaskRow
from amsg.task_payload import StoredPayload
from amsg.timeutil import iso_from_ms

MAX_RETRIES = 2
# what the request keeps of the Lambda's remaining time after its last push: the settle write and the answer
ANSWER_MARGIN_MS = 2_000


@dataclass(frozen=True)
class InstantSent:
    """The instant message went out and its task is deleted."""

    messages_sent: int
    sent_at: str
    retries_used: int
    reasoning_error: str | None = None


class InstantFailed(Exception):
    """The instant message was not (fully) sent; ``details`` is what the client sees as ``error.details``."""

    def __init__(self, code: str, message: str, retries_attempted: int, *, permanent: bool = False) -> None:
        super().__init__(code)
        self.details: JsonObject = {"code": code, "message": message, "retriesAttempted": retries_attempted}
        if permanent:
            self.details["permanent"] = True


def deliver_instant(
    ctx: AppContext,
    user_id: str,
    task_uuid: str,
    payload: StoredPayload,
    *,
    remaining_ms: Callable[[], int] | None = None,
) -> InstantSent:
    """``remaining_ms`` is the Lambda's remaining time (``context.get_remaining_time_in_millis``), if known."""
    started = ctx.now_ms()
    deadline = started + ctx.settings.instant_deadline_ms

    def time_left_ms() -> int:
        left = deadline - ctx.now_ms()
        return left if remaining_ms is None else min(left, remaining_ms() - ANSWER_MARGIN_MS)

    env = delivery_env(ctx, remaining_ms=time_left_ms)
    env.defer_supported = False  # the row lives only for this request: a hook cannot move it
    env.time_left_ms = time_left_ms
    owner = f"instant:{uuid_lib.uuid4()}"
    row = ctx.tasks.get_task(user_id, task_uuid)
    claimed = (
        ctx.claims.claim(
            user_id,
            task_uuid,
            expected_next_send_at_ms=row.next_send_at_ms,
            now_ms=started,
            lease_until_ms=deadline + ctx.settings.run_lease_ms,
            owner=owner,
        )
        if row is not None
        else None
    )
    if claimed is None:
        raise InstantFailed("TASK_NOT_FOUND", "任务不存在", 0)

    def renew() -> bool:
        lease_until_ms = max(deadline, ctx.now_ms()) + ctx.settings.run_lease_ms
        return ctx.claims.renew_lease(user_id, task_uuid, claimed.claim_version, lease_until_ms, owner)

    attempt = 0
    codec = ctx.codec(user_id)
    with LeaseKeeper(renew, ctx.settings.heartbeat_ms / 1000) as keeper:
        env.lease_lost = keeper.lost.is_set
        while True:
            try:
                outcome = process_occurrence(ctx, claimed, payload, codec, env)
                break
            except Cancelled:
                raise InstantFailed("TASK_NOT_FOUND", "任务在投递期间被取消", attempt) from None
            except DeadlineExceeded as exc:
                _leave_for_retry(ctx, claimed, failure_info(exc, claimed, ctx.now_ms()), attempt)
            except Exception as exc:
                info = failure_info(exc, claimed, ctx.now_ms())
                pause_ms = 1000 * (attempt + 1)
                if info.permanent or attempt >= MAX_RETRIES or ctx.now_ms() + pause_ms >= deadline:
                    _fail(ctx, claimed, info, attempt)
                logger.info("instant delivery attempt failed; retrying", extra={"attempt": attempt + 1})
                env.sleep(pause_ms / 1000)
                attempt += 1
    sent_ms = ctx.now_ms()
    settlement = Settlement(
        claimed.next_send_at_ms,
        delete=True,
        payload_rev=claimed.rev,
        payload_token=claimed.payload_token,
        task_id=claimed.id,
        delivered=tuple(outcome.unmarked),
        delivered_at_ms=sent_ms,
    )
    if not ctx.claims.settle(user_id, task_uuid, claimed.claim_version, settlement, sent_ms):
        raise InstantFailed("POST_SEND_CLEANUP_FAILED", "任务删除失败", attempt)
    return InstantSent(outcome.messages_sent, iso_from_ms(sent_ms), attempt, outcome.reasoning_error or None)


def _leave_for_retry(ctx: AppContext, row: TaskRow, info: FailureInfo, attempt: int) -> NoReturn:
    """The deadline came before a push: answer the failure and leave the task pending with exactly one retry,
    due at once (the next tick hands it to run_task, which sends the batch already in the outbox once). Its
    ``retry_count`` is the retry limit, so a failure of that retry is final."""
    now = ctx.now_ms()
    settlement = Settlement(
        next_send_at_ms=row.next_send_at_ms,
        retry_after_ms=now,
        retry_count=max(1, ctx.settings.max_delivery_retries),
        last_error=compact_json(info.last_error),
    )
    try:
        ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, now)
    except Exception as exc:  # the lease expires by itself: the task is claimed again then
        logger.warning("leaving the instant task for a retry did not succeed", extra={"error": type(exc).__name__})
    raise InstantFailed("PROCESSING_ERROR", info.last_error["reason"], attempt)


def _fail(ctx: AppContext, row: TaskRow, info: FailureInfo, attempt: int) -> NoReturn:
    """Mark the task failed (best effort: the answer is a failure either way) and raise."""
    settlement = Settlement(
        next_send_at_ms=row.next_send_at_ms,
        status="failed",
        retry_count=attempt,
        last_error=compact_json(info.last_error),
    )
    try:
        ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, ctx.now_ms())
    except Exception as exc:
        logger.warning("marking the instant task failed did not succeed", extra={"error": type(exc).__name__})
    raise InstantFailed("PROCESSING_ERROR", info.last_error["reason"], attempt, permanent=info.permanent)
