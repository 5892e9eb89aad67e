"""``amsg local`` in multi mode with no other set-up than ``AMSG_TENANCY=multi`` and the two secrets: KMS is the
embedded moto (a key made at start), init-tenant answers tokens whose cron webhook points at this gateway, and
the edge authenticates every route (docs/tenancy.md)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from amsg_local.cli import LocalStack, start_local_stack

pytestmark = pytest.mark.e2e

INIT_SECRET = "e2e-init-secret"


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    config = {
        "AMSG_TENANCY": "multi",
        "AMSG_TENANT_TOKEN_SIGNING_KEY": "e2e-signing-key",
        "AMSG_INIT_SECRET": INIT_SECRET,
        "AMSG_MASTER_KEY": "a" * 64,
    }
    with start_local_stack(config=config) as running:
        yield running


def call(
    stack: LocalStack, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{stack.base_url}{path}", method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    return status, json.loads(raw) if raw else None


def test_a_tenant_is_created_and_its_token_opens_the_routes(stack: LocalStack) -> None:
    status, body = call(stack, "POST", "/api/v1/init-tenant", {"X-Init-Secret": INIT_SECRET}, {})
    assert status == 201, body
    data = body["data"]
    assert data["cronWebhookUrl"] == f"{stack.base_url}/api/v1/send-notifications?token={data['cronToken']}"
    user = {"X-User-Id": str(uuid.uuid4())}
    bearer = {"Authorization": f"Bearer {data['tenantToken']}"}
    status, body = call(stack, "GET", "/api/v1/get-user-key", {**user, **bearer})
    assert status == 200 and len(body["data"]["userKey"]) == 64
    status, body = call(stack, "GET", "/api/v1/get-user-key", user)
    assert (status, body["error"]["code"]) == (401, "INVALID_TENANT_AUTH")
    status, body = call(stack, "POST", data["cronWebhookUrl"].removeprefix(stack.base_url))
    assert status == 200 and body["data"]["totalTasks"] == 0


def test_init_tenant_needs_the_init_secret(stack: LocalStack) -> None:
    status, body = call(stack, "POST", "/api/v1/init-tenant", {"X-Init-Secret": "wrong"}, {})
    assert (status, body["error"]["code"]) == (401, "INVALID_INIT_AUTH")
