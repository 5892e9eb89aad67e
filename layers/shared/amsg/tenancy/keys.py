"""Tenants' master keys: created, wrapped for the registry, and unwrapped on use with a bounded-age cache.

A sandbox keeps an unwrapped key for ``max_age_s`` at most, so a disabled or deleted tenant stops being served
within that bound without a KMS call per request (docs/tenancy.md). The cache lives in the context, which the
SnapStart restore hook drops, so a restored sandbox starts with none.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable

from amsg.ports.tenants import ACTIVE, KeyUnwrapError, KeyWrapper, TenantStore

MASTER_KEY_BYTES = 32


def new_master_key() -> str:
    """32 random bytes as lowercase hex, as the reference makes them."""
    return secrets.token_bytes(MASTER_KEY_BYTES).hex()


def master_key_fingerprint(master_key_hex: str) -> str:
    """The reference's ``masterKeyFingerprint``: the first 16 hex chars of SHA-256 of the key string."""
    return hashlib.sha256(master_key_hex.encode("utf-8")).hexdigest()[:16]


class TenantKeys:
    """``MasterKeys`` over the registry and a key wrapper. None for an unknown, disabled or deleting tenant, and
    for a key that does not unwrap for this tenant (a record tampered with or copied from another tenant)."""

    def __init__(
        self, registry: TenantStore, wrapper: KeyWrapper, now_s: Callable[[], float], *, max_age_s: float = 300
    ) -> None:
        self._registry = registry
        self._wrapper = wrapper
        self._now_s = now_s
        self._max_age_s = max_age_s
        self._cache: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def master_key(self, tenant_id: str) -> str | None:
        now = self._now_s()
        with self._lock:
            cached = self._cache.get(tenant_id)
        if cached is not None and now - cached[0] < self._max_age_s:
            return cached[1]
        key = self._load(tenant_id)
        with self._lock:
            if key is None:
                self._cache.pop(tenant_id, None)
            else:
                self._cache[tenant_id] = (now, key)
        return key

    def forget(self, tenant_id: str | None = None) -> None:
        """Drop one cached key (or all): the CLI after it disables or deletes a tenant in this process."""
        with self._lock:
            if tenant_id is None:
                self._cache.clear()
            else:
                self._cache.pop(tenant_id, None)

    def _load(self, tenant_id: str) -> str | None:
        record = self._registry.get(tenant_id)
        if record is None or record.status != ACTIVE:
            return None
        try:
            return self._wrapper.unwrap(tenant_id, record.wrapped_master_key).decode("ascii")
        except (KeyUnwrapError, UnicodeDecodeError):
            return None


class RegistryDirectory:
    """``TenantDirectory`` over the registry: every active tenant, paging through the whole registry."""

    def __init__(self, registry: TenantStore) -> None:
        self._registry = registry

    def active_tenant_ids(self) -> list[str]:
        ids: list[str] = []
        cursor: str | None = None
        while True:
            page = self._registry.list_page(cursor, 100)
            ids.extend(record.tenant_id for record in page.records if record.status == ACTIVE)
            if page.cursor is None:
                return ids
            cursor = page.cursor
