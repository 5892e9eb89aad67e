"""Tenants' master keys wrapped by the stack's KMS key (docs/tenancy.md, keys at rest).

``Encrypt``/``Decrypt`` with the encryption context ``{"amsg:tenant": <tenantId>}``: KMS authenticates the
context with the ciphertext, so a wrapped key copied into another tenant's record does not decrypt there.
The wrapped form is base64 of the ciphertext blob. Decrypt names the key id as well, so a blob made under
another key is refused rather than decrypted with whatever key made it.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from amsg.ports.tenants import KeyUnwrapError

CONTEXT_KEY = "amsg:tenant"


class KmsKeyWrapper:
    def __init__(
        self,
        key_id: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client_options: Mapping[str, str] | None = None,
    ) -> None:
        self.key_id = key_id
        self._client_options = {**(client_options or {})}  # region, endpoint, keys the caller states
        if endpoint_url:
            self._client_options["endpoint_url"] = endpoint_url
        if region:
            self._client_options["region_name"] = region
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = boto3.session.Session().client(
                        "kms",
                        config=Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=3),
                        **self._client_options,
                    )
        return self._client

    def wrap(self, tenant_id: str, plaintext: bytes) -> str:
        blob = self.client.encrypt(KeyId=self.key_id, Plaintext=plaintext, EncryptionContext={CONTEXT_KEY: tenant_id})[
            "CiphertextBlob"
        ]
        return base64.b64encode(blob).decode("ascii")

    def unwrap(self, tenant_id: str, wrapped: str) -> bytes:
        try:
            blob = base64.b64decode(wrapped, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise KeyUnwrapError(tenant_id) from exc
        try:
            answer = self.client.decrypt(
                CiphertextBlob=blob, KeyId=self.key_id, EncryptionContext={CONTEXT_KEY: tenant_id}
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("InvalidCiphertextException", "IncorrectKeyException"):
                raise KeyUnwrapError(tenant_id) from None
            raise
        return bytes(answer["Plaintext"])
