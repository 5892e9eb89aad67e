"""In-memory tenant registry and key wrapper: the same contracts as the DynamoDB registry and KMS."""

from __future__ import annotations

import base64
import os
import threading
from dataclasses import replace

from amsg.ports.tenants import KeyUnwrapError, TenantExists, TenantNotFound, TenantPage, TenantRecord
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM


class MemoryTenantStore:
    def __init__(self) -> None:
        self._records: dict[str, TenantRecord] = {}
        self._windows: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def create(self, record: TenantRecord) -> None:
        with self._lock:
            if record.tenant_id in self._records:
                raise TenantExists(record.tenant_id)
            self._records[record.tenant_id] = record

    def get(self, tenant_id: str) -> TenantRecord | None:
        return self._records.get(tenant_id)

    def list_page(self, cursor: str | None = None, limit: int = 100) -> TenantPage:
        ids = sorted(self._records)
        if cursor:
            ids = [tenant_id for tenant_id in ids if tenant_id > cursor]
        page = ids[: max(1, limit)]
        more = len(ids) > len(page)
        return TenantPage([self._records[i] for i in page], page[-1] if more and page else None)

    def set_status(self, tenant_id: str, status: str, now_ms: int) -> TenantRecord:
        return self._update(tenant_id, status=status, updated_at_ms=now_ms)

    def rotate_tokens(self, tenant_id: str, not_before_s: int, now_ms: int) -> TenantRecord:
        with self._lock:
            record = self._require(tenant_id)
            updated = replace(
                record,
                tokens_not_before_s=not_before_s,
                updated_at_ms=now_ms,
                token_generation=record.token_generation + 1,
            )
            self._records[tenant_id] = updated
            return updated

    def set_rate_limit(self, tenant_id: str, rps: int | None, now_ms: int) -> TenantRecord:
        return self._update(tenant_id, rate_limit_rps=rps, updated_at_ms=now_ms)

    def count_request(self, tenant_id: str, second: int, limit: int) -> bool:
        with self._lock:
            counted = self._windows.get((tenant_id, second), 0)
            if counted >= limit:
                return False
            self._windows[(tenant_id, second)] = counted + 1
            return True

    def usage(self, tenant_id: str, due_shards: int) -> dict[str, int]:
        return {"pendingTasks": 0, "settledTasks": 0}  # the fake holds no tasks

    def _update(self, tenant_id: str, **changes: object) -> TenantRecord:
        with self._lock:
            updated = replace(self._require(tenant_id), **changes)  # type: ignore[arg-type]
            self._records[tenant_id] = updated
            return updated

    def _require(self, tenant_id: str) -> TenantRecord:
        record = self._records.get(tenant_id)
        if record is None:
            raise TenantNotFound(tenant_id)
        return record


class LocalKeyWrapper:
    """AES-GCM under a key of its own, the tenant id as associated data (KMS's encryption context)."""

    def __init__(self) -> None:
        self._aead = AESGCM(AESGCM.generate_key(bit_length=256))
        self.unwraps = 0

    def wrap(self, tenant_id: str, plaintext: bytes) -> str:
        nonce = os.urandom(12)
        return base64.b64encode(nonce + self._aead.encrypt(nonce, plaintext, tenant_id.encode())).decode()

    def unwrap(self, tenant_id: str, wrapped: str) -> bytes:
        self.unwraps += 1
        try:
            blob = base64.b64decode(wrapped, validate=True)
            return self._aead.decrypt(blob[:12], blob[12:], tenant_id.encode())
        except (InvalidTag, ValueError) as exc:
            raise KeyUnwrapError(tenant_id) from exc
