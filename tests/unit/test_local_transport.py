"""The local gateway under load: keep-alive, TCP_NODELAY, bursts, stalled bodies, JSON framing errors, and
one event per sandbox even when Powertools keeps the event on a class."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import pytest
from amsg_local.gateway import LISTEN_BACKLOG, Gateway
from amsg_local.template import load_template
from amsg_local.transport import IPv4Server as _IPv4Server

from tests.support.tiny_stack import write_tiny_project

pytestmark = pytest.mark.slow  # sandboxes are processes: subprocesses, not for make unit


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    saved = list(sys.path)
    template = load_template(write_tiny_project(tmp_path_factory.mktemp("tiny"), with_delivery=False))
    gateway = Gateway(template, read_timeout_s=0.5)
    gateway.start("127.0.0.1", 0)
    yield gateway
    gateway.stop()
    sys.path[:] = saved


def _address(gateway: Gateway) -> tuple[str, int]:
    url = urlsplit(gateway.base_url)
    assert url.hostname and url.port
    return url.hostname, url.port


def _exchange(gateway: Gateway, raw: bytes, *, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read one response until the peer closes; (status, headers, body)."""
    with socket.create_connection(_address(gateway), timeout=timeout) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _get(sock: socket.socket, target: str) -> tuple[int, bytes]:
    """One keep-alive GET on an open socket (Content-Length framed answer)."""
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: local\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1]), body


def test_accepted_sockets_have_tcp_nodelay() -> None:
    server = _IPv4Server(("127.0.0.1", 0), lambda *args: None)  # type: ignore[arg-type]
    try:
        assert server.request_queue_size == LISTEN_BACKLOG >= 256
        with socket.create_connection(server.server_address[:2], timeout=5):
            accepted, _ = server.get_request()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        server.server_close()


def test_keep_alive_serves_many_requests_on_one_connection(gw: Gateway) -> None:
    with socket.create_connection(_address(gw), timeout=10) as sock:
        replies = [_get(sock, f"/whoami?id=k{i}") for i in range(20)]
    assert [(status, json.loads(body)["id"]) for status, body in replies] == [(200, f"k{i}") for i in range(20)]


def test_concurrent_invocations_never_see_each_others_event(gw: Gateway) -> None:
    # Powertools stores the current event on its router base class; each request naps inside the route, so
    # without per-sandbox isolation most would read the event of whichever request resolved last.
    def call(index: int) -> tuple[int, dict[str, Any]]:
        with socket.create_connection(_address(gw), timeout=30) as sock:
            status, body = _get(sock, f"/whoami?id=req-{index}&nap=0.2")
        return status, json.loads(body)

    with ThreadPoolExecutor(24) as pool:
        replies = list(pool.map(call, range(24)))
    assert [status for status, _ in replies] == [200] * 24
    assert [reply["id"] for _, reply in replies] == [f"req-{i}" for i in range(24)]
    assert len({reply["requestId"] for _, reply in replies}) == 24
    # the shared Powertools logger's appended keys (inject_lambda_context + append_keys) are per invocation too
    for _, reply in replies:
        assert reply["logKeys"]["caller"] == reply["id"]
        assert reply["logKeys"]["function_request_id"] == reply["requestId"]
        assert reply["logKeys"]["correlation_id"]
    assert len({reply["logKeys"]["correlation_id"] for _, reply in replies}) == 24


def test_burst_of_200_connections_is_served_without_reset(gw: Gateway) -> None:
    count = 200
    barrier = threading.Barrier(count)
    outcomes: list[Any] = [None] * count

    def client(index: int) -> None:
        try:
            barrier.wait(10)
            with socket.create_connection(_address(gw), timeout=30) as sock:
                outcomes[index] = _get(sock, f"/whoami?id=b{index}")[0]
        except Exception as exc:  # a reset or refusal is exactly what this test looks for
            outcomes[index] = repr(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert outcomes == [200] * count


def test_stalled_body_times_out_with_json_408(gw: Gateway) -> None:
    started = time.monotonic()
    raw = b"POST /whoami HTTP/1.1\r\nHost: local\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    status, headers, body = _exchange(gw, raw)
    assert (status, json.loads(body)) == (408, {"message": "Request Timeout"})
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert time.monotonic() - started < 5  # read timeout 0.5 s in this fixture


def test_idle_keep_alive_connection_is_closed(gw: Gateway) -> None:
    with socket.create_connection(_address(gw), timeout=10) as sock:
        assert _get(sock, "/whoami?id=idle")[0] == 200
        started = time.monotonic()
        assert sock.recv(1) == b""  # the gateway hangs up after its read timeout
        assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("raw", "status", "message"),
    [
        (
            b"GET /whoami HTTP/1.1\r\nHost: l\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(101)) + b"\r\n",
            431,
            "Request Header Fields Too Large",
        ),
        (
            b"GET /whoami HTTP/1.1\r\nHost: l\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n",
            431,
            "Request Header Fields Too Large",
        ),
        (b"GARBAGE\r\n\r\n", 400, "Bad Request"),
        (b"GET /whoami HTTP/7.0\r\n\r\n", 400, "Bad Request"),  # API Gateway: 400, not 505
        (b"POST /whoami HTTP/1.1\r\nHost: l\r\nContent-Length: abc\r\n\r\n", 400, "Bad Request"),
        (b"POST /whoami HTTP/1.1\r\nHost: l\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "Bad Request"),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414, "Request-URI Too Long"),
    ],
    ids=[
        "too-many-headers",
        "header-too-long",
        "bad-request-line",
        "bad-version",
        "bad-length",
        "bad-chunk",
        "long-uri",
    ],
)
def test_framing_errors_answer_json_never_html(gw: Gateway, raw: bytes, status: int, message: str) -> None:
    got_status, headers, body = _exchange(gw, raw)
    assert got_status == status
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"message": message}
    assert b"<html" not in body.lower()


def test_port_in_use_names_the_port(gw: Gateway) -> None:
    host, port = _address(gw)
    other = Gateway(gw.template)
    with pytest.raises(OSError, match=f"port {port} on {host} is already in use"):
        other.start(host, port)
