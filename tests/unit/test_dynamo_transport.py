"""The table client's lean transport (amsg.adapters.dynamo.transport) against loopback servers started here:
keep-alive reuse, never writing into a connection the server closed, answers framed by Content-Length or chunks,
and each failure raised as the botocore exception urllib3's session raises, which botocore's retries act on."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from amsg.adapters.dynamo import transport
from amsg.adapters.dynamo.session import dynamodb_session
from amsg.adapters.dynamo.table import DynamoTable
from amsg.adapters.dynamo.transport import LeanSession
from botocore.config import Config
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)
from botocore.httpsession import URLLib3Session

from tests.support.certificates import self_signed

ITEM = {"Item": {"PK": {"S": "a"}, "n": {"N": "7"}}}
BODY = json.dumps(ITEM).encode()
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)

# what the server does with the n-th request it reads (0-based, across connections): the bytes to send, then
# whether to close the connection ("close") or reset it ("reset"); a callable answers by itself
Script = Callable[[int], tuple[bytes, str | None]]


class Loopback:
    """A one-port HTTP server on 127.0.0.1: reads each request (head and Content-Length body) and answers per
    ``script``; counts connections and requests."""

    def __init__(self, script: Script, *, tls: ssl.SSLContext | None = None) -> None:
        self.script, self.tls = script, tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests: list[bytes] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            reader = conn.makefile("rb")
            while True:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = next(
                    (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0
                )
                with self._lock:
                    index = len(self.requests)
                    self.requests.append(head + reader.read(length))
                answer, then = self.script(index)
                conn.sendall(answer)
                if then == "reset":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                if then in ("close", "reset"):
                    return
        except OSError:
            return
        finally:
            conn.close()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., Loopback]]:
    servers: list[Loopback] = []

    def start(script: Script, **kwargs: Any) -> Loopback:
        servers.append(Loopback(script, **kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def client_for(url: str, *, attempts: int = 3, read_timeout: float = 5, pool: int = 10, **options: Any) -> Any:
    config = Config(
        retries={"mode": "standard", "total_max_attempts": attempts},
        read_timeout=read_timeout,
        connect_timeout=1,
        max_pool_connections=pool,
    )
    client = dynamodb_session().client("dynamodb", config=config, endpoint_url=url, region_name="us-east-1", **options)
    assert transport.install(client, {})
    return client


def get(client: Any) -> dict[str, Any]:
    answer: dict[str, Any] = client.get_item(TableName="t", Key={"PK": {"S": "a"}})
    return answer


def always(answer: bytes, then: str | None = None) -> Script:
    return lambda _: (answer, then)


@pytest.fixture(autouse=True)
def _dummy_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "AMSG_DYNAMO_TRANSPORT"):
        monkeypatch.delenv(name, raising=False)


def test_the_tables_client_gets_the_transport_unless_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    table = DynamoTable("t", endpoint_url="http://127.0.0.1:9", region="us-east-1")
    assert isinstance(table.wire._endpoint.http_session, LeanSession)
    monkeypatch.setenv("AMSG_DYNAMO_TRANSPORT", "botocore")
    table = DynamoTable("t", endpoint_url="http://127.0.0.1:9", region="us-east-1")
    assert type(table.wire._endpoint.http_session) is URLLib3Session
    monkeypatch.setenv("AMSG_DYNAMO_TRANSPORT", "fast")
    with pytest.raises(ValueError, match="AMSG_DYNAMO_TRANSPORT"):
        DynamoTable("t", endpoint_url="http://127.0.0.1:9", region="us-east-1").wire


def test_botocores_session_stays_under_a_proxy_or_another_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    client = dynamodb_session().client("dynamodb", region_name="us-east-1")
    assert not transport.install(client, {})
    assert type(client._endpoint.http_session) is URLLib3Session
    monkeypatch.delenv("HTTPS_PROXY")
    proxied = dynamodb_session().client(
        "dynamodb", region_name="us-east-1", config=Config(proxies={"https": "http://127.0.0.1:3128"})
    )
    assert not transport.install(proxied, {})
    assert not transport.install(object(), {})  # no _endpoint.http_session: a botocore this module does not know


def test_requests_reuse_one_keep_alive_connection(serve: Callable[..., Loopback]) -> None:
    server = serve(always(OK))
    client = client_for(server.url)
    for _ in range(5):
        answer = get(client)
        assert answer["Item"] == ITEM["Item"] and answer["ResponseMetadata"]["RetryAttempts"] == 0
    assert (server.connections, len(server.requests)) == (1, 5)
    assert client._endpoint.http_session.idle_connections() == 1
    first = server.requests[0].decode("latin-1")
    assert first.startswith(f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n")
    assert "\r\nAuthorization: AWS4-HMAC-SHA256 " in first and "\r\nX-Amz-Target: DynamoDB_20120810.GetItem" in first
    assert "\r\nContent-Length: " in first and first.endswith('{"PK": {"S": "a"}}}')


def test_a_connection_the_server_closed_while_idle_is_never_written_to(serve: Callable[..., Loopback]) -> None:
    """The server answers each request, then closes: the next request finds the closed socket readable and
    connects anew, its first attempt succeeding (a write into the dead one would have needed a retry)."""
    server = serve(always(OK, "close"))
    client = client_for(server.url)
    for _ in range(3):
        assert get(client)["ResponseMetadata"]["RetryAttempts"] == 0
        threading.Event().wait(0.05)  # the server's FIN has arrived
    assert (server.connections, len(server.requests)) == (3, 3)


def test_a_connection_close_answer_is_not_pooled(serve: Callable[..., Loopback]) -> None:
    server = serve(always(OK.replace(b"Content-Length", b"Connection: close\r\nContent-Length")))
    client = client_for(server.url)
    get(client)
    get(client)
    assert server.connections == 2 and client._endpoint.http_session.idle_connections() == 0


def retried(client: Any) -> list[type[BaseException]]:
    """The exceptions botocore's retry handler was asked about (needs-retry), in order."""
    seen: list[type[BaseException]] = []

    def record(caught_exception: BaseException | None = None, **_: Any) -> None:
        if caught_exception is not None:
            seen.append(type(caught_exception))

    client.meta.events.register_first("needs-retry.dynamodb", record)
    return seen


