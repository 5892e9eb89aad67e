"""The push transport (amsg.adapters.push_http): keep-alive reuse, never writing a push into a connection the
server closed, the keep-alive expiry, per-call timeouts on a reused connection, and TLS trust."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from amsg.adapters import push_http
from amsg.adapters.push_http import PushHttp, PushTransportError
from amsg.adapters.webpush_sender import WebPushSender
from amsg.vapid import generate_vapid_keys

from tests.support.certificates import self_signed
from tests.support.fake_push import FakePushService


class _Counting(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0
    delay_s = 0.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Counting

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.server.delay_s:
            threading.Event().wait(self.server.delay_s)
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def counting() -> Iterator[_Counting]:
    server = _Counting(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _url(server: _Counting | socket.socket) -> str:
    port = server.server_address[1] if isinstance(server, _Counting) else server.getsockname()[1]
    return f"http://127.0.0.1:{port}/push/x"


def test_pushes_to_one_origin_reuse_one_connection(counting: _Counting) -> None:
    http = PushHttp()
    statuses = [http.post(_url(counting), b"x", {"TTL": "0"}, 5.0).status for _ in range(5)]
    assert statuses == [201] * 5
    assert counting.connections == 1
    assert http.idle_connections() == 1
    http.close()
    assert http.idle_connections() == 0


def test_the_sender_keeps_its_connection_across_pushes() -> None:
    """Through the real sender and the VAPID-checking fake: one connection for a batch's pushes."""
    public, private = generate_vapid_keys()
    with FakePushService(vapid_public_key=public) as push, WebPushSender(private, public, "ops@example.com") as sender:
        subs = [push.subscribe().to_json() for _ in range(3)]
        for sub in subs:
            assert sender.send(sub, b'{"n":1}') == 201
        assert len(push.payloads()) == 3
        assert sender._http.idle_connections() == 1


def test_an_idle_connection_expires(counting: _Counting) -> None:
    now = [100.0]
    http = PushHttp(clock=lambda: now[0])
    http.post(_url(counting), b"x", {}, 5.0)
    now[0] += push_http.KEEPALIVE_EXPIRY_S - 0.1
    http.post(_url(counting), b"x", {}, 5.0)
    assert counting.connections == 1
    now[0] += push_http.KEEPALIVE_EXPIRY_S + 0.1
    http.post(_url(counting), b"x", {}, 5.0)
    assert counting.connections == 2


def _answer_then_close(server: socket.socket, answers: int) -> threading.Thread:
    """Answers each connection's request with a keep-alive 201, then closes it: a server ending idle
    connections. Counts the requests it answered."""

    def serve() -> None:
        for _ in range(answers):
            conn, _ = server.accept()
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_connection_the_server_closed_is_never_written_to() -> None:
    """Writing a push into a connection the server already closed would end without an answer: an unknown
    outcome for a push that never arrived. The pool drops it and connects anew."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(2)
    thread = _answer_then_close(server, 2)
    http = PushHttp()
    assert http.post(_url(server), b"x", {}, 5.0).status == 201
    threading.Event().wait(0.1)  # the server's FIN has arrived
    assert http.post(_url(server), b"x", {}, 5.0).status == 201
    thread.join(timeout=5)
    server.close()


def test_a_reused_connection_takes_the_calls_timeout(counting: _Counting) -> None:
    http = PushHttp()
    http.post(_url(counting), b"x", {}, 5.0)
    counting.delay_s = 1.0
    with pytest.raises(PushTransportError) as info:
        http.post(_url(counting), b"x", {}, 0.2)
    assert (info.value.kind, info.value.sent) == ("ReadTimeout", True)
    assert counting.connections == 1  # it was the pooled connection that timed out
    assert http.idle_connections() == 0  # and it is not pooled again


def test_a_connection_close_answer_is_not_pooled() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    thread = _serve_once(server, b"HTTP/1.1 201 Created\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    http = PushHttp()
    assert http.post(_url(server), b"x", {}, 5.0).status == 201
    assert http.idle_connections() == 0
    thread.join(timeout=5)
    server.close()


def test_unusable_urls_send_nothing() -> None:
    http = PushHttp()
    for url, kind in [("ftp://push.example/x", "UnsupportedProtocol"), ("http://[::1/x", "InvalidURL")]:
        with pytest.raises(PushTransportError) as info:
            http.post(url, b"x", {}, 1.0)
        assert (info.value.kind, info.value.sent) == (kind, False)


def test_an_untrusted_certificate_is_a_connect_error_and_nothing_is_sent(tmp_path: Path) -> None:
    """TLS is verified against the CA bundle (a self-signed push service is refused at the handshake, before
    any byte of the push), and the context is built once per pool."""
    cert_path, key_path = self_signed(tmp_path, "127.0.0.1")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(2)
    received: list[bytes] = []

    def serve() -> None:
        for _ in range(2):
            conn, _ = server.accept()
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    received.append(tls.recv(65536))
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    http = PushHttp()
    url = f"https://127.0.0.1:{server.getsockname()[1]}/push/x"
    for _ in range(2):
        with pytest.raises(PushTransportError) as info:
            http.post(url, b"x", {}, 5.0)
        assert (info.value.kind, info.value.sent) == ("ConnectError", False)
    assert push_http._shared_tls[0].verify_mode == ssl.CERT_REQUIRED
    thread.join(timeout=5)
    server.close()
    assert received == []


def test_a_push_is_a_subsegment_when_tracing_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """No X-Ray patch sees a POST written through http.client by hand: the sender opens the subsegment."""
    import contextlib

    from amsg import observability

    opened: list[str] = []

    class Provider:
        @contextlib.contextmanager
        def in_subsegment(self, name: str) -> Iterator[None]:
            opened.append(name)
            yield

    class Tracer:
        provider = Provider()

    public, private = generate_vapid_keys()
    with FakePushService(vapid_public_key=public) as push, WebPushSender(private, public, "ops@example.com") as sender:
        sub = push.subscribe().to_json()
        sender.send(sub, b"{}")
        assert opened == []  # tracing off: nothing
        monkeypatch.setattr(observability, "_tracer", [Tracer()])
        sender.send(sub, b"{}")
    assert opened == ["Web Push"]


def test_concurrent_pushes_each_take_their_own_connection(counting: _Counting) -> None:
    """A batch's records push side by side: a connection serves one request at a time, and the pool keeps
    what they opened for the next pushes."""
    from concurrent.futures import ThreadPoolExecutor

    http = PushHttp()
    with ThreadPoolExecutor(max_workers=6) as pool:
        statuses = list(pool.map(lambda _: http.post(_url(counting), b"x", {}, 5.0).status, range(120)))
    assert statuses == [201] * 120
    assert 1 <= counting.connections <= 6
    assert http.idle_connections() == counting.connections


def test_the_tls_context_is_built_once_and_at_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_task's init builds the context (loading the CA bundle is ~17 ms of CPU), every pool shares it."""
    from amsg.adapters.webpush_sender import load_push_stack

    monkeypatch.setattr(push_http, "_shared_tls", [])
    load_push_stack()
    assert len(push_http._shared_tls) == 1
    built = push_http._shared_tls[0]
    assert push_http.tls_context() is built and PushHttp().idle_connections() == 0
    assert built.verify_mode == ssl.CERT_REQUIRED and built.check_hostname


