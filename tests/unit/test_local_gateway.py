"""The local gateway imitates API Gateway HTTP API (payload 2.0): routing, events, CORS, limits, errors."""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from amsg_local.gateway import Gateway, Router, is_text_body
from amsg_local.template import Route, cors_config, load_template

from tests.support.tiny_stack import write_tiny_project

pytestmark = pytest.mark.slow  # sandboxes are processes: subprocesses, not for make unit

ORIGIN = "https://app.example"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    saved = list(sys.path)
    yield write_tiny_project(tmp_path_factory.mktemp("tiny"), with_delivery=False)
    sys.path[:] = saved


def _start(template_path: Path, origins: list[str] | None, **kwargs: Any) -> Gateway:
    template = load_template(template_path)
    gateway = Gateway(template, cors=cors_config(template, origins), **kwargs)
    gateway.start("127.0.0.1", 0)
    return gateway


@pytest.fixture(scope="module")
def gw(project: Path) -> Iterator[Gateway]:
    gateway = _start(project, None)
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def cors_gw(project: Path) -> Iterator[Gateway]:
    gateway = _start(project, [ORIGIN, "https://other.example"])
    yield gateway
    gateway.stop()


class Reply:
    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.headers = {k.lower(): v for k, v in response.getheaders()}
        self.raw = response.read()

    def json(self) -> Any:
        return json.loads(self.raw)


