"""``amsg import --tenant <id>``: move one tenant of a reference multi-tenant deployment in (docs/tenancy.md).

The reference keeps each tenant's config (its Postgres database and master key) AES-256-GCM encrypted under the
deployment's KEK: ``v1.<b64url iv>.<b64url tag>.<b64url ciphertext>``, key = SHA-256 of the KEK string. Given
that blob and the KEK (or the master key itself), the tenant is created here with the same id and master key
(wrapped by this stack's KMS key), then its database is imported into the tenant's namespace of the table.
Its existing tokens keep working when this deployment uses the reference's signing key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

HEX_KEY = re.compile(r"[0-9a-f]{64}")


class TenantImportError(Exception):
    """The tenant cannot be moved in (bad blob or KEK, key mismatch, wrong deployment mode)."""


@dataclass(frozen=True)
class ReferenceTenant:
    tenant_id: str
    master_key: str
    database_url: str | None


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def decrypt_tenant_config(blob: str, kek: str) -> dict[str, Any]:
    """The reference's tenant config from its encrypted blob."""
    parts = blob.strip().split(".")
    if len(parts) != 4 or parts[0] != "v1":
        raise TenantImportError("not a reference tenant config (v1.<iv>.<tag>.<ciphertext>)")
    try:
        iv, tag, data = (_unb64url(part) for part in parts[1:])
        key = hashlib.sha256(kek.encode("utf-8")).digest()
        plain = AESGCM(key).decrypt(iv, data + tag, None)
        config = json.loads(plain.decode("utf-8"))
    except (InvalidTag, ValueError) as exc:
        raise TenantImportError("the tenant config does not decrypt with this KEK") from exc
    if not isinstance(config, dict):
        raise TenantImportError("the tenant config is not an object")
    return config


def reference_tenant(tenant_id: str, *, blob: str | None, kek: str | None, master_key: str | None) -> ReferenceTenant:
    """The tenant to move in: from its config blob (with the KEK), or from its master key given directly."""
    database_url = None
    if blob:
        if not kek:
            raise TenantImportError("a tenant config blob needs the reference KEK (AMSG_REFERENCE_KEK)")
        config = decrypt_tenant_config(blob, kek)
        if str(config.get("tenantId", "")).lower() != tenant_id.lower():
            raise TenantImportError("the tenant config belongs to another tenant")
        master_key = str(config.get("masterKey") or "")
        db = config.get("db")
        if isinstance(db, dict):
            database_url = db.get("connectionString") or db.get("databaseUrl")
    if not master_key or not HEX_KEY.fullmatch(master_key):
        raise TenantImportError("no usable master key (64 lowercase hex characters)")
    return ReferenceTenant(tenant_id.lower(), master_key, database_url)


def ensure_tenant(ctx: Any, tenant: ReferenceTenant) -> str:
    """Create the tenant with its own master key, or check the existing one has it; answers what happened."""
    from amsg.ports.tenants import TenantExists
    from amsg.tenancy import lifecycle

    try:
        lifecycle.create(ctx, tenant.tenant_id, master_key=tenant.master_key, tokens_not_before_s=0)
        return "created"
    except TenantExists:
        keys = ctx.tenant_keys
        if keys is None or keys.master_key(tenant.tenant_id) != tenant.master_key:
            raise TenantImportError("the tenant exists here with another master key (or is not active)") from None
        return "exists"