def test_a_reset_mid_answer_is_a_connection_closed_error_that_botocore_retries(serve: Callable[..., Loopback]) -> None:
    cut = OK[: len(OK) - 10]
    server = serve(lambda index: (cut, "reset") if index == 0 else (OK, None))
    client = client_for(server.url)
    seen = retried(client)
    answer = get(client)
    assert answer["Item"] == ITEM["Item"] and answer["ResponseMetadata"]["RetryAttempts"] == 1
    assert seen == [ConnectionClosedError] and server.connections == 2
    with pytest.raises(ConnectionClosedError):
        get(client_for(serve(always(cut, "reset")).url, attempts=1))


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{}",  # cut short of its length, then closed
        b"SMTP ready\r\n\r\n",  # not HTTP
        b"HTTP/1.1 200 OK\r\nContent-Length: 2, 3\r\n\r\n{}",  # a length that is not one
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # a chunk size that is not one
        b"HTTP/1.1 200 OK\r\n bad: fold\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",  # a status of four digits
        b"",  # closed without a word
    ],
)
def test_a_malformed_or_cut_answer_is_a_connection_closed_error(serve: Callable[..., Loopback], answer: bytes) -> None:
    server = serve(always(answer, "close"))
    client = client_for(server.url, attempts=2)
    seen = retried(client)
    with pytest.raises(ConnectionClosedError):
        get(client)
    assert seen == [ConnectionClosedError, ConnectionClosedError] and server.connections == 2
    assert client._endpoint.http_session.idle_connections() == 0


