"""Compatibility with the published reference client: `@rei-standard/amsg-client` (npm), driven by node against
the local stack, schedules a task that our engine then delivers as a decrypted Web Push."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from amsg.timeutil import iso_from_ms

from tests.support.e2e_stack import stack_with_push

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
CLIENT_DIR = ROOT / ".cache" / "js-client"
CLIENT_VERSION = "2.5.0"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def js_client() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        _unavailable("node/npm not found")
    package = CLIENT_DIR / "node_modules" / "@rei-standard" / "amsg-client" / "package.json"
    if not package.exists() or json.loads(package.read_text())["version"] != CLIENT_VERSION:
        CLIENT_DIR.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--silent",
                "--prefix",
                str(CLIENT_DIR),
                f"@rei-standard/amsg-client@{CLIENT_VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            _unavailable(f"npm install failed: {result.stderr[-500:]}")
    script = CLIENT_DIR / "reference_client.mjs"  # next to node_modules so the bare import resolves
    shutil.copy(ROOT / "tests/e2e/js/reference_client.mjs", script)
    return script


def test_reference_js_client_schedules_and_we_deliver(js_client):
    with stack_with_push(AMSG_VAPID_EMAIL="js@example.test") as (stack, push):
        local = stack.post_local

        now = local("/_local/clock", {"advanceMs": 0})["nowMs"]
        subscription = push.subscribe()
        user_id = str(uuid.uuid4())
        first = iso_from_ms(now + 60_000)
        result = subprocess.run(
            ["node", str(js_client), stack.base_url, user_id, json.dumps(subscription.to_json()), first],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout.strip().splitlines()[-1])
        assert out["initialised"] is True
        assert out["subscription"]["success"] is True
        scheduled = out["scheduled"]
        assert scheduled["success"] is True and scheduled["data"]["nextSendAt"] == first
        listed = out["listed"]
        assert listed["encrypted"] is True  # the client decrypted our envelope with atob/WebCrypto
        assert listed["data"]["tasks"][0]["uuid"] == scheduled["data"]["uuid"]
        assert listed["data"]["tasks"][0]["charId"] == "js"
        assert out["updated"]["data"]["updatedFields"] == ["contactName"]
        assert out["listedAfterUpdate"]["data"]["tasks"][0]["contactName"] == "Rei (JS)"
        assert out["invalid"]["error"]["code"] == "INVALID_MESSAGE_TYPE"
        assert out["cancelled"]["success"] is True

        local("/_local/clock", {"advanceMs": 61_000})
        local("/_local/tick", {})
        payloads = push.payloads(subscription.endpoint_id)
        assert [p["message"] for p in payloads] == ["来自参考客户端。", "你好！"]
        assert {p["title"] for p in payloads} == {"来自 Rei (JS)"}
        assert payloads[0]["avatarUrl"] is None
