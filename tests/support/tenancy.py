"""The multi-tenant line on moto: a KMS key, the table, and a context in ``multi`` mode (docs/tenancy.md)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support.inprocess import InProcessApi
from tests.support.wire_client import WireClient, WireResponse

SIGNING_KEY = "test-tenant-token-signing-key"
INIT_SECRET = "test-init-secret"
BASE_URL = "https://amsg.example.test"


def multi_env(kms_key_id: str, **overrides: str) -> dict[str, str]:
    env = {
        "AMSG_TENANCY": "multi",
        "AMSG_KMS_KEY_ID": kms_key_id,
        "AMSG_TENANT_TOKEN_SIGNING_KEY": SIGNING_KEY,
        "AMSG_INIT_SECRET": INIT_SECRET,
        "AMSG_PUBLIC_BASE_URL": BASE_URL,
    }
    env.update(overrides)
    return env


def create_kms_key() -> str:
    """A symmetric key in the active moto mock (its ARN, as the template passes it); through the session's one
    KMS client (``boto3.client`` built a default session and a client per test, ~17 ms of CPU)."""
    from tests.conftest import moto_client

    return str(moto_client("kms").create_key()["KeyMetadata"]["Arn"])


@dataclass
class MultiStack:
    ctx: Any
    transport: InProcessApi
    kms_key_id: str

    def init_tenant(self, body: Any = None, *, secret: str | None = INIT_SECRET) -> WireResponse:
        headers = {"Content-Type": "application/json"}
        if secret is not None:
            headers["X-Init-Secret"] = secret
        raw = body if isinstance(body, str) else (json.dumps(body) if body is not None else None)
        return self.client(None).request("POST", "/api/v1/init-tenant", headers=headers, body=raw, user=False)

    def client(self, token: str | None, user_id: str | None = None) -> WireClient:
        extra = {"Authorization": f"Bearer {token}"} if token else {}
        return WireClient(self.transport, user_id=user_id or str(uuid.uuid4()), extra_headers=extra)

    def tenant(self, tenant_id: str | None = None) -> dict[str, Any]:
        resp = self.init_tenant({"tenantId": tenant_id} if tenant_id else None)
        assert resp.status == 201, resp.text
        return resp.data


def build_multi_stack(make_context: Callable[..., Any], **env: str) -> MultiStack:
    key = create_kms_key()
    ctx = make_context(**multi_env(key, **env))
    return MultiStack(ctx=ctx, transport=InProcessApi(), kms_key_id=key)
