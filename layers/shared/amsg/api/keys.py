"""Routes that only need the deployment's keys and flags: get-user-key, vapid-public-key, capabilities,
init-tenant and the catch-all 404."""

from __future__ import annotations

from amsg import __version__
from amsg.capabilities import implemented_features
from amsg.context import AppContext
from amsg.errors import api_error
from amsg.http.gates import require_user_id
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, ok, ok_fields

from .common import authenticate


def get_user_key(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    user_id = require_user_id(request)
    return ok({"userKey": ctx.codec(user_id).key_hex, "version": 1})


def vapid_public_key(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    if not ctx.settings.vapid_public_key:
        raise api_error("VAPID_NOT_CONFIGURED")
    return ok_fields(publicKey=ctx.settings.vapid_public_key)


def capabilities(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    authenticate(request, ctx)
    return ok_fields(serverVersion=__version__, features=implemented_features(ctx))


def init_tenant(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    """Checks (never creates: the template owns it) the table, its indexes and TTL, then records the marker."""
    authenticate(request, ctx)
    report = ctx.schema.check_schema(ctx.now_ms())
    if not report.ok:
        message = report.error or f"schema incomplete: {', '.join(report.missing)}"
        raise api_error("INIT_FAILED", message)
    indexes = [entry for entry in report.items]
    return ok(
        {
            "tenantId": "single",
            "schema": {
                "columnsCreated": 0,
                "indexesCreated": 0,
                "indexesFailed": sum(1 for entry in indexes if entry["status"] == "failed"),
                "columns": [],
                "indexes": indexes,
            },
        }
    )
