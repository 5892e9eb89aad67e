"""Web Push sender: RFC 8291 aes128gcm + RFC 8292 VAPID, POSTed over keep-alive HTTP/1.1.

Why not ``pywebpush.webpush()``: it cannot produce the reference's request. It sends no ``Content-Type``, writes
``Authorization: vapid t=…,k=…`` without the reference's ``, `` separator, adds requests' ``User-Agent`` and
``Accept`` headers, treats 203–299 as failures, and importing it loads aiohttp + requests into the
cold start. So this adapter uses the two pieces pywebpush itself is built on: ``http_ece`` (the aes128gcm
record) and an ES256 JWT (:mod:`amsg.vapid`, ``cryptography`` only), and sends with :mod:`amsg.adapters.push_http`
(``http.client`` over a keep-alive pool: a fraction of httpx's CPU per push). ``http_ece`` is imported lazily:
importing this module costs nothing until the first push.

Wire request, exactly: ``POST <endpoint>`` with ``Content-Type: application/octet-stream``,
``Content-Encoding: aes128gcm``, ``TTL: <ttl>``, ``Authorization: vapid t=<jwt>, k=<publicKey>`` (plus the
transport's ``Host``, ``Content-Length``, ``Connection``). No ``Urgency``/``Topic``/``User-Agent``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping

from cryptography.hazmat.primitives.asymmetric import ec

from amsg.adapters.push_http import PushHttp, PushResponse, PushTransportError
from amsg.failures import PushSendError
from amsg.observability import emit_metric, status_class, traced
from amsg.ports import MAX_PUSH_PAYLOAD_BYTES, SCHEDULED_PUSH_TTL_S, PushSubscription
from amsg.vapid import (
    VapidConfigError,
    b64url_decode,
    endpoint_origin,
    load_private_key,
    load_public_key,
    normalize_subject,
    vapid_authorization,
)

RECORD_SIZE = 4096
JWT_REUSE_S = 600  # a signed VAPID token is reused per audience this long (it is valid for 12 h)
MAX_CACHED_AUDIENCES = 256
_ERROR_BODY_CHARS = 200


def load_push_stack() -> None:
    """Import and build what a sandbox's first push would (http_ece, the TLS context with its CA bundle):
    init-phase work for a function whose every batch pushes (``runtime.prepare``), so that a fresh sandbox's
    first batch starts at once."""
    import http_ece  # noqa: F401

    from amsg.adapters.push_http import tls_context

    tls_context()


class WebPushSender:
    """:class:`amsg.ports.PushSender` for real push services (and the loopback fake on ``http://127.0.0.1``).

    Build once per sandbox: its keep-alive pool (and TLS context, on the first https push) is reused; it is
    thread-safe, so concurrent task workers may share one sender. Raises :class:`amsg.vapid.VapidConfigError`
    here, not at send time, when the key material is unusable or the two keys do not belong together.
    """

    def __init__(
        self,
        vapid_private_key: str,
        vapid_public_key: str,
        vapid_subject: str,
        timeout_s: float = 10.0,
        *,
        now_s: Callable[[], float] = time.time,
    ) -> None:
        self._private_key = load_private_key(vapid_private_key)
        public = load_public_key(vapid_public_key)
        if public.public_numbers() != self._private_key.public_key().public_numbers():
            raise VapidConfigError("VAPID public key does not match the private key")
        self._public_key = vapid_public_key.strip().replace("+", "-").replace("/", "_").rstrip("=")
        self._subject = normalize_subject(vapid_subject)
        self._timeout_s = float(timeout_s)
        self._now_s = now_s
        self._http = PushHttp()
        self._lock = threading.Lock()
        self._jwts: dict[str, tuple[str, float]] = {}  # audience -> (Authorization header, signed at)

    @property
    def subject(self) -> str:
        """The normalized ``sub`` claim (``mailto:`` added when the configured value lacked a scheme)."""
        return self._subject

    def send(
        self,
        subscription: PushSubscription,
        payload: bytes | str,
        *,
        ttl: int = SCHEDULED_PUSH_TTL_S,
        timeout_s: float | None = None,
    ) -> int:
        """Guard, encrypt, sign, POST. Returns the 2xx status, raises :class:`PushSendError` otherwise.

        ``timeout_s`` overrides the constructor's timeout for this one call (the instant path passes its
        remaining budget).
        """
        plaintext = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
        # The guard comes first: an oversize payload never reaches encryption or the network.
        if len(plaintext) > MAX_PUSH_PAYLOAD_BYTES:
            raise PushSendError(
                f"Push payload too large: {len(plaintext)} bytes (max {MAX_PUSH_PAYLOAD_BYTES})",
                code="PUSH_PAYLOAD_TOO_LARGE",
                permanent=True,
                details={"bytes": len(plaintext), "maxBytes": MAX_PUSH_PAYLOAD_BYTES},
            )
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
            raise ValueError("ttl must be a non-negative integer")
        endpoint, ua_public, auth_secret = _parse_subscription(subscription)
        body = encrypt_aes128gcm(plaintext, ua_public, auth_secret)
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Encoding": "aes128gcm",
            "TTL": str(ttl),
            "Authorization": self._authorization(endpoint),
        }
        return self._post(endpoint, body, headers, self._timeout_s if timeout_s is None else timeout_s)

    def _authorization(self, endpoint: str) -> str:
        """The VAPID header for the endpoint's origin, signed once and reused for :data:`JWT_REUSE_S` (a
        12-hour token stays valid far longer; push services accept a token for any endpoint of its origin)."""
        audience = endpoint_origin(endpoint)
        now = self._now_s()
        with self._lock:
            cached = self._jwts.get(audience)
        if cached is not None and 0 <= now - cached[1] < JWT_REUSE_S:
            return cached[0]
        header = vapid_authorization(endpoint, self._private_key, self._public_key, self._subject, now_s=now)
        with self._lock:
            if len(self._jwts) >= MAX_CACHED_AUDIENCES:
                self._jwts.clear()
            self._jwts[audience] = (header, now)
        return header

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> WebPushSender:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- internals ----------------------------------------------------------------------------------------

    def _post(self, endpoint: str, body: bytes, headers: dict[str, str], timeout_s: float) -> int:
        started = time.monotonic()
        try:
            with traced("Web Push"):
                response = self._http.post(endpoint, body, headers, timeout_s)
        except PushTransportError as exc:
            unconfirmed = exc.sent
            kind = "unconfirmed" if unconfirmed else "timeout" if "Timeout" in exc.kind else "network"
            emit_metric("PushFailures", "Count", 1, StatusClass=kind)
            # the error's kind only: a transport message can quote the endpoint URL, which is a capability
            raise PushSendError(f"Web Push delivery failed: {exc.kind}", status=None, unconfirmed=unconfirmed) from None
        status = response.status
        if 200 <= status < 300:
            emit_metric("PushLatency", "Milliseconds", (time.monotonic() - started) * 1000)
            return status
        emit_metric("PushFailures", "Count", 1, StatusClass=status_class(status))
        raise PushSendError(_failure_message(response), status=status)


def encrypt_aes128gcm(plaintext: bytes, ua_public: bytes, auth_secret: bytes) -> bytes:
    """One RFC 8291 aes128gcm record (rs 4096, delimiter 0x02) under a fresh ephemeral ECDH key and salt."""
    import http_ece  # lazy, see module docstring

    try:
        record: bytes = http_ece.encrypt(
            plaintext,
            salt=os.urandom(16),
            private_key=ec.generate_private_key(ec.SECP256R1()),
            dh=ua_public,
            auth_secret=auth_secret,
            version="aes128gcm",
            rs=RECORD_SIZE,
        )
    except (ValueError, TypeError, http_ece.ECEException) as exc:
        raise _invalid_subscription("keys are unusable") from exc
    return record


def _parse_subscription(subscription: PushSubscription) -> tuple[str, bytes, bytes]:
    if not isinstance(subscription, Mapping):
        raise _invalid_subscription("not an object")
    endpoint = subscription.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise _invalid_subscription("endpoint missing")
    endpoint = endpoint.strip()
    try:
        endpoint_origin(endpoint)
    except ValueError:
        raise _invalid_subscription("endpoint is not an http(s) URL") from None
    keys = subscription.get("keys")
    if not isinstance(keys, Mapping):
        raise _invalid_subscription("keys missing")
    p256dh, auth = keys.get("p256dh"), keys.get("auth")
    if not isinstance(p256dh, str) or not isinstance(auth, str) or not p256dh or not auth:
        raise _invalid_subscription("keys.p256dh/keys.auth missing")
    try:
        ua_public = b64url_decode(p256dh)
        auth_secret = b64url_decode(auth)
    except ValueError:
        raise _invalid_subscription("keys are not base64url") from None
    if len(ua_public) != 65 or ua_public[0] != 0x04 or not auth_secret:
        raise _invalid_subscription("keys have the wrong shape")
    return endpoint, ua_public, auth_secret


def _invalid_subscription(reason: str) -> PushSendError:
    return PushSendError(
        f"Push subscription invalid: {reason}", code="PUSH_SUBSCRIPTION_INVALID", status=None, permanent=False
    )


def _failure_message(response: PushResponse) -> str:
    """``Web Push delivery failed: <status> <statusText>[ — <body>]`` (reference text; body cut short)."""
    message = f"Web Push delivery failed: {response.status} {response.reason}".rstrip()
    text = " ".join(response.body.decode("utf-8", errors="replace").split())
    if text:
        if len(text) > _ERROR_BODY_CHARS:
            text = text[:_ERROR_BODY_CHARS] + "…"
        message += f" — {text}"
    return message
