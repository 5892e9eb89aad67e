"""``GET /client-state/namespaces[?limit=n]``: which namespaces the user has in the cloud.

Check order: auth → ``X-User-Id`` → ``limit`` (absent/empty → 200; otherwise ``^[0-9]+$`` and ≥ 1, larger
values clamped to 200) → store support → list. The response is encrypted: namespace names are user data.
"""

from __future__ import annotations

from amsg.context import AppContext
from amsg.errors import api_error
from amsg.http.gates import page_limit, require_user_id
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, encrypted

from .common import authenticate

MAX_CLIENT_STATE_NAMESPACES = 200


def list_client_state_namespaces(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    limit = page_limit(
        request.param("limit"),
        default=MAX_CLIENT_STATE_NAMESPACES,
        maximum=MAX_CLIENT_STATE_NAMESPACES,
        error=api_error("INVALID_NAMESPACE_LIMIT"),
    )
    listing = ctx.client_state.list_namespaces(user_id, limit)
    namespaces = [
        {"namespace": s.namespace, "entryCount": s.entry_count, "byteSize": s.byte_size, "updatedAt": s.updated_at}
        for s in listing.namespaces
    ]
    return encrypted({"namespaces": namespaces, "truncated": listing.truncated, "limit": limit}, ctx.codec(user_id))
