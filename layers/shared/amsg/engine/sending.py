"""Sending, shared by the delivery chain and the agentic fire (see docs/delivery.md): append a batch to the
outbox, resolve the user's push subscription, claim and send one push (never twice: the claim is a conditional
write fenced by the task claim)."""

from __future__ import annotations

from typing import cast

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import DecryptError, UserCodec, compact_json
from amsg.engine.env import Cancelled, DeliveryEnv
from amsg.engine.pushes import encode_push, should_push
from amsg.errors import ClaimLost
from amsg.failures import DeliveryFailure, PushSendError
from amsg.jsonio import JsonObject
from amsg.observability import emit_metric, logger
from amsg.ports import ClaimFence, OutboxAppend, PushSubscription, PushSubscriptionRow, TaskRow
from amsg.task_payload import StoredPayload

VAPID_MISSING = "VAPID configuration missing - push notifications cannot be sent"
DEADLINE_CODE = "INSTANT_DEADLINE_EXCEEDED"
GONE_CODE = "PUSH_SUBSCRIPTION_GONE"
GONE_STATUSES = (404, 410)


class PushUnconfirmed(Exception):
    """A push left and no answer came: the service may have it. The row is never pushed again (it stays in the
    outbox for the client's pull) and the occurrence pushes nothing more (docs/delivery.md)."""

    def __init__(self, message_id: str) -> None:
        super().__init__("push outcome unconfirmed")
        self.message_id = message_id


class DeadlineExceeded(DeliveryFailure):
    """The request's answer can no longer be a success: nothing more is pushed (see docs/delivery.md)."""

    def __init__(self, pushes_left: int) -> None:
        super().__init__(
            f"{DEADLINE_CODE}: no time left to send {pushes_left} push(es) before the answer", code=DEADLINE_CODE
        )


def time_to_push(env: DeliveryEnv, pushes_after: int = 0) -> float | None:
    """Seconds this push may take, or None without a deadline. Raises :class:`DeadlineExceeded` when the time
    left does not cover this push and the pacing before the ``pushes_after`` still to come: a push sent then
    would belong to an answer that is already a failure."""
    if env.time_left_ms is None:
        return None
    left_ms = env.time_left_ms() - pushes_after * env.pacing_ms
    if left_ms <= 0:
        raise DeadlineExceeded(pushes_after + 1)
    return left_ms / 1000


def append_batch(ctx: AppContext, row: TaskRow, pushes: list[JsonObject], codec: UserCodec) -> None:
    """The general append of a run, fenced by its claim: a run that lost it re-arms no row (docs/delivery.md)."""
    try:
        ctx.outbox.append(row.user_id, outbox_rows(ctx, row, pushes, codec), fence=claim_fence(ctx, row))
    except ClaimLost:
        raise Cancelled("cancelled_mid_delivery") from None


def claim_fence(ctx: AppContext, row: TaskRow) -> ClaimFence:
    return ClaimFence(row.uuid, row.claim_version, ctx.now_ms())


def outbox_rows(
    ctx: AppContext, row: TaskRow, pushes: list[JsonObject], codec: UserCodec, *, named: bool = False
) -> list[OutboxAppend]:
    """The rows of a batch; ``named``: the one-transaction append records the rows it pushes on the task
    instead of the by-task index (docs/decisions.md, 45). An outbox-only row (never pushed, so never delivered)
    keeps its index entry: the task stops naming its rows once they are delivered."""
    now = ctx.now_ms()
    return [
        OutboxAppend(
            message_id=push["messageId"],
            task_uuid=row.uuid,
            session_id=push.get("sessionId"),
            message_index=push.get("messageIndex"),
            total_messages=push.get("totalMessages"),
            encrypted_push=codec.encrypt(compact_json(push)),
            created_at=now,
            owner=row.owner,
            named_by_task=named and should_push(push, outboxed=True),
        )
        for push in pushes
    ]


def resolve_subscription(
    ctx: AppContext,
    row: TaskRow,
    payload: StoredPayload,
    codec: UserCodec,
    env: DeliveryEnv | None = None,
    *,
    fresh: bool = False,
) -> PushSubscription:
    """The subscription to push to (the stored one is kept on ``env`` so that a 404/410 marks it gone); a gone
    one fails permanently. ``fresh`` reads it again instead of using what run_task read with the task."""
    if env is not None and env.prefetched is not None and not fresh:
        stored = env.prefetched[0]  # read together with the task
    else:
        stored = ctx.subscriptions.get_push_subscription(row.user_id)
    if env is not None:
        env.subscription_row = stored
    if stored is not None:
        if stored.gone:  # the push service answered 404/410 for it: nothing more goes there until a new PUT
            raise DeliveryFailure(f"{GONE_CODE}: 推送服务已注销该订阅，请重新登记", code=GONE_CODE, permanent=True)
        try:
            value = jsonio.loads(codec.decrypt(stored.encrypted_subscription))
        except (DecryptError, ValueError) as exc:
            raise DeliveryFailure("stored push subscription cannot be decrypted") from exc
        if isinstance(value, dict):
            return cast(PushSubscription, value)  # stored by PUT /push-subscription, checked there
    legacy = payload.get("pushSubscription")
    if isinstance(legacy, dict) and isinstance(legacy.get("endpoint"), str) and legacy["endpoint"].strip():
        return cast(PushSubscription, legacy)  # a payload of an older version carried its subscription
    raise DeliveryFailure(
        "PUSH_SUBSCRIPTION_MISSING: 该用户还没有登记推送订阅", code="PUSH_SUBSCRIPTION_MISSING", permanent=True
    )