def request(
    gateway: Gateway,
    method: str,
    target: str,
    body: bytes | None = None,
    headers: list[tuple[str, str]] | dict[str, str] | None = None,
) -> Reply:
    url = urlsplit(gateway.base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
        for name, value in pairs:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        return Reply(conn.getresponse())
    finally:
        conn.close()


def echoed(reply: Reply) -> dict[str, Any]:
    assert reply.status == 200, reply.raw
    return reply.json()["event"]


# --------------------------------------------------------------------------------------------- routing


def test_exact_routes_root_and_v1(gw: Gateway) -> None:
    assert echoed(request(gw, "GET", "/echo"))["routeKey"] == "GET /echo"
    assert echoed(request(gw, "GET", "/api/v1/echo"))["routeKey"] == "GET /api/v1/echo"
    assert echoed(request(gw, "POST", "/echo", b"{}", {"Content-Type": "application/json"}))["routeKey"] == (
        "POST /echo"
    )


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("PUT", "/echo"),  # wrong method
        ("GET", "/echo/"),  # no trailing-slash normalisation
        ("GET", "/ECHO"),  # case sensitive
        ("GET", "/api/v2/echo"),  # other prefix
        ("HEAD", "/nope"),
        ("OPTIONS", "/echo"),  # no CORS configured: OPTIONS is an ordinary request
        ("GET", "/"),
    ],
)
def test_unmatched_requests_reach_default_route(gw: Gateway, method: str, target: str) -> None:
    reply = request(gw, method, target, headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET"})
    assert reply.status == 404
    assert not any(name.startswith("access-control-") for name in reply.headers)
    if method != "HEAD":
        details = reply.json()["error"]["details"]
        assert details == {"routeKey": "$default", "path": target, "method": method}


def test_path_parameters(gw: Gateway) -> None:
    event = echoed(request(gw, "GET", "/items/abc%20d"))
    assert event["routeKey"] == "GET /items/{id}"
    assert event["pathParameters"] == {"id": "abc%20d"}
    assert request(gw, "GET", "/items/a/b").status == 404


def test_router_prefers_exact_then_specific() -> None:
    def route(method: str, path: str) -> Route:
        return Route(method, path, f"{method}{path}", Path("."), "x.handler")

    router = Router(
        [
            route("GET", "/a/{id}"),
            route("ANY", "/a/fixed"),
            route("GET", "/a/{proxy+}"),
            route("GET", "/a/fixed"),
            route("ANY", "$default"),
        ]
    )
    assert router.match("GET", "/a/fixed")[0].path == "/a/fixed"
    assert router.match("GET", "/a/fixed")[0].method == "GET"
    assert router.match("POST", "/a/fixed")[0].method == "ANY"
    assert router.match("GET", "/a/x") == (route("GET", "/a/{id}"), {"id": "x"})
    assert router.match("GET", "/a/x/y") == (route("GET", "/a/{proxy+}"), {"proxy": "x/y"})
    assert router.match("DELETE", "/a/x")[0].path == "$default"


# --------------------------------------------------------------------------------------------- events


def test_v2_event_shape(gw: Gateway) -> None:
    reply = request(
        gw,
        "GET",
        "/echo?b=2&a=1&a=3&empty=&sp=x%20y",
        headers=[
            ("X-User-Id", "u-1"),
            ("X-Multi", "one"),
            ("x-multi", "two"),
            ("User-Agent", "tests/1.0"),
            ("Cookie", "c1=v1; c2=v2"),
        ],
    )
    event = echoed(reply)
    assert event["version"] == "2.0"
    assert event["routeKey"] == "GET /echo"
    assert event["rawPath"] == "/echo"
    assert event["rawQueryString"] == "b=2&a=1&a=3&empty=&sp=x%20y"
    assert event["queryStringParameters"] == {"b": "2", "a": "1,3", "empty": "", "sp": "x y"}
    headers = event["headers"]
    assert headers["x-user-id"] == "u-1"
    assert headers["x-multi"] == "one,two"
    assert all(name == name.lower() for name in headers)
    assert "cookie" not in headers
    assert event["cookies"] == ["c1=v1", "c2=v2"]
    assert "body" not in event
    assert event["isBase64Encoded"] is False
    context = event["requestContext"]
    assert context["http"] == {
        "method": "GET",
        "path": "/echo",
        "protocol": "HTTP/1.1",
        "sourceIp": "127.0.0.1",
        "userAgent": "tests/1.0",
    }
    assert context["stage"] == "$default"
    assert context["routeKey"] == "GET /echo"
    assert context["requestId"] and context["requestId"] == reply.headers["apigw-requestid"]
    assert isinstance(context["timeEpoch"], int)
    assert "pathParameters" not in event
    # each sandbox is a process of its own, so the handler module has its own name, as on Lambda
    assert reply.json()["module"] == "echo_handler"


def test_no_query_means_no_parameters(gw: Gateway) -> None:
    event = echoed(request(gw, "GET", "/echo"))
    assert event["rawQueryString"] == ""
    assert "queryStringParameters" not in event


@pytest.mark.parametrize(
    ("headers", "base64_expected"),
    [
        ({"Content-Type": "application/json"}, False),
        ({"Content-Type": "application/json; charset=utf-8"}, False),
        ({"Content-Type": "text/plain"}, False),
        ({"Content-Type": "application/xml"}, False),
        ({"Content-Type": "application/octet-stream"}, True),
        ({"Content-Type": "application/x-www-form-urlencoded"}, True),
        ({}, True),  # API Gateway base64-encodes a body without Content-Type
        ({"Content-Type": "application/json", "Content-Encoding": "gzip"}, True),
    ],
)
def test_body_encoding(gw: Gateway, headers: dict[str, str], base64_expected: bool) -> None:
    payload = json.dumps({"text": "héllo"}).encode()
    body = gzip.compress(payload) if headers.get("Content-Encoding") == "gzip" else payload
    event = echoed(request(gw, "POST", "/echo", body, headers))
    assert event["isBase64Encoded"] is base64_expected
    decoded = base64.b64decode(event["body"]) if base64_expected else event["body"].encode()
    assert decoded == body
    assert is_text_body({k.lower(): v for k, v in headers.items()}) is not base64_expected


def test_binary_json_body_that_is_not_utf8_is_base64(gw: Gateway) -> None:
    event = echoed(request(gw, "POST", "/echo", b"\xff\xfe", {"Content-Type": "application/json"}))
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == b"\xff\xfe"


def test_chunked_request_body(gw: Gateway) -> None:
    url = urlsplit(gw.base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.request(
            "POST",
            "/echo",
            body=iter([b'{"a":', b"1}"]),
            headers={"Content-Type": "application/json"},
            encode_chunked=True,
        )
        reply = Reply(conn.getresponse())
    finally:
        conn.close()
    assert echoed(reply)["body"] == '{"a":1}'


# --------------------------------------------------------------------------------------------- responses


def test_response_without_status_code_is_json_200(gw: Gateway) -> None:
    reply = request(gw, "GET", "/plain")
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {"hello": "world"}


def test_base64_response_is_decoded(gw: Gateway) -> None:
    reply = request(gw, "GET", "/bin")
    assert reply.status == 200
    assert reply.raw == bytes(range(256))


def test_handler_error_is_api_gateway_500(gw: Gateway) -> None:
    reply = request(gw, "GET", "/boom")
    assert reply.status == 500
    assert reply.json() == {"message": "Internal Server Error"}


def test_malformed_response_is_500(gw: Gateway) -> None:
    assert request(gw, "GET", "/bad").json() == {"message": "Internal Server Error"}


def test_missing_handler_file_is_500(gw: Gateway) -> None:
    reply = request(gw, "GET", "/missing")
    assert (reply.status, reply.json()) == (500, {"message": "Internal Server Error"})


def test_response_over_lambda_limit_is_500(gw: Gateway) -> None:
    reply = request(gw, "GET", "/big")
    assert (reply.status, reply.json()) == (500, {"message": "Internal Server Error"})


def test_context_honours_function_settings(gw: Gateway) -> None:
    reply = request(gw, "GET", "/ctx")
    assert reply.status == 200
    assert reply.headers["x-function-name"] == "MiscFunction"
    assert reply.headers["x-memory"] == "256"
    assert 0 < int(reply.headers["x-remaining"]) <= 1000  # Timeout: 1 on the function
    assert len(reply.headers["x-request-id"]) == 36


def test_concurrent_requests_get_their_own_sandboxes(gw: Gateway) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def nap() -> tuple[str, float, float]:
        reply = request(gw, "GET", "/nap")
        assert reply.status == 200
        instance, pid, began, ended = reply.raw.decode().split("@")
        return f"{instance}@{pid}", float(began), float(ended)

    with ThreadPoolExecutor(3) as pool:
        naps = list(pool.map(lambda _: nap(), range(3)))
    assert len({who for who, _, _ in naps}) == 3  # three module instances, like three execution environments
    assert max(began for _, began, _ in naps) < min(ended for _, _, ended in naps)  # their 0.4 s naps overlapped
    assert nap()[0] in {who for who, _, _ in naps}  # warm sandboxes are reused


def test_lambda_timeout_is_500(gw: Gateway) -> None:
    started = time.monotonic()
    reply = request(gw, "GET", "/slow")  # MiscFunction Timeout 1 s, handler sleeps 1.5 s
    assert (reply.status, reply.json()) == (500, {"message": "Internal Server Error"})
    assert time.monotonic() - started < 1.45


def test_integration_timeout_is_503(project: Path) -> None:
    gateway = _start(project, None, integration_timeout_s=0.3)
    try:
        reply = request(gateway, "GET", "/very-slow")  # SlowFunction Timeout 60 s
    finally:
        gateway.stop()
    assert (reply.status, reply.json()) == (503, {"message": "Service Unavailable"})


def test_no_cors_passes_handler_headers_through(gw: Gateway) -> None:
    reply = request(gw, "GET", "/echo", headers={"Origin": ORIGIN})
    assert reply.headers["x-custom"] == "1"
    assert reply.headers["access-control-allow-origin"] == "https://evil.example"  # as API Gateway would
    assert "vary" not in reply.headers


# --------------------------------------------------------------------------------------------- CORS


def test_preflight_answered_by_gateway(cors_gw: Gateway) -> None:
    reply = request(
        cors_gw,
        "OPTIONS",
        "/schedule-message-not-even-a-route",
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "PUT", "Access-Control-Request-Headers": "x"},
    )
    assert reply.status == 204
    assert reply.raw == b""
    assert reply.headers["access-control-allow-origin"] == ORIGIN
    assert reply.headers["access-control-allow-methods"] == "GET,POST,PUT,DELETE,OPTIONS"
    assert reply.headers["access-control-allow-headers"] == "content-type,x-user-id"
    assert reply.headers["access-control-max-age"] == "600"
    assert reply.headers["vary"] == "origin"
    assert "access-control-allow-credentials" not in reply.headers


def test_preflight_from_unknown_origin_gets_no_cors_headers(cors_gw: Gateway) -> None:
    reply = request(
        cors_gw, "OPTIONS", "/echo", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}
    )
    assert reply.status == 204
    assert not any(name.startswith("access-control-") for name in reply.headers)


