"""An independent client of the amsg wire protocol, written from the wire contract (docs/compatibility.md) — it does
NOT import the server's ``amsg`` package, so tests using it prove wire compatibility, not self-consistency.

It behaves like ``@rei-standard/amsg-client``: fetch the user key, AES-256-GCM envelopes with a 12-byte IV and
standard base64, ``X-User-Id`` / ``X-Payload-Encrypted`` / ``X-Encryption-Version`` / ``X-Client-Token``
headers, and decryption of ``{success, encrypted, version, data}`` responses.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM


@dataclass
class WireResponse:
    status: int
    headers: dict[str, str]
    body: Any  # parsed JSON (or raw text when not JSON)
    text: str = ""

    @property
    def code(self) -> str | None:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return self.body["error"].get("code")
        return None

    @property
    def data(self) -> Any:
        return self.body.get("data") if isinstance(self.body, dict) else None


# transport(method, path_with_query, headers, body_bytes) -> (status, headers, body_bytes)
Transport = Callable[[str, str, dict[str, str], bytes | None], tuple[int, dict[str, str], bytes]]


def http_transport(base_url: str, timeout: float = 60.0) -> Transport:
    import http.client

    parsed = urllib.parse.urlsplit(base_url)

    def send(method: str, path: str, headers: dict[str, str], body: bytes | None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=timeout)
        try:
            conn.request(method, parsed.path.rstrip("/") + path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    return send


def js_json(value: Any) -> str:
    """``JSON.stringify`` form (what the JS client sends): no whitespace, non-ASCII as raw UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encrypt(value: Any, key_hex: str, *, compact: bool = False) -> dict[str, str]:
    iv = os.urandom(12)
    text = js_json(value) if compact else json.dumps(value)
    sealed = AESGCM(bytes.fromhex(key_hex)).encrypt(iv, text.encode("utf-8"), None)
    b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
    return {"iv": b64(iv), "authTag": b64(sealed[-16:]), "encryptedData": b64(sealed[:-16])}


def decrypt(envelope: dict[str, str], key_hex: str) -> Any:
    iv = base64.b64decode(envelope["iv"])  # atob-compatible: standard alphabet, padded
    tag = base64.b64decode(envelope["authTag"])
    data = base64.b64decode(envelope["encryptedData"])
    return json.loads(AESGCM(bytes.fromhex(key_hex)).decrypt(iv, data + tag, None).decode("utf-8"))


