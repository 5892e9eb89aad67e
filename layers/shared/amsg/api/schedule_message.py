"""``POST /schedule-message``, in the reference's check order."""

from __future__ import annotations

from collections.abc import Callable

from amsg.config import missing_vapid_keys
from amsg.context import AppContext
from amsg.crypto import compact_json
from amsg.domain.limits import canonical_task_uuid
from amsg.domain.ownership import GUARD_FIELD, ownership_of
from amsg.domain.validation import (
    MAX_TASK_PAYLOAD_BYTES,
    ScheduleRequest,
    payload_too_large_error,
    validate_schedule_payload,
)
from amsg.errors import ApiError, TaskUuidConflict, TenantPendingLimit, api_error, invalid_parameters
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, ok
from amsg.jsonio import JsonObject
from amsg.observability import logger
from amsg.ports import NewTask
from amsg.task_payload import StoredPayload
from amsg.timeutil import iso_from_ms

from .common import open_encrypted_body
from .credentials_check import require_credentials_exist
from .instant_budget import check_instant_text


def schedule_message(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    opened = open_encrypted_body(request, ctx)
    user_id, codec, payload = opened.user_id, opened.codec, opened.body
    now_ms = ctx.now_ms()
    req = validate_schedule_payload(payload, now_ms=now_ms)
    _canonical_uuids(req)

    try:
        prepared = ctx.tasks.prepare_create(user_id, req.supersedes_uuid)  # one read, reused by the create
        subscription = prepared.subscription
    except Exception as exc:
        logger.warning("push subscription lookup failed", extra={"error": type(exc).__name__})
        raise api_error("PUSH_SUBSCRIPTION_LOOKUP_FAILED") from exc
    if subscription is None:
        raise api_error("PUSH_SUBSCRIPTION_MISSING")
    if req.cred_ref_ids:
        require_credentials_exist(ctx, user_id, req.cred_ref_ids)

    ownership = ownership_of(payload)  # a bad owner or generation is 409 with the guard's code
    stored = req.build_stored_payload(now_ms)
    guard = ownership.guard_field()
    if guard is not None:  # the task's own record of its guard (never taken from the client)
        stored[GUARD_FIELD] = guard
    text = compact_json(stored)
    size = len(text.encode("utf-8"))
    if size > MAX_TASK_PAYLOAD_BYTES:
        raise payload_too_large_error(size)

    instant = req.message_type == "instant"
    if instant:
        _check_instant(ctx, req, stored, now_ms)

    task = NewTask(
        user_id=user_id,
        uuid=req.uuid,
        encrypted_payload=codec.encrypt(text),
        message_type=req.message_type,
        next_send_at_ms=req.next_send_at_ms,
        now_ms=now_ms,
        correlation_id=logger.get_correlation_id(),  # the API Gateway request id: run_task logs carry it
        owner=ownership.claim(codec),
        one_shot=not instant and req.recurrence_type == "none",
    )
    try:
        created = ctx.tasks.create_task(task, req.supersedes_uuid, prepared=prepared)
    except TaskUuidConflict:
        raise api_error("TASK_UUID_CONFLICT") from None
    except TenantPendingLimit as limited:
        raise pending_limit_error(limited.limit) from None
    if created.superseded and req.supersedes_uuid:
        _discard_outbox(ctx, user_id, req.supersedes_uuid, created.superseded_outbox_ids)

    if instant:
        superseded = created.superseded if req.supersedes_uuid is not None else None
        return _deliver_instant(
            ctx, user_id, req.uuid, stored, superseded=superseded, remaining_ms=request.remaining_ms
        )

    data: JsonObject = {
        "id": created.id,
        "uuid": req.uuid,
        "contactName": stored["contactName"],
        "nextSendAt": iso_from_ms(req.next_send_at_ms),
        "status": "pending",
        "createdAt": iso_from_ms(now_ms),
    }
    if req.supersedes_uuid is not None:
        data["superseded"] = created.superseded
    return ok(data, status=201)


def _check_instant(ctx: AppContext, req: ScheduleRequest, stored: StoredPayload, now_ms: int) -> None:
    """An instant task is delivered within this request: its text and the VAPID keys are checked first."""
    if not req.uses_llm:
        check_instant_text(stored, task_uuid=req.uuid, send_ms=req.next_send_at_ms, now_ms=now_ms)
    missing = missing_vapid_keys(ctx.settings, ctx.secrets)
    if missing:
        raise api_error("VAPID_CONFIG_ERROR", details={"missingKeys": missing})


def _deliver_instant(
    ctx: AppContext,
    user_id: str,
    task_uuid: str,
    stored: StoredPayload,
    *,
    superseded: bool | None,
    remaining_ms: Callable[[], int] | None = None,
) -> ApiResponse:
    """Deliver now, inside this request; the engine reports the outcome and this builds the answer."""
    from amsg.engine.instant import InstantFailed, deliver_instant  # the engine only when a request needs it

    try:
        sent = deliver_instant(ctx, user_id, task_uuid, stored, remaining_ms=remaining_ms)
    except InstantFailed as failed:
        raise api_error("MESSAGE_SEND_FAILED", details=failed.details) from None
    data: JsonObject = {
        "uuid": task_uuid,
        "contactName": stored.get("contactName"),
        "messagesSent": sent.messages_sent,
        "sentAt": sent.sent_at,
        "status": "sent",
        "retriesUsed": sent.retries_used,
    }
    if sent.reasoning_error:
        data["reasoningError"] = sent.reasoning_error
    if superseded is not None:
        data["superseded"] = superseded
    return ok(data)


def _canonical_uuids(req: ScheduleRequest) -> None:
    """Task uuids are stored and looked up lower-case (see ``canonical_task_uuid``); a task cannot supersede
    itself under another spelling."""
    req.uuid = canonical_task_uuid(req.uuid)
    if req.supersedes_uuid is not None:
        req.supersedes_uuid = canonical_task_uuid(req.supersedes_uuid)
        if req.supersedes_uuid == req.uuid:
            raise invalid_parameters(invalid=["supersedesUuid"], message="supersedesUuid 不能与本条任务的 uuid 相同")


def _discard_outbox(ctx: AppContext, user_id: str, task_uuid: str, named: tuple[str, ...]) -> None:
    """Best effort: rows of the superseded task that nobody received yet."""
    try:
        ctx.outbox.discard_undelivered_for_task(user_id, task_uuid, named=named)
    except Exception as exc:
        logger.warning("outbox discard failed", extra={"error": type(exc).__name__})


PENDING_LIMIT_RETRY_AFTER_S = 60  # a pending task leaves when it is delivered, cancelled or deleted: no exact time


def pending_limit_error(limit: int) -> ApiError:
    """429 ``TENANT_PENDING_LIMIT`` (docs/tenancy.md, limits): the tenant holds ``limit`` pending tasks."""
    error = api_error("TENANT_PENDING_LIMIT", details={"limit": limit})
    error.headers["Retry-After"] = str(PENDING_LIMIT_RETRY_AFTER_S)
    return error
