"""Loopback fake Web Push service: verifies VAPID (RFC 8292), decrypts aes128gcm (RFC 8291/8188), records all.

Independent of the code under test on purpose: decryption and JWT checks are written here with
``cryptography`` only (the sender encrypts with ``http_ece`` and signs with ``amsg.vapid``), so a bug on one
side cannot be mirrored on the other.

Typical use::

    with FakePushService() as push:                 # or the ``fake_push`` fixture (tests/support/push_fixtures.py)
        sub = push.subscribe()                      # browser-like key pair + auth, registered for decryption
        sender.send(sub.to_json(), b'{"a":1}')
        [got] = push.wait_for(1)
        assert got.payload == {"a": 1} and got.vapid.ok

    push.set_status(sub.endpoint_id, 410)           # every later push to it answers 410
    push.set_status(sub.endpoint_id, 500, 429, 201) # one per request; the last one sticks
    push.set_delay(sub.endpoint_id, 2.0)            # answer after 2 s (timeouts)
    push.faults = plan                              # a PushFault per well-formed push (tests/support/push_faults.py)
    push.accepted_counts()                          # 2xx answers per "taskUuid/messageId" (duplicates show as > 1)

Strict mode (default) answers like a picky push service when the request itself is wrong: 401 for a missing or
invalid VAPID token, 403 when ``k`` is not the expected application server key, 400 for a missing ``TTL``, a
wrong ``Content-Encoding`` or an undecryptable body. The scripted status applies only to well-formed pushes.
Endpoint ids nobody subscribed answer 404 unless a status is scripted for them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import itertools
import json
import re
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PUSH_PATH = "/push/"
MAX_VAPID_EXP_S = 24 * 60 * 60


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError("invalid base64url") from exc


def _point(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


# ---- the browser side ---------------------------------------------------------------------------------------


@dataclass
class BrowserSubscription:
    """What ``PushManager.subscribe()`` yields, plus the private half a real browser keeps to itself."""

    endpoint: str
    p256dh: str
    auth: str
    endpoint_id: str
    private_key: ec.EllipticCurvePrivateKey = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        """Exactly ``JSON.parse(JSON.stringify(subscription))`` in Chrome/Firefox (base64url, no padding)."""
        return {"endpoint": self.endpoint, "expirationTime": None, "keys": {"p256dh": self.p256dh, "auth": self.auth}}

    @property
    def auth_secret(self) -> bytes:
        return unb64url(self.auth)


def make_browser_subscription(endpoint: str) -> BrowserSubscription:
    """A fresh P-256 key pair and 16-byte auth secret for ``endpoint`` (not registered with any fake)."""
    private = ec.generate_private_key(ec.SECP256R1())
    endpoint_id = endpoint.rstrip("/").rsplit("/", 1)[-1]
    return BrowserSubscription(
        endpoint=endpoint,
        p256dh=b64url(_point(private.public_key())),
        auth=b64url(secrets.token_bytes(16)),
        endpoint_id=endpoint_id,
        private_key=private,
    )


def unused_loopback_url(path: str = "/push/refused") -> str:
    """An ``http://127.0.0.1:<port>`` URL nobody listens on (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}{path}"


# ---- RFC 8291 / 8188 decryption -----------------------------------------------------------------------------