def test_an_answer_not_given_in_time_is_a_read_timeout_error(serve: Callable[..., Loopback]) -> None:
    gate = threading.Event()
    server = serve(lambda _: (gate.wait(10) and b"", "close"))
    client = client_for(server.url, attempts=2, read_timeout=0.3)
    seen = retried(client)
    try:
        with pytest.raises(ReadTimeoutError):
            get(client)
    finally:
        gate.set()
    assert seen == [ReadTimeoutError, ReadTimeoutError]


def test_connect_failures_send_nothing_and_raise_as_urllib3s_session(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(EndpointConnectionError):
        get(client_for(f"http://127.0.0.1:{port}", attempts=1))

    def fail(error: OSError) -> Callable[..., socket.socket]:
        def connect(*_: Any, **__: Any) -> socket.socket:
            raise error

        return connect

    monkeypatch.setattr(transport.socket, "create_connection", fail(TimeoutError("timed out")))
    with pytest.raises(ConnectTimeoutError):
        get(client_for("http://127.0.0.1:9", attempts=1))
    monkeypatch.setattr(transport.socket, "create_connection", fail(socket.gaierror(-2, "Name or service not known")))
    with pytest.raises(EndpointConnectionError):
        get(client_for("http://dynamodb.invalid", attempts=1))


def chunked(body: bytes, sizes: list[int]) -> bytes:
    out, at = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 0
    for size in sizes:
        out += b"%x;ext=1\r\n%s\r\n" % (size, body[at : at + size])
        at += size
    return out + b"%x\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n" % (len(body) - at, body[at:])


def test_a_chunked_answer_is_read_whole_and_its_connection_kept(serve: Callable[..., Loopback]) -> None:
    server = serve(always(chunked(BODY, [1, 7, 10])))
    client = client_for(server.url)
    assert get(client)["Item"] == ITEM["Item"]
    assert get(client)["Item"] == ITEM["Item"]
    assert server.connections == 1


def test_a_large_answer_is_read_to_its_length_and_bytes_past_it_close_the_connection(
    serve: Callable[..., Loopback],
) -> None:
    items = {"Responses": {"t": [{"PK": {"S": f"k{i}"}, "v": {"S": "x" * 4000}} for i in range(2000)]}}
    big = json.dumps(items).encode()  # ~8 MB, as a large BatchGetItem answer
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big)
    server = serve(lambda index: (answer + b"HTTP/1.1 200" if index == 0 else answer, None))
    client = client_for(server.url)
    got = client.batch_get_item(RequestItems={"t": {"Keys": [{"PK": {"S": "k0"}}]}})
    assert len(got["Responses"]["t"]) == 2000
    assert client._endpoint.http_session.idle_connections() == 0  # unasked bytes followed: not reused
    client.batch_get_item(RequestItems={"t": {"Keys": [{"PK": {"S": "k0"}}]}})
    assert server.connections == 2 and client._endpoint.http_session.idle_connections() == 1


def test_threads_share_the_pool_one_request_per_connection_at_a_time(serve: Callable[..., Loopback]) -> None:
    server = serve(always(OK))
    client = client_for(server.url)
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: get(client), range(400)))
    assert all(a["Item"] == ITEM["Item"] and a["ResponseMetadata"]["RetryAttempts"] == 0 for a in answers)
    assert len(server.requests) == 400 and 1 <= server.connections <= 8
    assert client._endpoint.http_session.idle_connections() == server.connections


def test_idle_connections_are_bounded_by_the_clients_pool_size(serve: Callable[..., Loopback]) -> None:
    server = serve(always(OK))
    client = client_for(server.url, pool=2)
    with ThreadPoolExecutor(max_workers=6) as pool:
        assert all(a["Item"] == ITEM["Item"] for a in pool.map(lambda _: get(client), range(120)))
    assert client._endpoint.http_session.idle_connections() <= 2