def test_options_without_request_method_is_routed(cors_gw: Gateway) -> None:
    reply = request(cors_gw, "OPTIONS", "/echo", headers={"Origin": ORIGIN})
    assert reply.status == 404
    assert reply.json()["error"]["code"] == "NOT_FOUND"
    assert reply.headers["access-control-allow-origin"] == ORIGIN


def test_cors_on_normal_responses_and_handler_cors_dropped(cors_gw: Gateway) -> None:
    reply = request(cors_gw, "GET", "/echo", headers={"Origin": "https://other.example"})
    assert reply.status == 200
    assert reply.headers["access-control-allow-origin"] == "https://other.example"
    assert reply.headers["vary"] == "origin"
    assert reply.headers["x-custom"] == "1"
    assert [name for name in reply.headers if name.startswith("access-control-")] == ["access-control-allow-origin"]


def test_cors_on_errors_and_without_origin(cors_gw: Gateway) -> None:
    assert request(cors_gw, "GET", "/boom", headers={"Origin": ORIGIN}).headers["access-control-allow-origin"] == (
        ORIGIN
    )
    no_origin = request(cors_gw, "GET", "/echo")
    assert not any(name.startswith("access-control-") for name in no_origin.headers)
    foreign = request(cors_gw, "GET", "/echo", headers={"Origin": "https://evil.example"})
    assert not any(name.startswith("access-control-") for name in foreign.headers)


