"""``amsg local`` in multi mode with no other set-up than ``AMSG_TENANCY=multi`` and the two secrets: KMS is the
embedded moto (a key made at start), init-tenant answers tokens whose cron webhook points at this gateway, and
the edge authenticates every route (docs/tenancy.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from amsg_local.cli import LocalStack, start_local_stack
from amsg_local.operator_env import banner_lines, operator_environment

pytestmark = pytest.mark.e2e

INIT_SECRET = "e2e-init-secret"
SIGNING_KEY = "e2e-signing-key"


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    config = {
        "AMSG_TENANCY": "multi",
        "AMSG_TENANT_TOKEN_SIGNING_KEY": SIGNING_KEY,
        "AMSG_INIT_SECRET": INIT_SECRET,
        "AMSG_MASTER_KEY": "a" * 64,
    }
    with start_local_stack(config=config, warm=True) as running:  # warm, as `amsg local` starts it
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


def test_the_banners_environment_is_enough_for_amsg_tenants(stack: LocalStack, tmp_path: Path) -> None:
    """``amsg tenants rotate-tokens`` in a fresh process with only what the banner prints (plus the signing key):
    it finds the tenant by an upper-case id, revokes the old token and prints a webhook URL on this stack."""
    status, body = call(stack, "POST", "/api/v1/init-tenant", {"X-Init-Secret": INIT_SECRET}, {})
    old = body["data"]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AMSG_TENANT_TOKEN_SIGNING_KEY": SIGNING_KEY,
        **operator_environment(stack),
    }
    banner = "\n".join(banner_lines(stack))
    assert all(f"{key}={value}" in banner for key, value in operator_environment(stack).items())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "amsg_local",
            "tenants",
            "--env-file",
            str(tmp_path / "none.env"),
            "rotate-tokens",
            old["tenantId"].upper(),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    new = json.loads(done.stdout)
    assert new["cronWebhookUrl"] == f"{stack.base_url}/api/v1/send-notifications?token={new['cronToken']}"
    user = {"X-User-Id": str(uuid.uuid4())}
    status, body = call(stack, "GET", "/api/v1/get-user-key", {**user, "Authorization": f"Bearer {old['tenantToken']}"})
    assert (status, body["error"]["code"]) == (401, "INVALID_TENANT_AUTH")
    status, _ = call(stack, "GET", "/api/v1/get-user-key", {**user, "Authorization": f"Bearer {new['tenantToken']}"})
    assert status == 200
