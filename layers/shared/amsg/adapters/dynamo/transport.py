"""The table's HTTP/1.1 transport: what sends the botocore client's signed requests, in place of urllib3.

botocore hands each request, already built, signed and passed through its ``before-send`` hooks, to its
endpoint's ``http_session.send``; retries, their back-off, error parsing and every other hook stay botocore's.
urllib3 and ``http.client`` under it cost about a third of a request's client CPU (e-mail header parsing, header
dictionaries, pool bookkeeping: docs/performance.md); this transport writes the request over a keep-alive socket
and reads a Content-Length or chunked answer itself (docs/decisions.md,
44). What it keeps of botocore's own session, so that the client behaves as before:

* the client's settings, read from the session botocore built: connect and read timeouts (and a request's own
  read timeout), the CA bundle (``verify``: ``AWS_CA_BUNDLE``, certifi's by default), socket options
  (``TCP_NODELAY``, ``tcp_keepalive``), the idle pool's size (``max_pool_connections``);
* the exceptions ``URLLib3Session.send`` raises in the same situations, so that botocore's retry mode decides as
  before: nothing sent (DNS, refused, connect timeout) ``EndpointConnectionError`` / ``ConnectTimeoutError``;
  a certificate or TLS failure ``SSLError``; a timeout waiting for the answer (or the TLS handshake)
  ``ReadTimeoutError``; a connection dropped, reset or answering malformed bytes ``ConnectionClosedError``;
  anything else ``HTTPClientError``. One deliberate difference: an answer cut short of its Content-Length is a
  ``ConnectionClosedError`` (urllib3, as botocore configures it, returns the short body);
* an idle connection is reused only while the server has not closed it (keepalive.py), and not after
  :data:`KEEPALIVE_EXPIRY_S` idle (a frozen sandbox's connection may be gone without a word);
* HTTPS verifies the certificate and the host name (SNI); plain HTTP serves DynamoDB Local.

It is not installed (botocore's session stays) when a proxy applies to the client (``HTTPS_PROXY`` /
``HTTP_PROXY`` or the client's ``proxies``), with a client certificate, or when the client has no session of the
shape this module knows (another botocore); a request whose body is a stream goes to botocore's session.
``AMSG_DYNAMO_TRANSPORT=botocore`` keeps botocore's session (docs/configuration.md).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import ssl
from collections.abc import Mapping
from concurrent.futures import CancelledError
from functools import lru_cache
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from botocore.awsrequest import AWSResponse
from botocore.exceptions import (
    BotoCoreError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    ReadTimeoutError,
    SSLError,
)
from botocore.httpsession import URLLib3Session, get_cert_path

from amsg.adapters.keepalive import IdlePool, verifying_context

ENV = "AMSG_DYNAMO_TRANSPORT"
KEEPALIVE_EXPIRY_S = 30.0  # below DynamoDB's idle timeout; a reconnect after 30 s idle costs one handshake
MAX_HEAD_BYTES = 64 * 1024  # an answer's status line and headers (DynamoDB's are ~300 bytes)
_RECV_BYTES = 64 * 1024
_JOIN_BELOW = 64 * 1024
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_DEFAULT_PORTS = {"http": 80, "https": 443}


class _Malformed(Exception):
    """The answer is not HTTP/1.1 as this transport reads it, or ended early: its connection is closed."""


class _Target(NamedTuple):
    origin: tuple[str, str, int]  # scheme, host, port
    path: str
    host_header: str


@lru_cache(maxsize=64)
def _target(url: str) -> _Target:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 0)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # the host botocore's SigV4 signs (auth.py ``_canonical_host``): the name alone on the default port
    host_header = host if parts.port == _DEFAULT_PORTS.get(parts.scheme) else parts.netloc.rsplit("@", 1)[-1]
    return _Target((parts.scheme, host, port), path, host_header)


class _Settings(NamedTuple):
    connect_timeout: float | None
    read_timeout: float | None
    verify: bool | str
    socket_options: list[tuple[int, int, int]]
    max_idle: int


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the table's client gets this transport: ``lean`` (the default) or ``botocore``."""
    choice = env.get(ENV, "lean").strip().lower() or "lean"
    if choice not in ("lean", "botocore"):
        raise ValueError(f"{ENV} must be 'lean' or 'botocore'")
    return choice == "lean"