def test_https_verifies_the_certificate_and_name_against_the_clients_bundle(
    serve: Callable[..., Loopback], tmp_path: Path
) -> None:
    cert_path, key_path = self_signed(tmp_path, "localhost", dns_name="localhost")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    server = serve(always(OK), tls=context)
    url = f"https://localhost:{server.port}"
    trusting = client_for(url, verify=str(cert_path))
    assert get(trusting)["Item"] == ITEM["Item"] and get(trusting)["Item"] == ITEM["Item"]
    assert server.connections == 1
    with pytest.raises(SSLError):  # certifi's bundle does not trust it
        get(client_for(url, attempts=1))
    with pytest.raises(SSLError):  # trusted, but not issued to this name
        get(client_for(f"https://127.0.0.1:{server.port}", attempts=1, verify=str(cert_path)))
    assert get(client_for(url, verify=False))["Item"] == ITEM["Item"]


def test_a_tls_handshake_not_answered_in_time_is_a_read_timeout_as_in_urllib3() -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), never speaks TLS
    try:
        with pytest.raises(ReadTimeoutError):
            get(client_for(f"https://localhost:{silent.getsockname()[1]}", attempts=1))
    finally:
        silent.close()


def test_an_https_clients_bundle_loads_once_when_the_client_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """urllib3 loads the CA bundle into its context for every new connection (~16 ms of CPU each); here it
    loads once, with the client (a prepared Lambda init), and the push transport shares certifi's."""
    from amsg.adapters import keepalive, push_http

    cert_path, _ = self_signed(tmp_path, "localhost", dns_name="localhost")
    monkeypatch.setattr(keepalive, "_contexts", {})
    monkeypatch.setenv("AWS_CA_BUNDLE", str(cert_path))  # the bundle botocore would use
    client = client_for("https://localhost:1")
    assert list(keepalive._contexts) == [str(cert_path)]
    assert client._endpoint.http_session.tls() is keepalive._contexts[str(cert_path)]
    monkeypatch.delenv("AWS_CA_BUNDLE")
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)  # botocore honours it too
    default = dynamodb_session().client("dynamodb", region_name="us-east-1")
    assert transport.install(default, {})
    monkeypatch.setattr(push_http, "_shared_tls", [])
    assert push_http.tls_context() is default._endpoint.http_session.tls()  # certifi's bundle, loaded once
    assert len(keepalive._contexts) == 2


def test_a_ca_bundle_that_does_not_load_fails_each_connection_as_an_ssl_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "missing.pem"))
    listening = socket.create_server(("127.0.0.1", 0))
    try:
        client = client_for(f"https://localhost:{listening.getsockname()[1]}", attempts=1)  # built, as botocore's is
        with pytest.raises(SSLError):
            get(client)
    finally:
        listening.close()


def test_anything_else_failing_is_an_http_client_error_and_a_streamed_body_goes_to_botocore(
    serve: Callable[..., Loopback],
) -> None:
    """As ``URLLib3Session.send``: an unexpected failure (here a header value with a line break, which
    ``http.client`` refuses too) is an ``HTTPClientError``; a body botocore would stream is its session's."""
    from botocore.awsrequest import AWSRequest
    from botocore.exceptions import HTTPClientError

    server = serve(always(OK))
    client = client_for(server.url, attempts=1)

    def inject(request: Any, **_: Any) -> None:
        request.headers["X-Bad"] = "a\r\nInjected: 1"

    client.meta.events.register("before-send.dynamodb", inject)
    with pytest.raises(HTTPClientError):
        get(client)
    assert server.requests == []
    lean = client._endpoint.http_session
    streamed: list[Any] = []
    lean._fallback = type("Fallback", (), {"send": lambda self, request: streamed.append(request)})()
    request = AWSRequest(method="POST", url=server.url, data=iter([b"{}"])).prepare()
    lean.send(request)
    assert streamed == [request] and server.requests == []