def test_wildcard_origin(project: Path) -> None:
    gateway = _start(project, ["*"])
    try:
        reply = request(gateway, "GET", "/echo", headers={"Origin": "https://anything.example"})
        preflight = request(
            gateway, "OPTIONS", "/echo", headers={"Origin": "https://x.example", "Access-Control-Request-Method": "GET"}
        )
    finally:
        gateway.stop()
    assert reply.headers["access-control-allow-origin"] == "*"
    assert "vary" not in reply.headers
    assert preflight.headers["access-control-allow-origin"] == "*"


# --------------------------------------------------------------------------------------------- limits


def test_declared_body_over_10mb_is_413_without_reading_it(gw: Gateway) -> None:
    url = urlsplit(gw.base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        conn.putrequest("POST", "/echo")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(10 * 1024 * 1024 + 1))
        conn.endheaders()
        reply = Reply(conn.getresponse())
    finally:
        conn.close()
    assert (reply.status, reply.json()) == (413, {"message": "Request Entity Too Large"})
    assert reply.headers.get("connection") == "close"


def test_body_over_lambda_event_limit_is_413(gw: Gateway) -> None:
    body = b"a" * (6 * 1024 * 1024)  # fits the 10 MB API limit, not Lambda's 6 MB event once wrapped
    reply = request(gw, "POST", "/echo", body, {"Content-Type": "text/plain"})
    assert (reply.status, reply.json()) == (413, {"message": "Request Entity Too Large"})


def test_body_under_limits_is_delivered(gw: Gateway) -> None:
    body = b"b" * (3 * 1024 * 1024)
    event = echoed(request(gw, "POST", "/echo", body, {"Content-Type": "application/octet-stream"}))
    assert len(base64.b64decode(event["body"])) == len(body)


# --------------------------------------------------------------------------------------------- local routes


def test_local_tick_without_tick_is_501(gw: Gateway) -> None:
    reply = request(gw, "POST", "/_local/tick")
    assert reply.status == 501
    assert reply.json()["error"]["code"] == "NOT_IMPLEMENTED"
    assert request(gw, "GET", "/_local/tick").status == 404  # only POST is local; the rest is routed


def test_local_tick_runs_the_callable(project: Path) -> None:
    calls: list[int] = []

    def tick_then_drain() -> dict[str, Any]:
        calls.append(1)
        return {"tick": {"ok": True}, "runTask": {"received": 0}}

    gateway = _start(project, None, tick_then_drain=tick_then_drain)
    try:
        reply = request(gateway, "POST", "/_local/tick")
    finally:
        gateway.stop()
    assert reply.status == 200
    assert reply.json() == {"success": True, "tick": {"ok": True}, "runTask": {"received": 0}}
    assert calls == [1]


def test_periodic_tick(project: Path) -> None:
    calls: list[float] = []
    gateway = _start(project, None, tick_then_drain=lambda: calls.append(time.monotonic()) or {}, tick_interval_s=0.05)
    try:
        deadline = time.monotonic() + 5
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        gateway.stop()
    assert len(calls) >= 3