def install(client: Any, env: Mapping[str, str] | None = None) -> bool:
    """Put the lean transport under ``client`` (True), or leave botocore's session (False: switched off, a proxy
    or client certificate applies, or the client is not of the shape this module knows)."""
    if not wanted(os.environ if env is None else env):
        return False
    endpoint = getattr(client, "_endpoint", None)
    session = getattr(endpoint, "http_session", None)
    settings = _settings_of(session)
    if settings is None:
        return False
    lean = LeanSession(settings, fallback=session)
    if str(getattr(endpoint, "host", "")).startswith("https:"):
        with contextlib.suppress(OSError, ValueError):  # a bundle that does not load fails each connection
            lean.tls()  # the CA bundle loads now (~16 ms of CPU): at a prepared init, not in the first request
    endpoint.http_session = lean  # type: ignore[union-attr]
    return True


def _settings_of(session: Any) -> _Settings | None:
    if type(session) is not URLLib3Session:
        return None
    try:
        proxies = session._proxy_config
        if proxies.proxy_url_for("https://a") or proxies.proxy_url_for("http://a") or session._cert_file:
            return None
        timeout = session._timeout
        connect, read = (
            (timeout, timeout) if isinstance(timeout, int | float) else (timeout.connect_timeout, timeout.read_timeout)
        )
        if not all(value is None or isinstance(value, int | float) for value in (connect, read)):
            return None  # a timeout this module does not know how to apply
        return _Settings(connect, read, session._verify, list(session._socket_options), session._max_pool_connections)
    except AttributeError:
        return None


