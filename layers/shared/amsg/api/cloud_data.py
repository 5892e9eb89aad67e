"""``/cloud-data/*``: what the server stores for a user, who owns it, and owner state (one Lambda).

Check order: auth → ``X-User-Id`` → feature switch (501 when off) → POST encryption gate (before route
matching) → route by path suffix in the reference's order: GET ``/summary``, GET ``/resources``, POST
``/cleanup-plans``, POST ``/cleanup-operations``, GET ``/cleanup-operations``, GET ``…/cleanup-operations/<id>``,
GET ``/owners``, GET|POST ``/owner``; anything else 404 ``NOT_FOUND``. Success is always the encrypted envelope.
Errors without a documented status answer 500 ``CLOUD_DATA_FAILED`` with a generic message.
"""

from __future__ import annotations

import re
import uuid as uuid_lib
from collections.abc import Mapping
from typing import Any

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import UserCodec, compact_json
from amsg.domain.inventory import RESOURCE_TYPES, build_inventory, summary
from amsg.domain.ownership import owner_ref, valid_cloud_owner
from amsg.engine.cleanup import owner_resolver
from amsg.errors import ApiError, OwnerChanged, api_error
from amsg.http.gates import decrypt_request_object, require_user_id
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, encrypted
from amsg.jsonio import JsonObject
from amsg.observability import logger

from .cloud_cleanup import create_plan, get_operation, list_operations, operations_of, start_operation
from .common import authenticate

SNAPSHOT_TTL_MS = 15 * 60_000
RECORD_TTL_S = 3600
CURSOR_RE = re.compile(r"^[0-9a-f-]{36}:\d+$")
MAX_SAFE_INTEGER = 2**53 - 1


