"""Tenants' master keys: created, wrapped for the registry, and unwrapped on use with a bounded-age cache.

A sandbox keeps an unwrapped key for ``max_age_s`` at most, so a KMS key that is disabled stops serving within
that bound without a KMS call per request (docs/tenancy.md). The cache lives in the context, which the SnapStart
restore hook drops, so a restored sandbox starts with none.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable

from amsg.ports.tenants import ACTIVE, KeyUnwrapError, KeyWrapper, TenantAccess, TenantRecord, TenantStore

MASTER_KEY_BYTES = 32


def new_master_key() -> str:
    """32 random bytes as lowercase hex, as the reference makes them."""
    return secrets.token_bytes(MASTER_KEY_BYTES).hex()


def master_key_fingerprint(master_key_hex: str) -> str:
    """The reference's ``masterKeyFingerprint``: the first 16 hex chars of SHA-256 of the key string."""
    return hashlib.sha256(master_key_hex.encode("utf-8")).hexdigest()[:16]


class TenantKeys:
    """``MasterKeys`` over the registry and a key wrapper.

    The record is read on every call (one consistent GetItem), so disabling a tenant or rotating its tokens
    takes effect on the next request; only the unwrapped key is cached, per wrapped key and for ``max_age_s``
    at most, which spares the KMS call. None for an unknown, disabled or deleting tenant, and for a key that
    does not unwrap for this tenant (a record tampered with or copied from another tenant)."""

    def __init__(
        self, registry: TenantStore, wrapper: KeyWrapper, now_s: Callable[[], float], *, max_age_s: float = 300
    ) -> None:
        self._registry = registry
        self._wrapper = wrapper
        self._now_s = now_s
        self._max_age_s = max_age_s
        self._cache: dict[tuple[str, str], tuple[float, str]] = {}
        self._lock = threading.Lock()

    def master_key(self, tenant_id: str) -> str | None:
        access = self.tenant(tenant_id)
        return access.master_key if access else None

    def tenant(self, tenant_id: str) -> TenantAccess | None:
        return self.access_of(self._registry.get(tenant_id))

    def access_of(self, record: TenantRecord | None) -> TenantAccess | None:
        """The access a record read just now grants (run_task reads it along with the task, in one request)."""
        if record is None or record.status != ACTIVE:
            return None
        key = self._unwrapped(record)
        return TenantAccess(record, key) if key else None

    def forget(self) -> None:
        with self._lock:
            self._cache.clear()

    def _unwrapped(self, record: TenantRecord) -> str | None:
        now = self._now_s()
        slot = (record.tenant_id, record.wrapped_master_key)
        with self._lock:
            cached = self._cache.get(slot)
        if cached is not None and now - cached[0] < self._max_age_s:
            return cached[1]
        try:
            key = self._wrapper.unwrap(record.tenant_id, record.wrapped_master_key).decode("ascii")
        except (KeyUnwrapError, UnicodeDecodeError):
            return None
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self._max_age_s}
            self._cache[slot] = (now, key)
        return key


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