def send_one(
    ctx: AppContext,
    row: TaskRow,
    push: JsonObject,
    subscription: PushSubscription,
    env: DeliveryEnv,
    *,
    preclaimed: bool = False,
    previous: str | None = None,
    mark: bool = True,
    pushes_after: int = 0,
) -> bool:
    """Claim the row (unless the append already did), push it, mark it delivered (or leave that to the
    caller, ``mark=False``); ``previous``, a pushed row, is marked delivered with the claim. False when
    another run already claimed the row.

    The run's pending cap charges (``env.cap_charges``) go into the first claim: the occurrence is counted
    against the user's caps in the same transaction, or :class:`CapReached` is raised and nothing is taken."""
    message_id = push["messageId"]
    try:
        timeout_s = time_to_push(env, pushes_after)
    except DeadlineExceeded:
        if preclaimed:  # claimed with the append: hand it back, the task's retry sends it
            ctx.outbox.release_send(row.user_id, message_id, claim_version=row.claim_version)
        raise
    now = ctx.now_ms()
    # the claim re-checks the task's owner in the same transaction: nothing is pushed after a retirement
    claimed = preclaimed or ctx.outbox.claim_send(
        row.user_id,
        message_id,
        task_uuid=row.uuid,
        claim_version=row.claim_version,
        now_ms=now,
        owner=row.owner,
        caps=env.cap_charges,
        delivered=previous,
    )
    if claimed:
        env.cap_charges = []
    if not claimed:
        current = ctx.tasks.get_task(row.user_id, row.uuid)
        if current is None or current.claim_version != row.claim_version or current.status != "pending":
            raise Cancelled("cancelled_mid_delivery")
        return False  # another run already claimed this row for sending: never push it twice
    assert env.push_sender is not None
    try:
        if timeout_s is None:
            env.push_sender.send(subscription, encode_push(push))
        else:  # the push never outlives the answer
            env.push_sender.send(subscription, encode_push(push), timeout_s=timeout_s)
    except PushSendError as exc:
        _after_failed_push(ctx, row, message_id, exc, env)
        raise
    except Exception:  # nothing of it is known to have left: hand the row back for a retry
        ctx.outbox.release_send(row.user_id, message_id, claim_version=row.claim_version)
        raise
    if mark:
        ctx.outbox.mark_delivered(row.user_id, [message_id], ctx.now_ms())
    return True


def _after_failed_push(ctx: AppContext, row: TaskRow, message_id: str, exc: PushSendError, env: DeliveryEnv) -> None:
    """What a refused push leaves behind. Outcome unknown: the row keeps its send claim for good, marked
    unconfirmed, and :class:`PushUnconfirmed` is raised. A gone endpoint (404/410) is marked gone first, so
    that no later run pushes to it even if this one dies now. Otherwise the row is handed back for a retry."""
    if exc.unconfirmed:
        emit_metric("PushUnconfirmed", "Count", 1)
        logger.warning("push outcome unconfirmed", extra={"taskUuid": row.uuid, "messageId": message_id})
        try:
            ctx.outbox.mark_unconfirmed(row.user_id, message_id, ctx.now_ms())
        except Exception as mark_error:  # the send claim alone already keeps it from a second push
            logger.warning("unconfirmed mark failed", extra={"error": type(mark_error).__name__})
        raise PushUnconfirmed(message_id) from None
    if exc.status in GONE_STATUSES:
        _mark_gone(ctx, row, env.subscription_row)
    ctx.outbox.release_send(row.user_id, message_id, claim_version=row.claim_version)


def _mark_gone(ctx: AppContext, row: TaskRow, stored: PushSubscriptionRow | None) -> None:
    if stored is None:  # a legacy subscription inside the payload: nothing stored to mark
        return
    try:
        ctx.subscriptions.mark_push_subscription_gone(row.user_id, stored.encrypted_subscription, ctx.now_ms())
    except Exception as exc:
        logger.warning("marking a gone push subscription failed", extra={"error": type(exc).__name__})