@dataclass
class WireClient:
    transport: Transport
    user_id: str
    server_token: str | None = None
    user_key: str | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)

    # ---- low level ---------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | str | None = None,
        user: bool = True,
        token: bool = True,
    ) -> WireResponse:
        h: dict[str, str] = dict(self.extra_headers)
        if token and self.server_token:
            h["X-Client-Token"] = self.server_token
        if user:
            h["X-User-Id"] = self.user_id
        h.update(headers or {})
        raw = body.encode("utf-8") if isinstance(body, str) else body
        status, resp_headers, resp_body = self.transport(method, path, h, raw)
        text = resp_body.decode("utf-8", errors="replace")
        try:
            parsed: Any = json.loads(text) if text else None
        except ValueError:
            parsed = text
        resp = WireResponse(status, resp_headers, parsed, text)
        if isinstance(parsed, dict) and parsed.get("success") is True and parsed.get("encrypted") is True:
            assert parsed.get("version") == 1
            assert self.user_key, "encrypted response before init()"
            resp.body = {**parsed, "data": decrypt(parsed["data"], self.user_key)}
        return resp

    def send_encrypted(
        self, method: str, path: str, value: Any, *, gzip_body: bool = False, compact: bool = False
    ) -> WireResponse:
        """``compact=True`` sends exactly what the JS client sends (``JSON.stringify`` of payload and envelope)."""
        assert self.user_key, "call init() first"
        envelope = encrypt(value, self.user_key, compact=compact)
        body = (js_json(envelope) if compact else json.dumps(envelope)).encode("utf-8")
        headers = {"Content-Type": "application/json", "X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}
        if gzip_body:
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        return self.request(method, path, headers=headers, body=body)

    def get_encrypted(self, path: str) -> WireResponse:
        return self.request("GET", path, headers={"X-Response-Encrypted": "true", "X-Encryption-Version": "1"})

    # ---- the amsg-client surface ------------------------------------------------------------------------

    def init(self) -> str:
        resp = self.request("GET", "/get-user-key")
        key = (resp.data or {}).get("userKey") if resp.status == 200 else None
        if not isinstance(key, str) or not re.fullmatch(r"[0-9a-f]{64}", key, re.IGNORECASE):
            raise AssertionError(f"init failed: {resp.status} {resp.text}")
        self.user_key = key
        return key

    def vapid_public_key(self) -> WireResponse:
        return self.request("GET", "/vapid-public-key", user=False)

    def capabilities(self) -> WireResponse:
        return self.request("GET", "/capabilities", user=False)

    def schedule(self, payload: dict[str, Any], **kw: Any) -> WireResponse:
        return self.send_encrypted("POST", "/schedule-message", payload, **kw)

    def update(self, uuid: str, patch: dict[str, Any]) -> WireResponse:
        return self.send_encrypted("PUT", f"/update-message?id={urllib.parse.quote(uuid)}", patch)

    def cancel(self, uuid: str) -> WireResponse:
        return self.request("DELETE", f"/cancel-message?id={urllib.parse.quote(uuid)}")

    def list_messages(self, **params: Any) -> WireResponse:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        return self.get_encrypted("/messages" + (f"?{query}" if query else ""))

    def get_message(self, uuid: str) -> WireResponse:
        return self.get_encrypted(f"/message?id={urllib.parse.quote(uuid)}")

    def put_subscription(self, subscription: dict[str, Any], updated_at: int | None = None) -> WireResponse:
        body: dict[str, Any] = {"subscription": subscription}
        if updated_at is not None:
            body["updatedAt"] = updated_at
        return self.send_encrypted("PUT", "/push-subscription", body)

    def get_subscription(self) -> WireResponse:
        return self.request("GET", "/push-subscription")

    def delete_subscription(self) -> WireResponse:
        return self.request("DELETE", "/push-subscription")

    # ---- delivery policy (quiet hours and caps) ------------------------------------------------------------

    def put_delivery_policy(self, policy: dict[str, Any]) -> WireResponse:
        return self.send_encrypted("PUT", "/delivery-policy", policy)

    def get_delivery_policy(self) -> WireResponse:
        return self.request("GET", "/delivery-policy")

    def delete_delivery_policy(self) -> WireResponse:
        return self.request("DELETE", "/delivery-policy")

    # ---- client state --------------------------------------------------------------------------------------

    def put_client_state(self, entries: Any, **kw: Any) -> WireResponse:
        return self.send_encrypted("PUT", "/client-state", {"entries": entries}, **kw)

    def get_client_state(self, namespace: str | None) -> WireResponse:
        query = "" if namespace is None else "?" + urllib.parse.urlencode({"namespace": namespace})
        return self.get_encrypted("/client-state" + query)

    def clear_client_state(self) -> WireResponse:
        return self.request("DELETE", "/client-state")

    def delete_client_state_namespace(self, namespace: str) -> WireResponse:
        return self.request("DELETE", "/client-state?" + urllib.parse.urlencode({"namespace": namespace}))

    def client_state_namespaces(self, limit: Any = None) -> WireResponse:
        query = "" if limit is None else "?" + urllib.parse.urlencode({"limit": limit})
        return self.get_encrypted("/client-state/namespaces" + query)

    # ---- outbox -----------------------------------------------------------------------------------------------

    def outbox(self, since: Any = None, limit: Any = None) -> WireResponse:
        params = {k: v for k, v in (("since", since), ("limit", limit)) if v is not None}
        query = "?" + urllib.parse.urlencode(params) if params else ""
        return self.get_encrypted("/outbox" + query)

    def outbox_ack(self, message_ids: Any) -> WireResponse:
        return self.send_encrypted("POST", "/outbox/ack", {"messageIds": message_ids})

    def outbox_delete(self, body: Any) -> WireResponse:
        return self.send_encrypted("DELETE", "/outbox", body)

    def outbox_sync(self, limit: Any = None, since: int = 0) -> tuple[list[dict[str, Any]], int]:
        """What a client does on wake-up: page from ``since`` until ``hasMore`` is false."""
        entries: list[dict[str, Any]] = []
        while True:
            resp = self.outbox(since=since, limit=limit)
            assert resp.status == 200, resp.text
            entries += resp.data["entries"]
            since = resp.data["cursor"]
            if not resp.data["hasMore"]:
                return entries, since

    # ---- llm credentials -----------------------------------------------------------------------------------

    def put_credentials(self, credentials: Any) -> WireResponse:
        return self.send_encrypted("PUT", "/llm-credentials", {"credentials": credentials})

    def get_credentials(self) -> WireResponse:
        return self.request("GET", "/llm-credentials")

    def delete_credentials(self, body: Any) -> WireResponse:
        return self.send_encrypted("DELETE", "/llm-credentials", body)


# a real (unused) P-256 point and a 16-byte secret: PUT /push-subscription checks the key formats
DUMMY_P256DH = "BOS1K5pAW-niLZ0cEqbHNNCS8NjBQzgSnFKjqTUFrNhcAq7ouT5T6PiSqIQJy7ay9B5ZYUxyARdkZ9EMg__64i8"
DUMMY_AUTH = "MDEyMzQ1Njc4OWFiY2RlZg"


def dummy_subscription(endpoint: str = "https://push.example.test/sub/1") -> dict[str, Any]:
    return {
        "endpoint": endpoint,
        "expirationTime": None,
        "keys": {"p256dh": DUMMY_P256DH, "auth": DUMMY_AUTH},
    }
