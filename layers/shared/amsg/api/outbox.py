"""``GET /outbox``, ``POST /outbox/ack``, ``DELETE /outbox`` — the client's side of the server inbox
(see docs/delivery.md). Every push the server produces is in the outbox before it is sent; ack is the
only proof of receipt.

Paging: ids are strictly increasing per user in commit order and the unacked index is read strongly
consistent, so ``since = cursor`` never skips or repeats a row, even while new rows arrive.
"""

from __future__ import annotations

from typing import Any

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import DecryptError, UserCodec, compact_json
from amsg.domain.jsvalues import is_well_formed, js_trim
from amsg.domain.limits import bounded_cursor
from amsg.errors import api_error
from amsg.http.gates import (
    page_limit,
    parse_strict_int,
    require_user_id,
)
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, encrypted, ok
from amsg.jsonio import JsonObject
from amsg.observability import logger
from amsg.ports import OutboxRow

from .common import authenticate, open_encrypted_body

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
MAX_ACK_IDS = 200
MAX_DELETE_IDS = 200
# Plaintext budget of one page: the encrypted envelope (base64, ×4/3) must stay under Lambda's 6 MB response
# (Lambda's 6 MB). A page that would exceed it ends early with hasMore = true; the client simply pages on.
MAX_PAGE_PLAINTEXT_BYTES = 4_000_000


def list_outbox(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    store = ctx.outbox
    try:
        since = parse_strict_int(request.param("since"))
    except ValueError:
        raise api_error("INVALID_OUTBOX_CURSOR") from None
    since = since or 0
    limit = page_limit(
        request.param("limit"),
        default=DEFAULT_PAGE_SIZE,
        maximum=MAX_PAGE_SIZE,
        error=api_error("INVALID_OUTBOX_LIMIT"),
    )

    codec = ctx.codec(user_id)
    rows: list[OutboxRow] = store.list_unacked(user_id, bounded_cursor(since), limit, ctx.now_ms())
    entries: list[JsonObject] = []
    cursor = since
    budget = MAX_PAGE_PLAINTEXT_BYTES
    cut_short = False
    for row in rows:
        push = _decrypt_push(row, codec)
        if push is not None:
            entry = {
                "id": row.id,
                "messageId": row.message_id,
                "taskUuid": row.task_uuid,
                "sessionId": row.session_id,
                "messageIndex": row.message_index,
                "totalMessages": row.total_messages,
                "createdAt": row.created_at,
                "deliveredAt": row.delivered_at,
                "push": push,
            }
            size = len(compact_json(entry).encode("utf-8")) + 1
            if entries and size > budget:
                cut_short = True  # the cursor stays before this row: the next page starts with it
                break
            budget -= size
            entries.append(entry)
        # rows that fail to decrypt are skipped but still advance the cursor
        cursor = max(cursor, row.id)
    has_more = cut_short or len(rows) == limit
    return encrypted({"entries": entries, "cursor": cursor, "hasMore": has_more}, codec)


def _decrypt_push(row: OutboxRow, codec: UserCodec) -> Any:
    if row.encrypted_push is None:
        logger.warning("outbox row payload incomplete (skipped)", extra={"outbox_id": row.id})
        return None
    try:
        return jsonio.loads(codec.decrypt(row.encrypted_push))
    except (DecryptError, ValueError):
        logger.warning("outbox row cannot be decrypted (skipped)", extra={"outbox_id": row.id})
        return None


def _body(request: ApiRequest, ctx: AppContext) -> tuple[str, JsonObject]:
    opened = open_encrypted_body(request, ctx)
    return opened.user_id, opened.body


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) and js_trim(value) != ""


def _storable(message_ids: list[str]) -> list[str]:
    """Ids that could name a row: one with a lone surrogate (valid JSON, not valid Unicode) names none."""
    return [message_id for message_id in message_ids if is_well_formed(message_id)]


def ack_outbox(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    user_id, body = _body(request, ctx)
    message_ids = body.get("messageIds")
    if not isinstance(message_ids, list) or not message_ids:
        raise api_error("INVALID_OUTBOX_ACK")
    if len(message_ids) > MAX_ACK_IDS:
        raise api_error("TOO_MANY_OUTBOX_ACK_IDS", details={"count": len(message_ids)})
    if not all(_valid_id(message_id) for message_id in message_ids):
        raise api_error("INVALID_OUTBOX_ACK", "messageIds 的每一项必须是非空字符串")
    store = ctx.outbox
    storable = _storable(message_ids)
    return ok({"acked": store.ack(user_id, storable, ctx.now_ms()) if storable else 0})


def delete_outbox(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    user_id, body = _body(request, ctx)
    wants_all = body.get("all") is True
    if wants_all and "messageIds" in body:
        raise api_error("INVALID_OUTBOX_DELETE", "all 与 messageIds 不能同时出现")
    message_ids: list[str] | None = None
    if not wants_all:
        given = body.get("messageIds")
        if not isinstance(given, list) or not given:
            raise api_error("INVALID_OUTBOX_DELETE")
        if len(given) > MAX_DELETE_IDS:
            raise api_error("TOO_MANY_OUTBOX_DELETE_IDS", details={"count": len(given)})
        if not all(_valid_id(message_id) for message_id in given):
            raise api_error("INVALID_OUTBOX_DELETE", "messageIds 的每一项必须是非空字符串")
        message_ids = _storable(list(dict.fromkeys(given)))
        if not message_ids:  # only ids that name no row
            return ok({"deleted": 0})
    return ok({"deleted": ctx.outbox.delete(user_id, message_ids, ctx.now_ms())})
