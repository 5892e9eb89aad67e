"""``POST /api/v1/init-tenant`` on the multi-tenant line (docs/tenancy.md): create a tenant, answer its tokens.

The body is plain JSON. The reference's ``driver``/``databaseUrl`` name a Postgres database of the tenant's; here
every tenant lives in the stack's table, so a body may name this storage (``driver: "dynamodb"``) or say
nothing, and a request for any other storage is refused (400) rather than silently served from the table.
"""

from __future__ import annotations

from amsg.context import AppContext
from amsg.crypto import constant_time_equals
from amsg.errors import ApiError, api_error
from amsg.http.gates import UUID_V4_RE, parse_json
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, ok
from amsg.jsonio import JsonObject
from amsg.ports.tenants import TenantExists
from amsg.tenancy import lifecycle
from amsg.tenancy.ids import canonical_tenant_id

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
    try:
        record = lifecycle.create(ctx, tenant_id or lifecycle.new_tenant_id())
    except TenantExists:
        raise api_error("TENANT_ALREADY_INITIALIZED") from None
    return ok(lifecycle.credentials(ctx, record), status=201)


def require_init_secret(request: ApiRequest, ctx: AppContext) -> None:
    """``X-Init-Secret`` equal to the configured one; with none configured, init-tenant is closed."""
    expected = ctx.secrets.init_secret
    given = (request.header("x-init-secret") or "").strip()
    if not expected or not constant_time_equals(given, expected):
        raise api_error("INVALID_INIT_AUTH")


def _body(request: ApiRequest) -> JsonObject:
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


def _tenant_id(body: JsonObject) -> str | None:
    given = body.get("tenantId")
    if given is None:
        return None
    if not isinstance(given, str) or not UUID_V4_RE.match(given):
        raise api_error("INVALID_TENANT_ID")
    return canonical_tenant_id(given)


def _check_storage(body: JsonObject) -> None:
    """``driver`` may only name this deployment's storage; a database URL is never accepted (docs/tenancy.md)."""
    for name in DATABASE_URL_FIELDS:
        if body.get(name) is not None:
            raise _storage_error("DATABASE_URL_NOT_SUPPORTED", name)
    driver = body.get("driver")
    if driver is not None and driver != OUR_DRIVER:
        raise _storage_error("INVALID_DRIVER", "driver")


def _storage_error(code: str, field: str) -> ApiError:
    return api_error(code, details={"field": field, "supportedDriver": OUR_DRIVER})