@dataclass
class Decrypted:
    plaintext: bytes
    record_size: int
    records: int
    sender_key: bytes


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def decrypt_aes128gcm(body: bytes, ua_private: ec.EllipticCurvePrivateKey, auth_secret: bytes) -> Decrypted:
    """Decrypt a Web Push message body (RFC 8291 key derivation over the RFC 8188 aes128gcm framing)."""
    if len(body) < 21:
        raise ValueError("body shorter than the aes128gcm header")
    salt, rs, idlen = body[:16], int.from_bytes(body[16:20], "big"), body[20]
    keyid = body[21 : 21 + idlen]
    if rs < 18:
        raise ValueError("record size below 18")
    if idlen != 65 or len(keyid) != 65:
        raise ValueError("keyid is not the 65-byte sender public key")
    as_public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), keyid)
    ua_public = _point(ua_private.public_key())
    ecdh_secret = ua_private.exchange(ec.ECDH(), as_public)
    ikm = _hmac(_hmac(auth_secret, ecdh_secret), b"WebPush: info\x00" + ua_public + keyid + b"\x01")
    prk = _hmac(salt, ikm)
    cek = _hmac(prk, b"Content-Encoding: aes128gcm\x00\x01")[:16]
    nonce = int.from_bytes(_hmac(prk, b"Content-Encoding: nonce\x00\x01")[:12], "big")
    data = body[21 + idlen :]
    records = [data[i : i + rs] for i in range(0, len(data), rs)]
    if not records:
        raise ValueError("no records")
    out = bytearray()
    for seq, record in enumerate(records):
        try:
            plain = AESGCM(cek).decrypt((nonce ^ seq).to_bytes(12, "big"), record, None)
        except InvalidTag:
            raise ValueError(f"record {seq} failed authentication") from None
        stripped = plain.rstrip(b"\x00")
        expected = 2 if seq == len(records) - 1 else 1
        if not stripped or stripped[-1] != expected:
            raise ValueError(f"record {seq} has a bad padding delimiter")
        out += stripped[:-1]
    return Decrypted(bytes(out), rs, len(records), keyid)


# ---- RFC 8292 VAPID verification ----------------------------------------------------------------------------


@dataclass
class VapidCheck:
    ok: bool
    error: str | None = None
    claims: dict[str, Any] | None = None
    jwt_header: dict[str, Any] | None = None
    public_key: str | None = None
    token: str | None = None


_VAPID_RE = re.compile(r"^\s*vapid\s+(.+?)\s*$", re.IGNORECASE | re.DOTALL)


def verify_vapid(
    authorization: str | None,
    *,
    audience: str,
    now_s: float | None = None,
    expected_public_key: str | None = None,
) -> VapidCheck:
    """Check an ``Authorization: vapid t=<jwt>, k=<key>`` header the way a push service does."""
    if not authorization:
        return VapidCheck(False, "missing Authorization header")
    match = _VAPID_RE.match(authorization)
    if not match:
        return VapidCheck(False, "Authorization scheme is not vapid")
    params: dict[str, str] = {}
    for part in match.group(1).split(","):
        name, sep, value = part.strip().partition("=")
        if sep:
            params[name.strip().lower()] = value.strip()
    token, key = params.get("t"), params.get("k")
    if not token or not key:
        return VapidCheck(False, "vapid t= or k= missing")
    check = VapidCheck(False, token=token, public_key=key)
    try:
        _verify_jwt(check, token, key)
    except InvalidSignature:
        check.error = "JWT signature does not verify with k"
        return check
    except (ValueError, TypeError, UnicodeError) as exc:
        check.error = f"malformed VAPID token: {exc}"
        return check
    claims = check.claims if isinstance(check.claims, dict) else {}
    now = time.time() if now_s is None else now_s
    check.error = _claims_error(claims, audience, now) or _key_error(key, expected_public_key)
    check.ok = check.error is None
    return check


def _verify_jwt(check: VapidCheck, token: str, key: str) -> None:
    """Parse the ES256 JWT into ``check`` and verify its signature with ``k``; raises when it is not one."""
    pieces = token.split(".")
    if len(pieces) != 3:
        raise ValueError("JWT must have three parts")
    check.jwt_header = json.loads(unb64url(pieces[0]))
    check.claims = json.loads(unb64url(pieces[1]))
    if not isinstance(check.jwt_header, dict) or check.jwt_header.get("alg") != "ES256":
        raise ValueError("JWT alg is not ES256")
    if check.jwt_header.get("typ", "JWT") != "JWT":
        raise ValueError("JWT typ is not JWT")
    raw_key = unb64url(key)
    if len(raw_key) != 65 or raw_key[0] != 0x04:
        raise ValueError("k is not an uncompressed P-256 point")
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw_key)
    signature = unb64url(pieces[2])
    if len(signature) != 64:
        raise ValueError("signature is not 64 bytes (r||s)")
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    public.verify(der, f"{pieces[0]}.{pieces[1]}".encode("ascii"), ec.ECDSA(hashes.SHA256()))