class _Connection:
    """One socket and what was read past the last answer (nothing, when it is pooled)."""

    __slots__ = ("buf", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock: socket.socket | None = sock
        self.buf = bytearray()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def fill(self) -> None:
        assert self.sock is not None
        data = self.sock.recv(_RECV_BYTES)
        if not data:
            raise _Malformed("the connection closed before the answer ended")
        self.buf += data

    def take(self, size: int) -> bytes:
        while len(self.buf) < size:
            self.fill()
        data = bytes(self.buf[:size])
        del self.buf[:size]
        return data

    def line(self) -> bytes:
        """One CRLF-ended line (a chunk size or trailer), without its CRLF."""
        return self._until(b"\r\n", "a line too long")

    def head(self) -> bytes:
        """The status line and headers, without the empty line that ends them."""
        return self._until(b"\r\n\r\n", "the answer's head is too long")

    def _until(self, end_mark: bytes, too_long: str) -> bytes:
        """The bytes before the next ``end_mark`` (consumed too), at most :data:`MAX_HEAD_BYTES` of them."""
        start = 0
        while (end := self.buf.find(end_mark, start)) < 0:
            if len(self.buf) > MAX_HEAD_BYTES:
                raise _Malformed(too_long)
            start = max(0, len(self.buf) - len(end_mark) + 1)
            self.fill()
        return self.take(end + len(end_mark))[: -len(end_mark)]

    def until_close(self) -> bytes:
        assert self.sock is not None
        while data := self.sock.recv(_RECV_BYTES):
            self.buf += data
        return self.take(len(self.buf))


class _Answer(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str], dict[str, str]]:
    """(status, HTTP version, headers with repeated names joined by ', ' as urllib3 joins them, the same by
    lower-case name)."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if version not in ("HTTP/1.1", "HTTP/1.0") or not (code.isascii() and code.isdigit()) or rest[3:4] not in ("", " "):
        raise _Malformed("not an HTTP/1.x status line")
    headers: dict[str, str] = {}
    lower: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or name[0] in " \t":
            raise _Malformed("a malformed header line")
        value = value.strip(" \t")
        known = lower.get(name.lower())
        if known is None:
            lower[name.lower()] = name
            headers[name] = value
        else:
            headers[known] = f"{headers[known]}, {value}"
    return int(code), version, headers, {name.lower(): value for name, value in headers.items()}


def _read_answer(conn: _Connection, method: str) -> _Answer:
    """The whole answer (interim 1xx answers skipped), framed as RFC 9112 section 6.3 says."""
    while True:
        status, version, headers, by_name = _parse_head(conn.head())
        if status >= 200 or status == 101:
            break
    if status == 101:
        raise _Malformed("a protocol switch nobody asked for")
    tokens = {t.strip().lower() for t in (by_name.get("connection") or "").split(",")}
    keep_alive = "close" not in tokens and (version == "HTTP/1.1" or "keep-alive" in tokens)
    if method == "HEAD" or status in (204, 304):
        return _Answer(status, headers, b"", keep_alive)
    coding = by_name.get("transfer-encoding")
    if coding is not None:
        if coding.split(",")[-1].strip().lower() != "chunked":
            return _Answer(status, headers, conn.until_close(), False)
        return _Answer(status, headers, _chunked_body(conn), keep_alive)
    length = by_name.get("content-length")
    if length is None:
        return _Answer(status, headers, conn.until_close(), False)
    sizes = {part.strip() for part in length.split(",")}
    if len(sizes) != 1 or not ((size := sizes.pop()).isascii() and size.isdigit()):
        raise _Malformed("a malformed Content-Length")
    return _Answer(status, headers, conn.take(int(size)), keep_alive)


def _chunked_body(conn: _Connection) -> bytes:
    parts: list[bytes] = []
    while True:
        size_text = conn.line().split(b";", 1)[0].strip(b" \t")
        if not size_text or size_text.strip(_HEX_DIGITS):
            raise _Malformed("a malformed chunk size")
        size = int(size_text, 16)
        if size == 0:
            while conn.line():  # trailers, until the empty line
                pass
            return b"".join(parts)
        parts.append(conn.take(size))
        if conn.take(2) != b"\r\n":
            raise _Malformed("a chunk without its CRLF")


class _Body:
    """The answer's raw body as botocore reads it (``AWSResponse.content`` joins ``raw.stream()``)."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Any:
        yield self._data

    def read(self, *_: Any, **__: Any) -> bytes:
        data, self._data = self._data, b""
        return data


