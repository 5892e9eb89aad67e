"""A tenant's life: creation (init-tenant and ``amsg tenants create``), token rotation, disabling, listing.

Revocation (docs/tenancy.md): the reference's token payload has a fixed set of claims, so a token is bound to
its tenant's rotation by time instead of by a claim. Rotation sets the record's ``tokens_not_before_s`` to the
next whole second and mints the new tokens with that ``iat``; the edge refuses a token whose ``iat`` is earlier,
so every token issued before the rotation (even within the same second) stops working at once.
"""

from __future__ import annotations

import uuid

from amsg.context import AppContext
from amsg.jsonio import JsonObject
from amsg.ports.tenants import ACTIVE, DELETING, DISABLED, TenantRecord, TenantStore
from amsg.tenancy import tokens
from amsg.tenancy.ids import canonical_tenant_id
from amsg.tenancy.keys import master_key_fingerprint, new_master_key


class TenancyUnavailable(Exception):
    """The deployment is not in ``multi`` mode (no registry or key wrapper)."""


def registry_of(ctx: AppContext) -> TenantStore:
    registry = ctx.tenant_registry
    if registry is None:
        raise TenancyUnavailable("the multi-tenant line is off (AMSG_TENANCY is not 'multi')")
    return registry


def resolve_tenant_id(ctx: AppContext, typed: str) -> str:
    """The stored id an operator means. Ids created here are canonical (a UUID in lower case, as init-tenant
    stores it), so ``ABC…`` finds ``abc…``; a tenant moved in from the reference keeps its id exactly as the
    reference wrote it (its tokens carry it), so an exact match is tried first."""
    exact = typed.strip()
    if exact and registry_of(ctx).get(exact) is not None:
        return exact
    return canonical_tenant_id(exact)


def new_tenant_id() -> str:
    return str(uuid.uuid4())


def create(
    ctx: AppContext, tenant_id: str, *, master_key: str | None = None, tokens_not_before_s: int | None = None
) -> TenantRecord:
    """A new active tenant with a fresh master key (or, moving a reference tenant in, its own), stored wrapped;
    raises ``TenantExists`` when the id is taken (a conditional write: of concurrent creates exactly one wins).
    ``tokens_not_before_s`` defaults to now; an imported tenant takes 0, so its reference tokens keep working
    under the same signing key until its first rotation."""
    registry, wrapper = registry_of(ctx), ctx.key_wrapper
    if wrapper is None:
        raise TenancyUnavailable("no key wrapper (AMSG_KMS_KEY_ID)")
    master_key = master_key or new_master_key()
    now_ms = ctx.now_ms()
    record = TenantRecord(
        tenant_id=tenant_id,
        wrapped_master_key=wrapper.wrap(tenant_id, master_key.encode("ascii")),
        token_generation=1,
        status=ACTIVE,
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
        tokens_not_before_s=now_ms // 1000 if tokens_not_before_s is None else tokens_not_before_s,
        master_key_fingerprint=master_key_fingerprint(master_key),
    )
    registry.create(record)
    return record


def credentials(ctx: AppContext, record: TenantRecord) -> JsonObject:
    """init-tenant's answer for ``record``: tokens issued at its ``tokens_not_before_s``, the cron webhook URL."""
    key = ctx.secrets.tenant_token_signing_key
    issued_at_s = record.tokens_not_before_s
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


def rotate_tokens(ctx: AppContext, tenant_id: str) -> JsonObject:
    """Revoke every token of the tenant and answer new ones (raises ``TenantNotFound``)."""
    not_before_s = ctx.now_ms() // 1000 + 1
    record = registry_of(ctx).rotate_tokens(tenant_id, not_before_s, ctx.now_ms())
    return credentials(ctx, record)


def set_status(ctx: AppContext, tenant_id: str, status: str) -> TenantRecord:
    """``active`` or ``disabled`` (a disabled tenant's tokens are refused; its data stays); ``deleting`` is set by
    the deletion work."""
    if status not in (ACTIVE, DISABLED, DELETING):
        raise ValueError(f"unknown tenant status {status!r}")
    return registry_of(ctx).set_status(tenant_id, status, ctx.now_ms())


def all_records(ctx: AppContext) -> list[TenantRecord]:
    registry = registry_of(ctx)
    records: list[TenantRecord] = []
    cursor: str | None = None
    while True:
        page = registry.list_page(cursor, 100)
        records.extend(page.records)
        if page.cursor is None:
            return records
        cursor = page.cursor
