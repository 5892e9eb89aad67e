"""``PUT|GET|DELETE /delivery-policy``: the user's quiet hours and frequency caps (our own route; see
docs/delivery-policy.md). Stored as one item encrypted under the user key; the engine applies it to every
scheduled fire (``instant`` messages are exempt)."""

from __future__ import annotations

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import DecryptError, compact_json
from amsg.domain.delivery_policy import parse_policy, policy_from_stored
from amsg.errors import api_error
from amsg.http.gates import require_user_id
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, encrypted, ok
from amsg.jsonio import JsonObject
from amsg.observability import logger
from amsg.ports import DeliveryPolicyStore

from .common import authenticate, open_encrypted_body

EMPTY: JsonObject = {"quietHours": None, "caps": []}


def put_delivery_policy(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    opened = open_encrypted_body(request, ctx)
    policy = parse_policy(opened.body)
    updated_at = ctx.now_ms()
    store = _store(ctx)
    if policy.empty:
        store.delete_policy(opened.user_id)  # an empty policy is no policy
    else:
        store.put_policy(opened.user_id, opened.codec.encrypt(compact_json(policy.as_wire())), updated_at)
    return ok({"policy": policy.as_wire(), "updatedAt": updated_at})


def get_delivery_policy(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    codec = ctx.codec(user_id)
    try:
        row = _store(ctx).get_policy(user_id)
    except Exception as exc:
        logger.warning("delivery policy lookup failed", extra={"error": type(exc).__name__})
        raise api_error("DELIVERY_POLICY_LOOKUP_FAILED") from exc
    policy = None
    if row is not None:
        try:
            policy = policy_from_stored(jsonio.loads(codec.decrypt(row.encrypted_policy)))
        except (DecryptError, ValueError):
            logger.warning("stored delivery policy cannot be decrypted (master key changed?)")
    if policy is None:
        return encrypted({"exists": False, "policy": EMPTY, "updatedAt": None}, codec)
    assert row is not None
    return encrypted({"exists": True, "policy": policy.as_wire(), "updatedAt": row.updated_at}, codec)


def delete_delivery_policy(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    return ok({"deleted": _store(ctx).delete_policy(user_id)})


def _store(ctx: AppContext) -> DeliveryPolicyStore:
    if ctx.policies is None:
        raise api_error("DELIVERY_POLICY_NOT_SUPPORTED")
    return ctx.policies
