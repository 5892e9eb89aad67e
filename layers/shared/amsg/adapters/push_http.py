"""The Web Push sender's HTTP/1.1 transport: one POST at a time per connection, over a keep-alive pool per origin.

Why not httpx here (the LLM adapter keeps it): a push is one small POST whose answer is a status line and a
short body, and httpx's request and response models, URL parser, cookie jar and h11 state machine cost ~0.25 ms
of CPU per push on this project's benchmark machine against ~0.06 ms for ``http.client`` (docs/decisions.md,
"42"). What this module keeps from httpx's behaviour, because delivery's exactly-once rules rest on it
(docs/delivery.md):

* errors are told apart by whether any byte of the request may have left: a failure to connect (DNS, refused,
  unreachable, the connect timeout, the TLS handshake) sent nothing; everything after it (a write, a read, a
  timeout waiting for the answer, a dropped or malformed answer) may follow a push the service accepted;
* an idle connection is reused only within :data:`KEEPALIVE_EXPIRY_S` and only while the server has not closed
  it (nothing readable on it), as httpcore does, so a stale connection is not written to;
* TLS verifies against certifi's CA bundle (httpx's default), HTTP/1.1 by ALPN, no proxy from the environment,
  no redirect followed (a 3xx is a non-2xx answer), no ``User-Agent``/``Accept``/``Accept-Encoding`` header.

Unlike httpx, the answer's body is bounded in size and in time (:data:`MAX_ANSWER_BODY_BYTES`).

Error kinds are httpx's exception names (``ConnectError``, ``ReadTimeout``, ...), which the sender's failure
text already used.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from amsg.adapters.keepalive import IdlePool, verifying_context

KEEPALIVE_EXPIRY_S = 5.0  # httpx's default keep-alive expiry
# Idle connections kept in all, whatever the number of origins (httpx's ``max_keepalive_connections``): push
# endpoints are users' URLs, so a sandbox may meet any number of origins, and each idle connection holds a file
# descriptor. A connection past its expiry is closed when any connection is released, not only when its own
# origin is used again.
MAX_IDLE = 20
# A push endpoint is a URL the user supplied: its answer's body is kept up to this size and read for at most the
# call's timeout once the status line is in. The status decides the outcome; a longer or slower body is cut and
# its connection closed, so no endpoint can hold a sandbox's memory or a worker thread with a drip-fed answer.
MAX_ANSWER_BODY_BYTES = 16 * 1024
# what a request target may hold unescaped (RFC 3986 pchar, '/', '?', and '%' of an existing escape)
_TARGET_SAFE = "/?:@!$&'()*+,;=-._~%"


_shared_tls: list[ssl.SSLContext] = []
_tls_lock = threading.Lock()


def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (certifi's CA bundle, HTTP/1.1 by ALPN), built once per process and shared by
    every pool (keepalive.py; the DynamoDB transport shares it when botocore's bundle is certifi's too). Loading
    the bundle costs ~17 ms of CPU here: run_task builds it at init
    (:func:`amsg.adapters.webpush_sender.load_push_stack`), not in its first batch."""
    with _tls_lock:
        if not _shared_tls:
            import certifi

            _shared_tls.append(verifying_context(certifi.where()))
        return _shared_tls[0]


class PushTransportError(Exception):
    """A POST that got no HTTP answer. ``kind`` is the httpx exception name; ``sent`` False only when no byte of
    the request can have left (a retry cannot push twice). Never carries the URL (a capability)."""

    def __init__(self, kind: str, *, sent: bool) -> None:
        super().__init__(kind)
        self.kind = kind
        self.sent = sent


@dataclass(frozen=True)
class PushResponse:
    status: int
    reason: str
    body: bytes


@dataclass(frozen=True)
class _Target:
    scheme: str
    host: str
    port: int
    path: str

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


