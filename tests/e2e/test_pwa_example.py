"""The PWA example (examples/pwa) in headless Chromium against the local stack: the published client and service
worker, on a page of another origin, from init to a push acknowledged in the outbox.

Chromium has no push service here (no internet), so the page registers a subscription whose endpoint is a
loopback push receiver (``FakePushService``, which decrypts the Web Push layer as a browser's push service
would hand it over) and the test gives each received push to the page's service worker through the DevTools
protocol (``ServiceWorker.deliverPushMessage``). From there it is the example's own code: ``amsg-sw`` dispatches
the push to the page and the service worker acknowledges it with an encrypted ``POST /outbox/ack``; the page
reads the outbox by decrypting it with the user's key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.e2e_stack import stack_with_push
from tests.support.wire_client import WireClient, http_transport

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DRIVER_DIR = ROOT / ".cache" / "pwa-test"
PUPPETEER_CORE = "24.43.1"  # drives an installed Chromium; downloads no browser
PUPPETEER_SPEC = f"puppeteer-core@{PUPPETEER_CORE}"
MINUTE = 60_000


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):  # CI installs Chromium and Node (.ci/run): missing there is a failure
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        _unavailable("Chromium is not installed (Debian: apt-get install chromium); the PWA test needs it")
    assert found is not None
    return found


def _driver() -> Path:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        _unavailable("node/npm not found")
    assert npm is not None
    package = DRIVER_DIR / "node_modules" / "puppeteer-core" / "package.json"
    if not package.exists() or json.loads(package.read_text())["version"] != PUPPETEER_CORE:
        DRIVER_DIR.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(DRIVER_DIR), PUPPETEER_SPEC],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PUPPETEER_SKIP_DOWNLOAD": "1"},
            check=False,
        )
        if done.returncode != 0:
            _unavailable(f"npm install puppeteer-core failed: {done.stderr[-500:]}")
    script = DRIVER_DIR / "pwa_driver.mjs"  # next to node_modules so the bare import resolves
    shutil.copy(ROOT / "tests/e2e/js/pwa_driver.mjs", script)
    return script


class Browser:
    """The driver process: one JSON command per line in, one JSON answer per line out."""

    def __init__(self, chromium: str, driver: Path, url: str) -> None:
        self.process = subprocess.Popen(
            ["node", str(driver), chromium, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._answer(120)

    def _answer(self, timeout_s: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout_s)
        if not line or not line[0]:
            self.process.kill()
            err = self.process.stderr.read() if self.process.stderr else ""
            raise AssertionError(f"the browser driver did not answer: {err[-3000:]}")
        answer: dict[str, Any] = json.loads(line[0])
        return answer

    def __call__(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        answer = self._answer(120)
        assert answer.get("ok", True), answer
        return answer

    def click(self, button: str) -> str:
        status: str = self(click=button)["status"]
        return status

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps({"close": True}) + "\n")
            self.process.stdin.close()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture(scope="module")
def world() -> Iterator[dict[str, Any]]:
    chromium, driver = _chromium(), _driver()
    serve = _serve_module()
    try:
        server = serve.make_server("", 0)
    except serve.PackagesUnavailable as exc:
        _unavailable(str(exc))
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with stack_with_push(AMSG_CORS_ORIGINS=origin) as (stack, push):
            server.api_url = stack.base_url
            browser = Browser(chromium, driver, origin + "/")
            try:
                yield {"stack": stack, "push": push, "browser": browser}
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()


def _serve_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("amsg_pwa_serve", ROOT / "examples" / "pwa" / "serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def deliver_next(world: dict[str, Any], endpoint_id: str, count: int) -> dict[str, Any]:
    """The ``count``-th push the receiver decrypted, handed to the page's service worker as a browser would."""
    received = world["push"].wait_for(count, endpoint_id, timeout_s=30)
    push = received[count - 1]
    assert push.plaintext is not None, push.decrypt_error
    world["browser"](deliver=push.plaintext.decode("utf-8"))
    payload: dict[str, Any] = json.loads(push.plaintext)
    return payload


def test_a_page_cannot_read_the_stacks_environment_route(world: dict[str, Any]) -> None:
    """The page's origin is allowed by CORS for the API; the local route that describes the stack is not
    readable cross-origin (no CORS header), and holds no key anyway."""
    import urllib.request

    stack = world["stack"]
    (page_origin,) = stack.settings.cors_origins
    request = urllib.request.Request(stack.base_url + "/_local/environment", headers={"Origin": page_origin})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers.get("Access-Control-Allow-Origin") is None
        text = response.read().decode("utf-8")
    assert stack.settings.master_key not in text and stack.settings.vapid_private_key not in text


def test_the_pwa_schedules_receives_and_acknowledges(world: dict[str, Any]) -> None:
    browser, stack, push = world["browser"], world["stack"], world["push"]
    assert browser.click("init") == 'init: {"initialised":true}'
    user_id = browser(text="user")["text"]

    browser.click("subscribe")  # no push service in this Chromium: the page says why, and offers the manual way
    subscription = push.subscribe()
    browser(fill="subscription", value=json.dumps(subscription.to_json()))
    assert browser.click("use-subscription").startswith("use-subscription: {")

    browser(fill="text", value="instant hello")
    assert '"success":true' in browser.click("schedule-instant")
    first = deliver_next(world, subscription.endpoint_id, 1)
    assert first["message"] == "instant hello"
    pushes = browser(waitItems="pushes", count=1)["items"]
    assert pushes[0]["messageId"] == first["messageId"] and "instant hello" in pushes[0]["text"]
    acks = browser(waitItems="acks", count=1)["items"]
    assert acks[0] == {"text": f"acknowledged {first['messageId']}: ok", "messageId": first["messageId"], "ok": "true"}

    browser(fill="text", value="fixed hello")
    assert '"success":true' in browser.click("schedule-fixed")
    stack.post_local("/_local/clock", {"advanceMs": 2 * MINUTE})
    assert browser.click("outbox-refresh") == 'outbox-refresh: {"unacknowledged":0}'
    assert '"success":true' in browser.click("tick")  # the page's own call to the local stack's tick
    assert browser.click("outbox-refresh") == 'outbox-refresh: {"unacknowledged":1}'
    (row,) = browser(items="outbox")["items"]
    assert "fixed hello" in row["text"]  # the outbox, decrypted in the page
    second = deliver_next(world, subscription.endpoint_id, 2)
    assert second["message"] == "fixed hello" and second["messageId"] == row["messageId"]
    acks = browser(waitItems="acks", count=2)["items"]
    assert acks[0]["messageId"] == second["messageId"] and acks[0]["ok"] == "true"
    assert browser.click("outbox-refresh") == 'outbox-refresh: {"unacknowledged":0}'

    user = WireClient(http_transport(stack.base_url), user_id)
    user.init()
    assert user.outbox().data["entries"] == []  # acknowledged on the server, not only in the page

    stack.post_local("/_local/clock", {"reset": True})  # the page's times are the browser's clock
    assert '"success":true' in browser.click("schedule-daily")
    assert browser.click("list") == 'list: {"tasks":1}'
    (task,) = browser(items="messages")["items"]
    assert "daily pending" in task["text"]
    assert browser.click(f"cancel-{task['uuid']}").startswith(f'cancel-{task["uuid"]}: {{"success":true')
    assert browser.click("list") == 'list: {"tasks":0}'