def _serve_once(server: socket.socket, answer: bytes, drip: bytes = b"", drip_every_s: float = 0.0) -> threading.Thread:
    def serve() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        try:
            conn.sendall(answer)
            for byte in drip:
                threading.Event().wait(drip_every_s)
                conn.sendall(bytes([byte]))
        except OSError:
            pass  # the client cut the answer short
        finally:
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_huge_answer_body_is_cut_and_its_connection_closed() -> None:
    """A push endpoint is the user's URL: a 1 MB answer keeps the status and 16 KiB, and the connection (left
    mid-body) is not pooled."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    size = 1 << 20
    thread = _serve_once(server, b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n" % size + b"e" * size)
    http = PushHttp()
    answer = http.post(_url(server), b"x", {}, 5.0)
    assert (answer.status, len(answer.body)) == (400, push_http.MAX_ANSWER_BODY_BYTES)
    assert http.idle_connections() == 0
    thread.join(timeout=5)
    server.close()


def test_a_drip_fed_answer_body_is_cut_at_the_calls_timeout() -> None:
    """One byte every 50 ms for 200 bytes would take 10 s: the body is cut after the 0.5 s timeout, the status
    kept."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    head = b"HTTP/1.1 201 Created\r\nContent-Length: 200\r\n\r\n"
    thread = _serve_once(server, head, drip=b"d" * 200, drip_every_s=0.05)
    http = PushHttp()
    started = datetime.datetime.now()
    answer = http.post(_url(server), b"x", {}, 0.5)
    elapsed = (datetime.datetime.now() - started).total_seconds()
    assert answer.status == 201
    assert 0 < len(answer.body) < 200
    assert elapsed < 3.0
    assert http.idle_connections() == 0
    thread.join(timeout=15)
    server.close()


def test_the_idle_pool_is_bounded_across_origins_and_pruned() -> None:
    """Push endpoints are users' URLs: pushes to more origins than MAX_IDLE keep at most MAX_IDLE idle
    connections (the least recently used closed), and once they expire, releasing any connection closes them."""
    servers = []
    for _ in range(push_http.MAX_IDLE + 5):
        server = _Counting(("127.0.0.1", 0), _Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
    now = [100.0]
    http = PushHttp(clock=lambda: now[0])
    try:
        for i, server in enumerate(servers):
            now[0] = 100.0 + i * 0.01
            assert http.post(_url(server), b"x", {}, 5.0).status == 201
        assert http.idle_connections() == push_http.MAX_IDLE
        now[0] += 0.01
        assert http.post(_url(servers[-1]), b"x", {}, 5.0).status == 201  # the most recent one is still pooled
        assert servers[-1].connections == 1
        assert http.post(_url(servers[0]), b"x", {}, 5.0).status == 201  # the oldest one was closed
        assert servers[0].connections == 2
        now[0] += push_http.KEEPALIVE_EXPIRY_S + 1
        assert http.post(_url(servers[1]), b"x", {}, 5.0).status == 201
        assert http.idle_connections() == 1  # every expired one closed on that release
    finally:
        http.close()
        for server in servers:
            server.shutdown()
            server.server_close()
