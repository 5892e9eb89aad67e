"""``DELETE /cancel-message?id=``: delete the caller's task whatever its status."""

from __future__ import annotations

from amsg.context import AppContext
from amsg.domain.limits import can_be_task_uuid, canonical_task_uuid
from amsg.errors import api_error
from amsg.http.gates import require_query_id, require_user_id
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, ok
from amsg.observability import logger
from amsg.timeutil import iso_from_ms

from .common import authenticate


def cancel_message(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    task_uuid = canonical_task_uuid(require_query_id(request))
    user_id = require_user_id(request)
    deleted = ctx.tasks.delete_task(user_id, task_uuid) if can_be_task_uuid(task_uuid) else None
    if deleted is None:
        raise api_error("TASK_NOT_FOUND")
    try:  # rows already pushed stay for the client to ack
        ctx.outbox.discard_undelivered_for_task(user_id, task_uuid, named=deleted.outbox_message_ids)
    except Exception as exc:
        logger.warning("outbox discard failed", extra={"error": type(exc).__name__})
    return ok({"uuid": task_uuid, "message": "任务已成功取消", "deletedAt": iso_from_ms(ctx.now_ms())})