def _claims_error(claims: dict[str, Any], audience: str, now: float) -> str | None:
    """The first RFC 8292 claim a push service would refuse (aud, exp within 24 h, sub), or None."""
    exp = claims.get("exp")
    sub = claims.get("sub")
    if claims.get("aud") != audience:
        return f"aud {claims.get('aud')!r} != {audience!r}"
    if not isinstance(exp, int) or isinstance(exp, bool):
        return "exp missing or not an integer"
    if exp <= now:
        return "exp is in the past"
    if exp > now + MAX_VAPID_EXP_S:
        return "exp is more than 24 h ahead"
    if not isinstance(sub, str) or not sub.lower().startswith(("mailto:", "https:")):
        return "sub is not a mailto: (or https:) URI"
    return None


def _key_error(key: str, expected_public_key: str | None) -> str | None:
    if expected_public_key is not None and unb64url(key) != unb64url(expected_public_key):
        return "k is not the expected application server key"
    return None


# ---- the service --------------------------------------------------------------------------------------------


@dataclass
class ReceivedPush:
    """One POST as the fake saw it. ``headers`` has lower-cased names; ``header_items`` is the raw list."""

    endpoint_id: str
    headers: dict[str, str]
    header_items: list[tuple[str, str]]
    body: bytes
    status: int
    vapid: VapidCheck
    plaintext: bytes | None = None
    payload: Any = None
    decrypt_error: str | None = None
    record_size: int | None = None
    records: int | None = None
    received_at: float = 0.0

    @property
    def header_names(self) -> set[str]:
        return {name.lower() for name, _ in self.header_items}


@dataclass(frozen=True)
class PushFault:
    """How to answer one push: a status, after ``delay_s``, with extra headers (``Retry-After``)."""

    status: int
    delay_s: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()


