"""``GET /messages`` (list) and ``GET /message?id=`` (single); responses encrypted."""

from __future__ import annotations

from amsg.context import AppContext
from amsg.domain.limits import can_be_task_uuid, canonical_task_uuid
from amsg.domain.projection import parse_last_error, project_task
from amsg.errors import api_error, invalid_parameters
from amsg.http.gates import page_limit, parse_strict_int, require_query_id, require_user_id
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, encrypted
from amsg.timeutil import iso_from_ms

from .common import authenticate

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


def list_messages(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    status = request.param("status") or "all"
    limit = page_limit(
        request.param("limit"),
        default=DEFAULT_LIMIT,
        maximum=MAX_LIMIT,
        error=invalid_parameters(message="limit 参数无效，必须为正整数"),
    )
    try:
        offset = parse_strict_int(request.param("offset")) or 0
    except ValueError:
        raise invalid_parameters(message="offset 参数无效，必须为非负整数") from None

    rows = ctx.tasks.list_tasks(user_id)
    if status != "all":
        rows = [row for row in rows if row.status == status]
    rows.sort(key=lambda row: (row.next_send_at_ms, row.id))
    page = rows[offset : offset + limit]
    codec = ctx.codec(user_id)
    tasks = [project_task(row, codec.decrypt_payload(row.encrypted_payload), include_metadata=False) for row in page]
    total = len(rows)
    pagination = {"total": total, "limit": limit, "offset": offset, "hasMore": offset + limit < total}
    return encrypted({"tasks": tasks, "pagination": pagination}, codec)


def get_message(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    task_uuid = canonical_task_uuid(require_query_id(request))
    row = ctx.tasks.get_task(user_id, task_uuid) if can_be_task_uuid(task_uuid) else None
    if row is None:
        raise api_error("TASK_NOT_FOUND")
    if row.status != "pending":
        raise api_error(
            "TASK_ALREADY_COMPLETED", details={"status": row.status, "lastError": parse_last_error(row.last_error)}
        )
    codec = ctx.codec(user_id)
    task = project_task(row, codec.decrypt_payload(row.encrypted_payload), include_metadata=True)
    if row.deferred_until_ms is not None and row.retry_after_ms == row.deferred_until_ms:
        # held back by the user's quiet hours or a frequency cap
        task["deferredUntil"] = iso_from_ms(row.deferred_until_ms)
    return encrypted({"task": task}, codec)
