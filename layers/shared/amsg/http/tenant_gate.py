"""Authentication at the edge of the multi-tenant line (docs/tenancy.md): which token a route takes, and whose.

Runs before any endpoint in ``multi`` mode. ``init-tenant`` checks its own ``X-Init-Secret``; ``send-notifications``
takes a cron token (``Authorization: Bearer`` or ``?token=``); every other route a tenant token in the
``Authorization`` header only. Every failure is 401 ``INVALID_TENANT_AUTH`` with one of the reference's three
messages. A token issued before the tenant's last rotation is refused like a bad one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from amsg.context import AppContext
from amsg.errors import api_error
from amsg.http.request import ApiRequest
from amsg.tenancy import tokens
from amsg.tenancy.scope import scoped_context

if TYPE_CHECKING:  # the ports stay unloaded on routes that never reach storage (docs/cold-start.md)
    from amsg.ports.tenants import TenantRecord

PREFIX = "/api/v1"
SELF_AUTHENTICATED = frozenset({"/init-tenant"})
CRON_ROUTES = frozenset({"/send-notifications"})
NO_TOKEN = "缺少租户鉴权信息"
BAD_TOKEN = "租户令牌无效或已过期"
NO_TENANT = "租户配置不存在或已失效"


@dataclass(frozen=True)
class TenantIdentity:
    tenant_id: str
    master_key: str
    token_type: str
    rate_limit_rps: int | None = None  # the tenant's own limit (None: the deployment's)


def route_of(path: str) -> str:
    if path == PREFIX or path.startswith(PREFIX + "/"):
        return path[len(PREFIX) :] or "/"
    return path


def needs_tenant(request: ApiRequest) -> bool:
    return route_of(request.path) not in SELF_AUTHENTICATED


def bearer_token(request: ApiRequest) -> str | None:
    value = request.header("authorization") or ""
    if value[:7].lower() != "bearer ":
        return None
    return value[7:].strip() or None


def authenticate(request: ApiRequest, ctx: AppContext) -> TenantIdentity:
    """The tenant a request acts for, or 401 ``INVALID_TENANT_AUTH``."""
    cron = route_of(request.path) in CRON_ROUTES
    token = bearer_token(request)
    if token is None and cron:
        token = (request.param("token") or "").strip() or None
    if token is None:
        raise api_error("INVALID_TENANT_AUTH", NO_TOKEN)
    allowed = frozenset({tokens.CRON}) if cron else frozenset({tokens.TENANT})
    try:
        claims = tokens.verify(ctx.secrets.tenant_token_signing_key, token, ctx.now_ms() // 1000, allowed)
    except tokens.InvalidToken:
        raise api_error("INVALID_TENANT_AUTH", BAD_TOKEN) from None
    keys = ctx.tenant_keys
    access = keys.tenant(claims.tenant_id) if keys is not None else None
    if access is None:
        raise api_error("INVALID_TENANT_AUTH", NO_TENANT)
    if issued_at_s(claims, access.record) < access.record.tokens_not_before_s:
        raise api_error("INVALID_TENANT_AUTH", BAD_TOKEN)  # issued before the last rotation: revoked
    return TenantIdentity(claims.tenant_id, access.master_key, claims.token_type, access.record.rate_limit_rps)


def issued_at_s(claims: tokens.TokenClaims, record: TenantRecord) -> int:
    """When a token counts as issued, for revocation. A token without ``iat`` (the reference accepts one) counts
    as issued when the tenant was created or moved in here, the earliest it can have been: it works until the
    tenant's first rotation and never after, so rotation revokes it like any earlier token (docs/tenancy.md)."""
    return claims.issued_at_s if claims.issued_at_s is not None else record.created_at_ms // 1000


def enforce_rate_limit(ctx: AppContext, identity: TenantIdentity) -> None:
    """At most the tenant's requests per second (its record's limit, else ``AMSG_TENANT_RATE_LIMIT_RPS``; 0 or
    less: none), counted in a one-second window shared by every sandbox; above it 429 with ``Retry-After``."""
    limit = identity.rate_limit_rps if identity.rate_limit_rps is not None else ctx.settings.tenant_rate_limit_rps
    registry = ctx.tenant_registry
    if limit <= 0 or registry is None:
        return
    if registry.count_request(identity.tenant_id, ctx.now_ms() // 1000, limit):
        return
    error = api_error("TENANT_RATE_LIMITED", details={"limit": limit, "windowSeconds": 1})
    error.headers["Retry-After"] = "1"
    raise error


def tenant_scoped(request: ApiRequest, ctx: AppContext) -> AppContext:
    """The context an endpoint runs with in ``multi`` mode: the authenticated tenant's (init-tenant: as is)."""
    if not needs_tenant(request):
        return ctx
    identity = authenticate(request, ctx)
    enforce_rate_limit(ctx, identity)
    return scoped_context(ctx, identity.tenant_id, identity.master_key)