class FakePushService:
    """Threaded loopback push service on ``127.0.0.1:<ephemeral>``. Use as a context manager (or start/stop)."""

    def __init__(
        self,
        *,
        default_status: int = 201,
        strict: bool = True,
        vapid_public_key: str | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.default_status = default_status
        self.strict = strict
        self.vapid_public_key = vapid_public_key
        self._host = host
        self._server: ThreadingHTTPServer | None = None
        self.last_origin = ""  # the origin of the last start, for answers that finish after a stop
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._received: list[ReceivedPush] = []
        self._subs: dict[str, BrowserSubscription] = {}
        self._statuses: dict[str, list[int]] = {}
        self._delays: dict[str, float] = {}
        self._ids = itertools.count(1)
        # decides the answer of every well-formed push (after scripted statuses would): fault injection
        self.faults: Callable[[ReceivedPush], PushFault | None] | None = None

    # lifecycle

    def start(self) -> FakePushService:
        if self._server is not None:
            return self
        server = ThreadingHTTPServer((self._host, 0), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        self.last_origin = self.origin
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-push", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakePushService:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``, i.e. the ``aud`` a correct sender puts in its JWT."""
        if self._server is None:
            raise RuntimeError("FakePushService is not started")
        return f"http://{self._host}:{self._server.server_address[1]}"

    def endpoint(self, endpoint_id: str) -> str:
        return f"{self.origin}{PUSH_PATH}{endpoint_id}"

    # subscriptions and scripting

    def subscribe(self, endpoint_id: str | None = None) -> BrowserSubscription:
        """Create and register a browser-like subscription whose pushes this fake can decrypt."""
        eid = endpoint_id or f"sub-{next(self._ids)}-{secrets.token_hex(4)}"
        sub = make_browser_subscription(self.endpoint(eid))
        with self._cond:
            self._subs[eid] = sub
        return sub

    def register(self, sub: BrowserSubscription) -> None:
        with self._cond:
            self._subs[sub.endpoint_id] = sub

    def set_status(self, endpoint_id: str, *statuses: int) -> None:
        """Script the answers for one endpoint: consumed one per push, the last one sticks."""
        if not statuses:
            raise ValueError("give at least one status")
        with self._cond:
            self._statuses[endpoint_id] = list(statuses)

    def set_delay(self, endpoint_id: str, seconds: float) -> None:
        with self._cond:
            self._delays[endpoint_id] = seconds

    def clear(self) -> None:
        """Forget recorded pushes, scripts and delays (subscriptions stay registered)."""
        with self._cond:
            self._received.clear()
            self._statuses.clear()
            self._delays.clear()

    # inspection

    @property
    def received(self) -> list[ReceivedPush]:
        with self._cond:
            return list(self._received)

    def received_for(self, endpoint_id: str) -> list[ReceivedPush]:
        return [r for r in self.received if r.endpoint_id == endpoint_id]

    def payloads(self, endpoint_id: str | None = None) -> list[Any]:
        """Decrypted JSON of the accepted (2xx) pushes, in arrival order."""
        return [
            r.payload
            for r in self.received
            if 200 <= r.status < 300 and (endpoint_id is None or r.endpoint_id == endpoint_id)
        ]

    def accepted_counts(self) -> Counter[str]:
        """2xx answers per ``taskUuid/messageId`` of the decrypted push (answered late or not: it was accepted)."""
        return Counter(
            f"{r.payload.get('taskUuid')}/{r.payload.get('messageId')}"
            for r in self.received
            if 200 <= r.status < 300 and isinstance(r.payload, dict)
        )

    def wait_for(self, count: int, endpoint_id: str | None = None, timeout_s: float = 5.0) -> list[ReceivedPush]:
        """Block until ``count`` pushes (to ``endpoint_id`` if given) arrived; AssertionError on timeout."""
        deadline = time.monotonic() + timeout_s

        def matching() -> list[ReceivedPush]:
            return [r for r in self._received if endpoint_id is None or r.endpoint_id == endpoint_id]

        with self._cond:
            while len(found := matching()) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"expected {count} push(es), got {len(found)}")
                self._cond.wait(remaining)
            return found

    # request handling (called from server threads)

    def _next_status(self, endpoint_id: str) -> int:
        script = self._statuses.get(endpoint_id)
        if script:
            return script.pop(0) if len(script) > 1 else script[0]
        return self.default_status if endpoint_id in self._subs else 404

    def _handle(self, path: str, header_items: list[tuple[str, str]], body: bytes) -> PushFault:
        endpoint_id = path[len(PUSH_PATH) :].split("?", 1)[0]
        headers = {name.lower(): value for name, value in header_items}
        vapid = verify_vapid(
            headers.get("authorization"), audience=self.origin, expected_public_key=self.vapid_public_key
        )
        record = ReceivedPush(endpoint_id, headers, header_items, body, status=0, vapid=vapid, received_at=time.time())
        with self._cond:
            sub = self._subs.get(endpoint_id)
        if headers.get("content-encoding", "").lower() != "aes128gcm":
            record.decrypt_error = "Content-Encoding is not aes128gcm"
        elif sub is None:
            record.decrypt_error = "unknown subscription"
        else:
            try:
                dec = decrypt_aes128gcm(body, sub.private_key, sub.auth_secret)
                record.plaintext, record.record_size, record.records = dec.plaintext, dec.record_size, dec.records
                record.payload = json.loads(dec.plaintext)
            except (ValueError, UnicodeDecodeError) as exc:
                record.decrypt_error = str(exc)
        strict = self._strict_status(record, sub is not None)
        fault = self.faults(record) if strict is None and self.faults is not None else None
        with self._cond:
            if fault is None:
                status = strict if strict is not None else self._next_status(endpoint_id)
                fault = PushFault(status, self._delays.get(endpoint_id, 0.0))
            record.status = fault.status
            self._received.append(record)
            self._cond.notify_all()
        return fault

    def _strict_status(self, record: ReceivedPush, known: bool) -> int | None:
        if not self.strict:
            return None
        if not record.vapid.ok:
            return 403 if record.vapid.error == "k is not the expected application server key" else 401
        if "ttl" not in record.headers:
            return 400
        if known and record.decrypt_error is not None and record.plaintext is None:
            return 400
        return None


def _make_handler(service: FakePushService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not self.path.startswith(PUSH_PATH):
                self._answer(404, b"no such push resource")
                return
            fault = service._handle(self.path, list(self.headers.items()), body)
            if fault.delay_s:
                time.sleep(fault.delay_s)
            status = fault.status
            self._answer(status, b"" if 200 <= status < 300 else f"fake push: {status}".encode(), fault.headers)

        def _answer(self, status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
            try:
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                if status == 201:
                    # service.last_origin: a delayed answer may come after the test stopped the service
                    self.send_header("Location", f"{service.last_origin}/message/{secrets.token_hex(6)}")
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (timeout tests)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
