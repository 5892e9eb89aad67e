"""``PUT|GET|DELETE /push-subscription``: one encrypted Web Push subscription per user."""

from __future__ import annotations

from typing import Any

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import DecryptError, compact_json
from amsg.domain.limits import is_epoch_ms
from amsg.domain.subscription import normalize_subscription
from amsg.errors import api_error
from amsg.http.gates import (
    require_user_id,
)
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, ok
from amsg.observability import logger

from .common import authenticate, open_encrypted_body


def _positive_int(value: Any) -> int | None:
    """A positive integer that is also a real epoch-ms time (so it fits DynamoDB and JavaScript exactly)."""
    return int(value) if is_epoch_ms(value) else None


def put_push_subscription(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    opened = open_encrypted_body(request, ctx)
    user_id, codec, body = opened.user_id, opened.codec, opened.body
    subscription = normalize_subscription(body.get("subscription"))
    updated_at = ctx.now_ms()
    if body.get("updatedAt") is not None:
        given = _positive_int(body["updatedAt"])
        if given is None:
            raise api_error("INVALID_UPDATED_AT")
        updated_at = given
    ctx.subscriptions.put_push_subscription(user_id, codec.encrypt(compact_json(subscription)), updated_at)
    return ok({"updatedAt": updated_at})


def get_push_subscription(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    try:
        row = ctx.subscriptions.get_push_subscription(user_id)
    except Exception as exc:
        logger.warning("push subscription lookup failed", extra={"error": type(exc).__name__})
        raise api_error("PUSH_SUBSCRIPTION_LOOKUP_FAILED") from exc
    absent = ok({"exists": False, "updatedAt": None, "endpoint": None})
    if row is None:
        return absent
    try:
        subscription = jsonio.loads(ctx.codec(user_id).decrypt(row.encrypted_subscription))
    except (DecryptError, ValueError):
        logger.warning("stored push subscription cannot be decrypted (master key changed?)")
        return absent
    endpoint = subscription.get("endpoint") if isinstance(subscription, dict) else None
    return ok({"exists": True, "updatedAt": row.updated_at, "endpoint": endpoint})


def delete_push_subscription(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    return ok({"deleted": ctx.subscriptions.delete_push_subscription(user_id)})
