"""The local gateway's HTTP/1.1 transport: the servers and the request handler in front of :class:`Gateway`.

``TCP_NODELAY`` on every accepted socket (a response written in pieces would otherwise wait out the peer's
delayed ACK, ~40 ms), a listen backlog, a read timeout (idle keep-alive connections are closed, a stalled
body or header block gets 408), headers and body in one write. Every method that is an HTTP token reaches
:meth:`Gateway.handle` (unknown ones go to ``$default``, as on API Gateway); bad framing is a 400 and an
error inside the gateway a 500, both as JSON ``{"message": ...}``, never a traceback or a dropped connection.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from amsg_local.framing import MAX_LEADING_BLANK_LINES, BadFraming, check_request_line
from amsg_local.http_answer import LISTEN_BACKLOG, GatewayResponse


class Gateway(Protocol):
    """What the transport needs of :class:`amsg_local.gateway.Gateway` (which imports this module)."""

    read_timeout_s: float
    payload_limit: int

    def handle(
        self,
        method: str,
        target: str,
        header_pairs: Sequence[tuple[str, str]],
        body: bytes,
        *,
        source_ip: str = ...,
        host: str = ...,
    ) -> GatewayResponse: ...

    def _with_cors(self, response: GatewayResponse, origin: str | None) -> GatewayResponse: ...


__all__ = ["GatewayRequestHandler", "IPv4Server", "IPv6Server", "make_handler"]

log = logging.getLogger("local_stack.gateway")


class IPv4Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer: one log line, not socketserver's traceback on stderr."""
        log.info("connection from %s ended early", client_address[0], exc_info=log.isEnabledFor(logging.DEBUG))


class IPv6Server(IPv4Server):
    address_family = socket.AF_INET6


class GatewayRequestHandler(BaseHTTPRequestHandler):
    """One connection's requests for :attr:`gateway` (set by :func:`make_handler` on a subclass per gateway: the
    server builds one handler per connection from a class)."""

    gateway: Gateway
    protocol_version = "HTTP/1.1"
    server_version = "amsg-local"
    sys_version = ""

    def handle_one_request(self) -> None:
        """One request: every token method is served (no ``do_<METHOD>`` lookup), bad framing is a 400."""
        try:
            self.raw_requestline = self._request_line()
        except TimeoutError:  # an idle keep-alive connection: closed without an answer, as API Gateway does
            self.close_connection = True
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        self.command, self.request_version, self.requestline = "", "HTTP/1.1", ""
        if len(self.raw_requestline) > 65536:
            self.send_error(414)
            return
        self.requestline = self.raw_requestline.decode("iso-8859-1").rstrip("\r\n")
        try:
            target = check_request_line(self.requestline)[1]
        except BadFraming as exc:
            self.send_error(400, str(exc))
            return
        try:
            if not self.parse_request():
                return
        except TimeoutError:  # the headers stopped arriving
            self.send_error(408)
            return
        if not self.path.startswith("/"):
            self.path = target  # absolute-form: route its path
        self._serve()
        self.wfile.flush()

    def _request_line(self) -> bytes:
        line = self.rfile.readline(65537)
        for _ in range(MAX_LEADING_BLANK_LINES):
            if line not in (b"\r\n", b"\n"):
                break
            line = self.rfile.readline(65537)
        return line

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors found before routing (header limits, bad request line): API Gateway's JSON, not HTML."""
        phrase = self.responses.get(code, ("Error",))[0]
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # the request line did not parse: answer in HTTP/1.1 anyway
            self.request_version = "HTTP/1.1"
        with contextlib.suppress(OSError):
            self._write(GatewayResponse.message(code, phrase))
        log.info("%s -> %d (%s)", getattr(self, "requestline", "") or "-", code, message or phrase)

    def _serve(self) -> None:
        started = time.monotonic()
        try:
            body = self._read_body()
        except TimeoutError:
            self.send_error(408)
            return
        except _TooLarge:
            response = self.gateway._with_cors(
                GatewayResponse.message(413, "Request Entity Too Large"), self.headers.get("origin")
            )
            self.close_connection = True
        except ValueError:
            response = GatewayResponse.message(400, "Bad Request")
            self.close_connection = True
        else:
            response = self._answer(body)
        self._write(response)
        log.info("%s %s -> %d (%.0f ms)", self.command, self.path, response.status, (time.monotonic() - started) * 1000)

    def _answer(self, body: bytes) -> GatewayResponse:
        try:
            return self.gateway.handle(
                self.command,
                self.path,
                list(self.headers.items()),
                body,
                source_ip=self.client_address[0],
                host=self.headers.get("host") or "{}:{}".format(*self.server.server_address[:2]),  # type: ignore[index]
            )
        except Exception:
            log.exception("%s %s: the gateway failed", self.command, self.path)
            return GatewayResponse.message(500, "Internal Server Error")

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            return self._read_chunked()
        length_text = self.headers.get("content-length")
        if not length_text:
            return b""
        length = int(length_text)
        if length < 0:
            raise ValueError("negative content-length")
        if length > self.gateway.payload_limit:
            raise _TooLarge
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            size = int(self.rfile.readline(65537).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(65537).strip():
                    pass  # trailers
                return b"".join(chunks)
            total += size
            if total > self.gateway.payload_limit:
                raise _TooLarge
            chunks.append(self.rfile.read(size))
            self.rfile.readline(3)

    def _write(self, response: GatewayResponse) -> None:
        self.send_response(response.status)
        for name, value in response.headers:
            self.send_header(name, value)
        self.send_header("content-length", str(len(response.body)))
        if self.close_connection:
            self.send_header("connection", "close")
        if getattr(self, "command", None) != "HEAD" and response.body:
            self._headers_buffer.append(b"\r\n" + response.body)  # type: ignore[attr-defined]  # one write: headers and body together
            self.flush_headers()
        else:
            self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)


def make_handler(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
    """The handler class for one gateway; ``timeout`` is the socket timeout (idle keep-alive, stalled bodies)."""
    return type("Handler", (GatewayRequestHandler,), {"gateway": gateway, "timeout": gateway.read_timeout_s})


class _TooLarge(Exception):
    pass