def cloud_data(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    if not ctx.settings.cloud_data_management or ctx.cloud_data is None or ctx.owners is None:
        raise api_error("CLOUD_DATA_NOT_SUPPORTED")
    codec = ctx.codec(user_id)
    try:
        body = _body(request, codec) if request.method == "POST" else None
        data = _dispatch(request, ctx, user_id, codec, body)
    except ApiError:
        raise
    except Exception as exc:  # no status: the outcome is unknown to the client
        logger.warning("cloud data request failed", extra={"error": type(exc).__name__})
        raise api_error("CLOUD_DATA_FAILED", status=500) from exc
    return encrypted(data, codec)


def _body(request: ApiRequest, codec: UserCodec) -> JsonObject:
    if request.header("x-payload-encrypted") != "true" or request.header("x-encryption-version") != "1":
        raise api_error("ENCRYPTION_REQUIRED", "请求必须使用版本 1 加密")
    try:
        return decrypt_request_object(
            request,
            codec,
            bad_json=api_error("DECRYPTION_FAILED"),
            not_object=api_error("INVALID_PAYLOAD"),
        )
    except ApiError as error:
        if error.code == "INVALID_ENCRYPTED_PAYLOAD":
            raise api_error("INVALID_PAYLOAD") from None
        raise


def _dispatch(
    request: ApiRequest, ctx: AppContext, user_id: str, codec: UserCodec, body: JsonObject | None
) -> Mapping[str, Any]:
    path, method = request.path, request.method
    if method == "GET" and path.endswith("/summary"):
        return _summary(request, ctx, user_id, codec)
    if method == "GET" and path.endswith("/resources"):
        return _resources(request, ctx, user_id, codec)
    if method == "POST" and path.endswith("/cleanup-plans"):
        return create_plan(ctx, user_id, codec, body or {})
    if method == "POST" and path.endswith("/cleanup-operations"):
        return start_operation(ctx, user_id, codec, body or {})
    if method == "GET" and path.endswith("/cleanup-operations"):
        return list_operations(ctx, user_id, codec)
    if method == "GET" and "/cleanup-operations/" in path:
        return get_operation(ctx, user_id, codec, path.rsplit("/", 1)[1])
    if method == "GET" and path.endswith("/owners"):
        return _owners(ctx, user_id)
    if path.endswith("/owner") and method in ("GET", "POST"):
        return _owner(request, ctx, user_id, codec, body)
    raise api_error("NOT_FOUND", "云端管理入口不存在")


# ---- inventory ------------------------------------------------------------------------------------------


def _filter(request: ApiRequest) -> JsonObject:
    owner_type, owner_id, type_ = request.param("ownerType"), request.param("ownerId"), request.param("type")
    if bool(owner_type) != bool(owner_id) or (type_ and type_ not in RESOURCE_TYPES):
        raise api_error("INVALID_CLOUD_FILTER")
    return {"ownerType": owner_type or None, "ownerId": owner_id or None, "type": type_ or None}


def _inventory(ctx: AppContext, user_id: str, codec: UserCodec) -> tuple[list[JsonObject], list[dict[str, str]]]:
    assert ctx.cloud_data is not None
    listing = ctx.cloud_data.list_resources(user_id)
    entries = build_inventory(user_id, codec, listing.resources, resolve_owner=owner_resolver(ctx), gaps=listing.gaps)
    return [entry.resource for entry in entries], listing.gaps


def _summary(request: ApiRequest, ctx: AppContext, user_id: str, codec: UserCodec) -> JsonObject:
    _filter(request)  # validated, not applied (as the reference)
    resources, gaps = _inventory(ctx, user_id, codec)
    return summary(resources, gaps)


def _limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return 50
    try:
        value = float(raw.strip()) if raw.strip() else 0.0
    except ValueError:
        raise api_error("INVALID_CLOUD_LIMIT") from None
    if value != value or not value.is_integer() or not 1 <= value <= 200:
        raise api_error("INVALID_CLOUD_LIMIT")
    return int(value)


def _resources(request: ApiRequest, ctx: AppContext, user_id: str, codec: UserCodec) -> JsonObject:
    assert ctx.cloud_data is not None
    limit = _limit(request.param("limit"))
    flt = _filter(request)
    cursor = request.param("cursor")
    now = ctx.now_ms()
    if cursor:
        if not CURSOR_RE.match(cursor):
            raise api_error("INVALID_CLOUD_CURSOR")
        snapshot_id, _, raw_offset = cursor.partition(":")
        stored = ctx.cloud_data.get_record(user_id, "inventory", snapshot_id, now_ms=now)
        if stored is None:
            raise api_error("CLOUD_RECORD_NOT_FOUND")
        snapshot = _load(stored, codec)
        offset = int(raw_offset)
        if offset > MAX_SAFE_INTEGER or offset > len(snapshot["resources"]):
            raise api_error("INVALID_CLOUD_CURSOR")
        if snapshot["expiresAt"] < now or compact_json(snapshot["filter"]) != compact_json(flt):
            raise api_error("CLOUD_CURSOR_EXPIRED")
    else:
        resources, gaps = _inventory(ctx, user_id, codec)
        selected = [
            r
            for r in resources
            if (flt["type"] is None or r["type"] == flt["type"])
            and (
                flt["ownerType"] is None
                or (
                    r["owner"] is not None
                    and (r["owner"]["type"], r["owner"]["id"]) == (flt["ownerType"], flt["ownerId"])
                )
            )
        ]
        snapshot_id = str(uuid_lib.uuid4())
        snapshot = {
            "id": snapshot_id,
            "filter": flt,
            "expiresAt": now + SNAPSHOT_TTL_MS,
            "resources": selected,
            "complete": not gaps,
            "gaps": gaps,
            "summary": summary(resources, gaps),
        }
        ctx.cloud_data.put_record(
            user_id, "inventory", snapshot_id, codec.encrypt(compact_json(snapshot)),
            now_ms=now, ttl_s=RECORD_TTL_S,
        )  # fmt: skip
        offset = 0
    page = snapshot["resources"][offset : offset + limit]
    end = offset + limit
    return {
        "resources": page,
        "nextCursor": f"{snapshot_id}:{end}" if end < len(snapshot["resources"]) else None,
        "complete": snapshot["complete"],
        "gaps": snapshot["gaps"],
        "summary": snapshot["summary"],
    }


def _load(stored: str, codec: UserCodec) -> JsonObject:
    record: JsonObject = jsonio.loads(codec.decrypt(stored))
    return record


# ---- owners ---------------------------------------------------------------------------------------------


def _owners(ctx: AppContext, user_id: str) -> JsonObject:
    assert ctx.owners is not None
    owners: list[JsonObject] = [
        {
            "owner": {"type": s.owner_type, "id": s.owner_id},
            "retired": not s.active,
            "generation": s.generation,
            "updatedAt": s.updated_at,
            "complete": True,
            "gaps": [],
        }
        for s in ctx.owners.list(user_id)
    ]
    return {"owners": owners, "complete": True, "gaps": []}


def _owner_state(ctx: AppContext, user_id: str, owner: JsonObject) -> JsonObject:
    assert ctx.owners is not None
    state = ctx.owners.get(user_id, owner_ref(owner["type"], owner["id"]))
    return {
        "owner": owner,
        "retired": bool(state and not state.active),
        "generation": state.generation if state else 0,
        "updatedAt": state.updated_at if state else None,
        "complete": True,
        "gaps": [],
    }


def _owner(request: ApiRequest, ctx: AppContext, user_id: str, codec: UserCodec, body: JsonObject | None) -> JsonObject:
    assert ctx.owners is not None
    if body is None:
        owner: Any = {"type": request.param("ownerType"), "id": request.param("ownerId")}
        if not valid_cloud_owner(owner):
            raise api_error("INVALID_CLOUD_OWNER", "owner 无效", status=400)
        return _owner_state(ctx, user_id, owner)
    owner = body.get("owner")
    if not valid_cloud_owner(owner):
        raise api_error("INVALID_CLOUD_OWNER", "owner 无效", status=400)
    ref = owner_ref(owner["type"], owner["id"])
    state = ctx.owners.get(user_id, ref)
    if body.get("action") != "restore":
        raise api_error("INVALID_CLOUD_OWNER_ACTION")
    if any(
        op["mode"] == "retire-owner"
        and op["status"] in ("pending", "running")
        and op["owner"] is not None
        and (op["owner"]["type"], op["owner"]["id"]) == (owner["type"], owner["id"])
        for op in operations_of(ctx, user_id, codec)
    ):
        raise api_error("CLOUD_CLEANUP_IN_PROGRESS")
    if state is not None and not state.active:
        try:
            ctx.owners.set_active(
                user_id, ref, owner["type"], owner["id"], active=True, expected=state.generation, now_ms=ctx.now_ms()
            )
        except OwnerChanged:
            raise api_error("CLOUD_OWNER_CHANGED") from None
    return _owner_state(ctx, user_id, owner)
