"""``POST /api/v1/send-notifications`` on the multi-tenant line (docs/tenancy.md)."""

from __future__ import annotations

from amsg.context import AppContext
from amsg.engine.tenant_work import run_tenant_due_work
from amsg.errors import api_error
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, ok

RESPONSE_RESERVE_MS = 2_000  # stop claiming this long before the Lambda's deadline, to answer in time


def send_notifications(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    """``POST /api/v1/send-notifications``: the cron tenant's due work (the edge has checked the cron token and
    scoped ``ctx`` to that tenant; VAPID incomplete answers 500 VAPID_CONFIG_ERROR). Not a route of the single
    line: 404 there."""
    if not ctx.settings.multi_tenant:
        raise api_error("NOT_FOUND")
    remaining = request.remaining_ms
    if remaining is None:
        return ok(run_tenant_due_work(ctx))
    return ok(run_tenant_due_work(ctx, remaining_ms=lambda: remaining() - RESPONSE_RESERVE_MS))
