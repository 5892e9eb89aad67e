"""``amsg import --tenant``: moving one tenant of a reference multi-tenant deployment in (docs/tenancy.md).

The reference keeps each tenant's configuration ``{tenantId, db: {driver, connectionString}, masterKey, createdAt,
updatedAt}`` as a ``v1.<iv>.<tag>.<ciphertext>`` blob (base64url without padding), AES-256-GCM with the key
SHA-256(UTF-8 of its KEK string) and a 12-byte IV. We decrypt it, register the tenant with the SAME master key
(wrapped by the stack's KMS key), so every user key derived from it stays the same, then copy its Postgres
database into the tenant's key space through the ordinary import.

Nothing secret reaches a message: errors name what is wrong (the KEK, the blob's shape, the tenant id), never
the key, the KEK, the plaintext or the connection string.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from amsg.domain.jsvalues import js_trim
from amsg.ports.tenants import ACTIVE, DELETING, KeyUnwrapError, KeyWrapper, TenantExists, TenantRecord, TenantStore
from amsg.tenancy.ids import canonical_tenant_id
from amsg.tenancy.keys import master_key_fingerprint
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAX_BLOB_CHARS = 64 * 1024  # a config is a few hundred bytes; anything this large is not one
IV_BYTES = 12
TAG_BYTES = 16
_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")
_HEX_KEY = re.compile(r"^[0-9a-f]{64}$")


class TenantConfigError(Exception):
    """The blob cannot be used (wrong KEK, tampered, malformed, another tenant's); the message holds no secret."""


@dataclass(frozen=True)
class TenantConfig:
    tenant_id: str
    driver: str
    connection_string: str = field(repr=False)
    master_key: str = field(repr=False)  # lowercase hex, 32 bytes


def _b64url(part: str, what: str) -> bytes:
    if not _B64URL.match(part):
        raise TenantConfigError(f"tenant config blob: the {what} is not base64url")
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TenantConfigError(f"tenant config blob: the {what} is not base64url") from None


def _parts(blob: str) -> tuple[bytes, bytes, bytes]:
    if len(blob) > MAX_BLOB_CHARS:
        raise TenantConfigError(f"tenant config blob: larger than {MAX_BLOB_CHARS} characters, not a tenant config")
    pieces = blob.strip().split(".")
    if len(pieces) != 4 or pieces[0] != "v1":
        raise TenantConfigError("tenant config blob: expected v1.<iv>.<tag>.<ciphertext>")
    iv, tag, ciphertext = (_b64url(p, w) for p, w in zip(pieces[1:], ("iv", "tag", "ciphertext"), strict=True))
    if len(iv) != IV_BYTES or len(tag) != TAG_BYTES or not ciphertext:
        raise TenantConfigError("tenant config blob: truncated (the iv is 12 bytes, the tag 16, then the ciphertext)")
    return iv, tag, ciphertext


def kek_key(kek: str) -> bytes:
    """The reference's AES key: SHA-256 of the UTF-8 bytes of the KEK string, trimmed as the reference trims it
    (``String(kek).trim()``: a KEK with a surrounding space or newline works there, so here too)."""
    return hashlib.sha256(js_trim(kek).encode("utf-8")).digest()


def seal_tenant_config(config: dict[str, Any], kek: str, iv: bytes) -> str:
    """The reference's blob for ``config`` (used by tests and by operators checking their export)."""
    sealed = AESGCM(kek_key(kek)).encrypt(
        iv, json.dumps(config, separators=(",", ":"), ensure_ascii=False).encode("utf-8"), None
    )

    def enc(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    return f"v1.{enc(iv)}.{enc(sealed[-TAG_BYTES:])}.{enc(sealed[:-TAG_BYTES])}"


def open_tenant_config(blob: str, kek: str, tenant_id: str) -> TenantConfig:
    """Decrypt and check a reference tenant config for ``tenant_id``; raises :class:`TenantConfigError`."""
    if not js_trim(kek):
        raise TenantConfigError("the KEK is empty")
    iv, tag, ciphertext = _parts(blob)
    try:
        plain = AESGCM(kek_key(kek)).decrypt(iv, ciphertext + tag, None)
    except InvalidTag:
        raise TenantConfigError("the tenant config does not decrypt: wrong KEK, or the blob was altered") from None
    try:
        data = json.loads(plain.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise TenantConfigError("the decrypted tenant config is not JSON") from None
    if not isinstance(data, dict):
        raise TenantConfigError("the decrypted tenant config is not a JSON object")
    return _config(data, tenant_id)


def _config(data: dict[str, Any], tenant_id: str) -> TenantConfig:
    found = data.get("tenantId")
    # the id is kept as the reference wrote it (its tokens carry it); the one typed may differ only in spelling
    if not isinstance(found, str) or canonical_tenant_id(found) != canonical_tenant_id(tenant_id):
        raise TenantConfigError(f"the tenant config belongs to another tenant, not {tenant_id}")
    master_key = data.get("masterKey")
    if not isinstance(master_key, str) or not _HEX_KEY.match(master_key):
        # kept byte for byte (user keys derive from the string), so only the reference's lowercase form is taken
        raise TenantConfigError("the tenant config has no master key of 32 bytes in lowercase hex")
    raw_db = data.get("db")
    db: dict[str, Any] = raw_db if isinstance(raw_db, dict) else {}
    return TenantConfig(
        tenant_id=found,
        driver=str(db.get("driver") or ""),
        connection_string=str(db.get("connectionString") or db.get("databaseUrl") or ""),
        master_key=master_key,
    )


def register_tenant(
    registry: TenantStore, wrapper: KeyWrapper, config: TenantConfig, now_ms: int, *, resume: bool
) -> tuple[TenantRecord, bool]:
    """The tenant's registry record with the reference's master key wrapped by the stack's KMS key; (record,
    created). A conditional create: an existing tenant is refused, unless ``resume`` and it holds this very key.

    Tokens: ``tokens_not_before_s`` is 0, so every token the reference issued for the tenant (signed with the
    same signing key) keeps working until its ``exp``, as it would have there; ``amsg tenants rotate-tokens``
    revokes them all at once."""
    fingerprint = master_key_fingerprint(config.master_key)
    record = TenantRecord(
        tenant_id=config.tenant_id,
        wrapped_master_key=wrapper.wrap(config.tenant_id, config.master_key.encode("ascii")),
        token_generation=1,
        status=ACTIVE,
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
        tokens_not_before_s=0,
        master_key_fingerprint=fingerprint,
    )
    try:
        registry.create(record)
        return record, True
    except TenantExists:
        if not resume:
            raise TenantConfigError(
                f"tenant {config.tenant_id} exists here already; pass --resume to continue an import of this tenant"
            ) from None
    existing = registry.get(config.tenant_id)
    if existing is None or existing.status == DELETING:
        raise TenantConfigError(f"tenant {config.tenant_id} is being deleted here; wait until it is gone") from None
    if not _holds_key(wrapper, existing, config.master_key):
        raise TenantConfigError(f"tenant {config.tenant_id} exists here with another master key; nothing was written")
    return existing, False


def _holds_key(wrapper: KeyWrapper, record: TenantRecord, master_key: str) -> bool:
    if record.master_key_fingerprint and record.master_key_fingerprint != master_key_fingerprint(master_key):
        return False
    try:
        return wrapper.unwrap(record.tenant_id, record.wrapped_master_key) == master_key.encode("ascii")
    except KeyUnwrapError:
        return False
