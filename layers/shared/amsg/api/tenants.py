"""``POST /api/v1/init-tenant`` on the multi-tenant line (docs/tenancy.md): create a tenant, answer its tokens.

The body is plain JSON. The reference's ``driver``/``databaseUrl`` name a Postgres database of the tenant's; here
every tenant lives in the stack's table, so a body may name this storage (``driver: "dynamodb"``) or say
nothing, and a request for any other storage is refused (400) rather than silently served from the table.
"""

from __future__ import annotations

import uuid
from typing import Any

from amsg.context import AppContext
from amsg.crypto import constant_time_equals
from amsg.errors import ApiError, api_error
from amsg.http.gates import UUID_V4_RE, parse_json
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, ok
from amsg.ports.tenants import ACTIVE, TenantExists, TenantRecord
from amsg.tenancy import tokens
from amsg.tenancy.keys import master_key_fingerprint, new_master_key

from .keys import init_tenant as init_single

OUR_DRIVER = "dynamodb"
DATABASE_URL_FIELDS = ("databaseUrl", "connectionString")


def init_tenant(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    """The single line's schema check, or the multi-tenant line's tenant creation, by the deployment's mode."""
    if ctx.settings.multi_tenant:
        return create_tenant(request, ctx)
    return init_single(request, ctx)


def create_tenant(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    require_init_secret(request, ctx)
    body = _body(request)
    tenant_id = _tenant_id(body)
    _check_storage(body)
    registry, wrapper = ctx.tenant_registry, ctx.key_wrapper
    if registry is None or wrapper is None:
        raise api_error("INIT_FAILED", "the tenant registry is not configured")
    master_key = new_master_key()
    now_ms = ctx.now_ms()
    now_s = now_ms // 1000
    record = TenantRecord(
        tenant_id=tenant_id,
        wrapped_master_key=wrapper.wrap(tenant_id, master_key.encode("ascii")),
        token_generation=1,
        status=ACTIVE,
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
        tokens_not_before_s=now_s,
        master_key_fingerprint=master_key_fingerprint(master_key),
    )
    try:
        registry.create(record)
    except TenantExists:
        raise api_error("TENANT_ALREADY_INITIALIZED") from None
    return ok(tenant_credentials(ctx, record, now_s), status=201)


def tenant_credentials(ctx: AppContext, record: TenantRecord, issued_at_s: int) -> dict[str, Any]:
    """What init-tenant answers (and the CLI prints after a rotation): the tokens and the cron webhook URL."""
    key = ctx.secrets.tenant_token_signing_key
    tenant_token = tokens.issue(key, record.tenant_id, tokens.TENANT, issued_at_s)
    cron_token = tokens.issue(key, record.tenant_id, tokens.CRON, issued_at_s)
    base = ctx.settings.public_base_url.rstrip("/")
    return {
        "tenantId": record.tenant_id,
        "tenantToken": tenant_token,
        "cronToken": cron_token,
        "cronWebhookUrl": f"{base}/api/v1/send-notifications?token={cron_token}" if base else "",
        "masterKeyFingerprint": record.master_key_fingerprint,
    }


def require_init_secret(request: ApiRequest, ctx: AppContext) -> None:
    """``X-Init-Secret`` equal to the configured one; with none configured, init-tenant is closed."""
    expected = ctx.secrets.init_secret
    given = (request.header("x-init-secret") or "").strip()
    if not expected or not constant_time_equals(given, expected):
        raise api_error("INVALID_INIT_AUTH")


def _body(request: ApiRequest) -> dict[str, Any]:
    text = request.text_body or ""
    if not text.strip():
        return {}  # no body: a tenant with a random id in the stack's table
    try:
        body = parse_json(text)
    except ValueError:
        raise api_error("INVALID_JSON") from None
    if not isinstance(body, dict):
        raise api_error("INVALID_REQUEST_BODY")
    return body


def _tenant_id(body: dict[str, Any]) -> str:
    given = body.get("tenantId")
    if given is None:
        return str(uuid.uuid4())
    if not isinstance(given, str) or not UUID_V4_RE.match(given):
        raise api_error("INVALID_TENANT_ID")
    return given.lower()


def _check_storage(body: dict[str, Any]) -> None:
    """``driver`` may only name this deployment's storage; a database URL is never accepted (docs/tenancy.md)."""
    for name in DATABASE_URL_FIELDS:
        if body.get(name) is not None:
            raise _storage_error("DATABASE_URL_NOT_SUPPORTED", name)
    driver = body.get("driver")
    if driver is not None and driver != OUR_DRIVER:
        raise _storage_error("INVALID_DRIVER", "driver")


def _storage_error(code: str, field: str) -> ApiError:
    return api_error(code, details={"field": field, "supportedDriver": OUR_DRIVER})


def send_notifications(request: ApiRequest, ctx: AppContext) -> ApiResponse:
    """``POST /api/v1/send-notifications``: the cron tenant's due work (the edge has checked the cron token and
    scoped ``ctx`` to that tenant). Not a route of the single line: 404 there."""
    if not ctx.settings.multi_tenant:
        raise api_error("NOT_FOUND")
    missing = _missing_vapid(ctx)
    if missing:
        raise api_error("VAPID_CONFIG_ERROR", "VAPID 配置缺失，无法发送推送通知", details={"missingKeys": missing})
    from amsg.tenancy.scope import run_tenant_due_work

    return ok(run_tenant_due_work(ctx))


def _missing_vapid(ctx: AppContext) -> list[str]:
    checks = (
        ("VAPID_EMAIL", ctx.settings.vapid_email),
        ("NEXT_PUBLIC_VAPID_PUBLIC_KEY", ctx.settings.vapid_public_key),
        ("VAPID_PRIVATE_KEY", ctx.secrets.vapid_private_key),
    )
    return [name for name, value in checks if not value]