def _target(url: str) -> _Target:
    try:
        parts = urlsplit(url)
        port = parts.port
        host = (parts.hostname or "").encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        raise PushTransportError("InvalidURL", sent=False) from None
    if parts.scheme not in ("http", "https") or not host:
        raise PushTransportError("UnsupportedProtocol", sent=False)
    path = quote(parts.path or "/", safe=_TARGET_SAFE)
    if parts.query:
        path += "?" + quote(parts.query, safe=_TARGET_SAFE)
    return _Target(parts.scheme, host, port or (443 if parts.scheme == "https" else 80), path)


class PushHttp:
    """Thread-safe: a connection serves one request at a time; idle ones wait in a pool (keepalive.py)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._pool: IdlePool[http.client.HTTPConnection] = IdlePool(
            expiry_s=KEEPALIVE_EXPIRY_S, max_idle=MAX_IDLE, clock=clock
        )

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> PushResponse:
        """POST ``body``; the answer, whatever its status, or :class:`PushTransportError`."""
        target = _target(url)
        conn = self._acquire(target, timeout_s)
        try:
            answer, must_close = _exchange(conn, target.path, body, headers, timeout_s)
        except BaseException:
            conn.close()
            raise
        if must_close:
            conn.close()
        else:
            self._pool.give_back(target.origin, conn)
        return answer

    def idle_connections(self) -> int:
        return self._pool.idle_connections()

    def close(self) -> None:
        self._pool.close()

    def _acquire(self, target: _Target, timeout_s: float) -> http.client.HTTPConnection:
        conn = self._pool.take(target.origin)
        if conn is None:
            return self._connect(target, timeout_s)
        assert conn.sock is not None
        conn.sock.settimeout(timeout_s)
        return conn

    def _connect(self, target: _Target, timeout_s: float) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = None
        try:
            if target.scheme == "https":
                context = tls_context()
                conn = http.client.HTTPSConnection(target.host, target.port, timeout=timeout_s, context=context)
            else:
                conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout_s)
            conn.connect()
        except TimeoutError:
            _close(conn)
            raise PushTransportError("ConnectTimeout", sent=False) from None
        except OSError:  # DNS, refused, unreachable, the TLS handshake or the server's certificate
            _close(conn)
            raise PushTransportError("ConnectError", sent=False) from None
        except http.client.InvalidURL:
            raise PushTransportError("InvalidURL", sent=False) from None
        conn.auto_open = 0  # never reconnect silently under a request that was already written
        return conn


def _close(conn: http.client.HTTPConnection | None) -> None:
    if conn is not None:
        conn.close()


def _exchange(
    conn: http.client.HTTPConnection, path: str, body: bytes, headers: Mapping[str, str], timeout_s: float
) -> tuple[PushResponse, bool]:
    """Write the request, read the whole answer: (the response, whether the connection must be closed)."""
    try:
        conn.putrequest("POST", path, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.putheader("Connection", "keep-alive")
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
    except TimeoutError:
        raise PushTransportError("WriteTimeout", sent=True) from None
    except (OSError, http.client.HTTPException):
        raise PushTransportError("WriteError", sent=True) from None
    try:
        response = conn.getresponse()
        data, whole = _bounded_body(response, time.monotonic() + timeout_s)
    except TimeoutError:
        raise PushTransportError("ReadTimeout", sent=True) from None
    except http.client.HTTPException:  # no answer, a malformed one, or one cut short
        raise PushTransportError("RemoteProtocolError", sent=True) from None
    except OSError:
        raise PushTransportError("ReadError", sent=True) from None
    return PushResponse(response.status, response.reason or "", data), bool(response.will_close) or not whole


def _bounded_body(response: http.client.HTTPResponse, deadline: float) -> tuple[bytes, bool]:
    """The answer's body up to :data:`MAX_ANSWER_BODY_BYTES`, read until ``deadline``: (body, read whole). Each
    ``read1`` returns what one receive brought, so a drip-fed body is cut at the deadline (give or take one
    socket timeout), not after it has all arrived."""
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_ANSWER_BODY_BYTES and time.monotonic() < deadline:
        chunk = response.read1(MAX_ANSWER_BODY_BYTES + 1 - size)
        if not chunk:
            response.read()  # nothing is left: this closes the response, so the connection may serve the next
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)[:MAX_ANSWER_BODY_BYTES], False