class LeanSession:
    """botocore's ``http_session`` interface (``send``, ``close``): thread-safe, a keep-alive pool per origin."""

    def __init__(self, settings: _Settings, *, fallback: Any) -> None:
        self._settings = settings
        self._fallback = fallback
        self._pool: IdlePool[_Connection] = IdlePool(expiry_s=KEEPALIVE_EXPIRY_S, max_idle=max(1, settings.max_idle))

    def close(self) -> None:
        self._pool.close()
        self._fallback.close()

    def idle_connections(self) -> int:
        return self._pool.idle_connections()

    def send(self, request: Any) -> AWSResponse:
        body = request.body
        if body is None:
            body = b""
        elif isinstance(body, str):
            body = body.encode("utf-8")
        elif not isinstance(body, bytes | bytearray) or "Transfer-Encoding" in request.headers:
            return self._fallback.send(request)  # a streamed body: botocore's session sends it
        try:
            return self._send(request, bytes(body))
        except (BotoCoreError, CancelledError):
            raise
        except Exception as exc:  # as URLLib3Session.send: whatever else failed is an HTTPClientError
            raise HTTPClientError(error=exc) from exc

    def _send(self, request: Any, body: bytes) -> AWSResponse:
        target = _target(request.url)
        head = _request_head(request, target, len(body))
        context = getattr(request, "context", None) or {}
        read_timeout = context.get("read_timeout") or self._settings.read_timeout
        conn = self._pool.take(target.origin) or self._connect(target, request.url)
        try:
            answer = _exchange(conn, head, body, read_timeout, request)
        except BaseException:
            conn.close()
            raise
        if answer.keep_alive and not conn.buf:
            self._pool.give_back(target.origin, conn)
        else:
            conn.close()  # the server closes it, or sent more than its answer
        return AWSResponse(request.url, answer.status, answer.headers, _Body(answer.body))

    def _connect(self, target: _Target, url: str) -> _Connection:
        scheme, host, port = target.origin
        timeout = self._settings.connect_timeout
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except TimeoutError as exc:
            raise ConnectTimeoutError(endpoint_url=url, error=exc) from exc
        except OSError as exc:  # DNS (socket.gaierror), refused, unreachable: nothing was sent
            raise EndpointConnectionError(endpoint_url=url, error=exc) from exc
        try:
            for level, option, value in self._settings.socket_options:
                sock.setsockopt(level, option, value)
            if scheme == "https":
                try:
                    context = self.tls()
                except (OSError, ValueError) as exc:  # the CA bundle does not load: urllib3 says SSLError too
                    raise ssl.SSLError(f"the CA bundle could not be loaded: {exc}") from exc
                sock = context.wrap_socket(sock, server_hostname=host)
        except TimeoutError as exc:  # urllib3 reports a handshake that timed out as a read timeout
            sock.close()
            raise ReadTimeoutError(endpoint_url=url, error=exc) from exc
        except ssl.SSLError as exc:  # the certificate, its host name, the handshake
            sock.close()
            raise SSLError(endpoint_url=url, error=exc) from exc
        except BaseException:
            sock.close()
            raise
        return _Connection(sock)

    def tls(self) -> ssl.SSLContext:
        """The context new HTTPS connections verify with: loaded once per process and CA bundle (urllib3 loads
        the bundle into its context again for every new connection, ~16 ms of CPU each)."""
        verify = self._settings.verify
        if verify is False:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        return verifying_context(get_cert_path(verify))


def _request_head(request: Any, target: _Target, length: int) -> bytes:
    """The request line and headers as ``http.client`` writes them for urllib3 (``Host``, then botocore's
    headers, ``Accept-Encoding: identity`` and ``Content-Length`` unless botocore set them)."""
    lines = [f"{request.method} {target.path} HTTP/1.1", f"Host: {target.host_header}"]
    names: set[str] = set()
    for name, value in request.headers.items():
        text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        if "\n" in text or "\r" in text or "\n" in name or "\r" in name or ":" in name:
            raise ValueError("a header line break in a request header")
        lines.append(f"{name}: {text}")
        names.add(name.lower())
    if "accept-encoding" not in names:
        lines.append("Accept-Encoding: identity")
    if "content-length" not in names:
        lines.append(f"Content-Length: {length}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


def _exchange(conn: _Connection, head: bytes, body: bytes, read_timeout: float | None, request: Any) -> _Answer:
    """Write the request, read its answer; errors mapped as ``URLLib3Session.send`` maps urllib3's."""
    url = request.url
    assert conn.sock is not None
    conn.sock.settimeout(read_timeout)
    try:
        if len(body) < _JOIN_BELOW:
            conn.sock.sendall(head + body)  # one segment (TCP_NODELAY)
        else:  # a large body is not copied to join its head
            conn.sock.sendall(head)
            conn.sock.sendall(body)
    except ssl.SSLError as exc:
        raise SSLError(endpoint_url=url, error=exc) from exc
    except OSError as exc:
        # as urllib3: a server that closed after answering early leaves its answer readable
        if not isinstance(exc, BrokenPipeError) and exc.errno not in (errno.ECONNRESET, errno.EPROTOTYPE):
            raise ConnectionClosedError(endpoint_url=url, request=request, error=exc) from exc
    try:
        return _read_answer(conn, request.method)
    except TimeoutError as exc:
        raise ReadTimeoutError(endpoint_url=url, error=exc) from exc
    except ssl.SSLError as exc:
        raise SSLError(endpoint_url=url, error=exc) from exc
    except (OSError, _Malformed, ValueError) as exc:  # reset, dropped, or not an HTTP answer
        raise ConnectionClosedError(endpoint_url=url, request=request, error=exc) from exc
