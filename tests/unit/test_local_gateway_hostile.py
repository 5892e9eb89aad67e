"""Hostile input on a real local gateway on loopback: odd methods, broken framing, ``/_local/*`` bodies.

Every request gets an answer the way API Gateway would give it (a routed or ``$default`` answer, or a JSON
``{"message": ...}`` error), never a dropped connection, an HTML page or an exception's text. The oracles here
are written from the HTTP rules and the documented clock range, not from the gateway's own checks.
"""

from __future__ import annotations

import http.client
import json
import socket
import string
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from amsg.clock import OffsetClock
from amsg_local.gateway import Gateway
from amsg_local.template import load_template
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.tiny_stack import write_tiny_project

pytestmark = pytest.mark.slow  # sandboxes are processes: subprocesses, not for make unit

CLOCK_MAX_MS = 221_845_392_000_000  # 9000-01-01T00:00:00Z, the documented end of the local clock's range
SECRET = "tick-secret-8f3a"  # text of the exception the failing tick raises; must never reach a client
TOKEN_CHARS = "!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class FailingTick:
    def __init__(self) -> None:
        self.fail = True

    def __call__(self) -> dict[str, Any]:
        if self.fail:
            raise OverflowError(SECRET)
        return {"claimed": 0}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    saved = list(sys.path)
    yield write_tiny_project(tmp_path_factory.mktemp("tiny"), with_delivery=False)
    sys.path[:] = saved


@pytest.fixture(scope="module")
def tick() -> FailingTick:
    return FailingTick()


@pytest.fixture(scope="module")
def gw(project: Path, tick: FailingTick) -> Iterator[Gateway]:
    gateway = Gateway(load_template(project), clock=OffsetClock(), tick_then_drain=tick, read_timeout_s=1.0)
    gateway.start("127.0.0.1", 0)
    yield gateway
    gateway.stop()


def _address(gateway: Gateway) -> tuple[str, int]:
    url = urlsplit(gateway.base_url)
    assert url.hostname and url.port
    return url.hostname, url.port


def exchange(gateway: Gateway, raw: bytes, *, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes on a fresh connection; one parsed answer (a dropped connection fails the test)."""
    with socket.create_connection(_address(gateway), timeout=10) as sock:
        sock.sendall(raw)
        response = http.client.HTTPResponse(sock, method=method)
        response.begin()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body


def post_local(gateway: Gateway, path: str, body: bytes) -> tuple[int, Any]:
    head = f"POST {path} HTTP/1.1\r\nHost: l\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    status, headers, raw = exchange(gateway, head.encode() + body)
    assert headers["content-type"].startswith("application/json")
    return status, json.loads(raw)


def assert_default_route(status: int, body: bytes, method: str, path: str) -> None:
    assert status == 404
    assert json.loads(body)["error"]["details"] == {"routeKey": "$default", "path": path, "method": method}


def assert_bad_request(status: int, headers: dict[str, str], body: bytes) -> None:
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"message": "Bad Request"}
    assert headers.get("connection") == "close"


# --------------------------------------------------------------------------------------------- methods


@pytest.mark.parametrize("method", ["TRACE", "CONNECT", "PROPFIND", "FOO", "get", "Post", "M-SEARCH", "X~Y"])
def test_any_token_method_reaches_default_route(gw: Gateway, method: str) -> None:
    status, _, body = exchange(gw, f"{method} /echo HTTP/1.1\r\nHost: l\r\n\r\n".encode())
    assert_default_route(status, body, method, "/echo")


@FUZZ
@given(method=st.text(TOKEN_CHARS, min_size=1, max_size=24))
def test_fuzzed_methods_reach_a_route_or_default(gw: Gateway, method: str) -> None:
    status, _, body = exchange(gw, f"{method} /nowhere HTTP/1.1\r\nHost: l\r\n\r\n".encode(), method=method)
    if method == "HEAD":
        assert status == 404 and body == b""
    else:
        assert_default_route(status, body, method, "/nowhere")


def test_absolute_form_target_is_routed_by_its_path(gw: Gateway) -> None:
    status, _, body = exchange(gw, b"GET http://127.0.0.1/echo?a=1 HTTP/1.1\r\nHost: l\r\n\r\n")
    assert status == 200
    event = json.loads(body)["event"]
    assert (event["routeKey"], event["rawPath"], event["rawQueryString"]) == ("GET /echo", "/echo", "a=1")


# --------------------------------------------------------------------------------------------- framing


@pytest.mark.parametrize(
    "raw",
    [
        b"GET /echo HTTP/9.9\r\nHost: l\r\n\r\n",
        b"GET /echo HTTP/2.0\r\nHost: l\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",  # the HTTP/2 connection preface
        b"GET /echo\r\n",  # HTTP/0.9: answered at once, not after a header block that never comes
        b"GET\r\n\r\n",
        b"GARBAGE\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS ClientHello on the plain port
        b"GET  /echo HTTP/1.1\r\n\r\n",
        b"GET /ec\x01ho HTTP/1.1\r\n\r\n",
        b"GET /\xc3\xa9 HTTP/1.1\r\n\r\n",
        b"G(T /echo HTTP/1.1\r\n\r\n",
        b"GET echo HTTP/1.1\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\n\r\n",
        b"GET /echo HTTP/1.1 extra\r\n\r\n",
        b"GET /echo http/1.1\r\n\r\n",
        b"\r\n" * 20 + b"GET /echo HTTP/1.1\r\n\r\n",  # more stray blank lines than tolerated
    ],
)
def test_malformed_request_lines_get_a_json_400(gw: Gateway, raw: bytes) -> None:
    assert_bad_request(*exchange(gw, raw))


def test_a_stray_blank_line_before_the_request_is_ignored(gw: Gateway) -> None:
    status, _, body = exchange(gw, b"\r\n\r\nGET /echo HTTP/1.1\r\nHost: l\r\n\r\n")
    assert status == 200 and json.loads(body)["event"]["routeKey"] == "GET /echo"


def test_headers_that_stop_arriving_get_408(gw: Gateway) -> None:
    status, headers, body = exchange(gw, b"GET /echo HTTP/1.1\r\nHost: l\r\n")
    assert status == 408
    assert json.loads(body) == {"message": "Request Timeout"}
    assert headers["connection"] == "close"


_request_lines = st.one_of(
    st.binary(min_size=1, max_size=200).filter(lambda b: b"\n" not in b and b"\r" not in b and b.strip()),
    st.builds(
        lambda method, target, version: f"{method} {target} {version}".encode("utf-8", "surrogatepass"),
        st.sampled_from(["GET", "POST", "get", "PRI", "", "G T"]),
        st.sampled_from(["/echo", "*", "", "echo", "//echo", "/e cho", "http://x/echo", "ftp://x/"]),
        st.one_of(
            st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/0.9", "HTTP/2.0", "HTTP/9.9", "HTTP/1", "HTTP/", ""]),
            st.builds("HTTP/{}.{}".format, st.integers(0, 99), st.integers(0, 99)),
        ),
    ),
)


def _valid_request_line(line: bytes) -> bool:
    """RFC 9112: token SP (origin-form | absolute-form) SP HTTP/1.x, printable ASCII only."""
    parts = line.split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.0", b"HTTP/1.1"):
        return False
    method, target = parts[0].decode("latin-1"), parts[1]
    printable = all(0x21 <= byte <= 0x7E for byte in target) and target
    routable = target.startswith(b"/") or target.lower().startswith((b"http://", b"https://"))
    return bool(method) and all(char in TOKEN_CHARS for char in method) and bool(printable) and routable


@FUZZ
@given(line=_request_lines)
def test_fuzzed_request_lines_are_routed_or_refused_with_400(gw: Gateway, line: bytes) -> None:
    status, headers, _ = exchange(gw, line + b"\r\nHost: l\r\n\r\n", method="HEAD")
    if _valid_request_line(line):
        assert status != 400 and status < 500
    else:
        assert status == 400
        assert headers["content-type"] == "application/json"


# --------------------------------------------------------------------------------------------- /_local/clock


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"advanceMs": Infinity}', "Infinity is not a number"),
        (b'{"advanceMs": -Infinity}', "-Infinity is not a number"),
        (b'{"nowMs": NaN}', "NaN is not a number"),
        (b'{"nowMs": 1e400}', "finite whole number"),
        (b'{"nowMs": 1e20}', "the clock must stay within"),
        (b'{"nowMs": 253402214400000}', "the clock must stay within"),  # 9999-12-31
        (b'{"nowMs": -1}', "the clock must stay within"),
        (b'{"advanceMs": 99999999999999999999999999999999999999}', "the clock must stay within"),
        (b'{"advanceMs": 1.5}', "finite whole number"),
        (b'{"advanceMs": "5"}', "must be a number"),
        (b'{"advanceMs": true}', "must be a number"),
        (b'{"nowMs": null}', "must be a number"),
        (b'{"reset": "yes"}', "reset must be true or false"),
        (b'{"nowMs": 1, "advanceMs": 1}', "give one of"),
        (b'{"when": 1}', "unknown field"),
        (b"[1]", "must be a JSON object"),
        (b"not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b'{"nowMs": ' + b"9" * 5000 + b"}", "not valid JSON"),
        (b"[" * 100_000, "not valid JSON"),
    ],
)
def test_clock_rejects_bad_input_with_a_clear_400(gw: Gateway, body: bytes, words: str) -> None:
    before = gw.clock.offset_ms if gw.clock else None
    status, payload = post_local(gw, "/_local/clock", body)
    assert status == 400, payload
    assert payload["success"] is False and payload["error"]["code"] == "INVALID_PARAMETERS"
    assert words in payload["error"]["message"]
    assert gw.clock is not None and gw.clock.offset_ms == before  # nothing moved


def test_clock_moves_within_its_range(gw: Gateway) -> None:
    status, payload = post_local(gw, "/_local/clock", json.dumps({"nowMs": CLOCK_MAX_MS - 60_000}).encode())
    assert status == 200 and CLOCK_MAX_MS - 60_000 <= payload["nowMs"] < CLOCK_MAX_MS
    status, payload = post_local(gw, "/_local/clock", b'{"advanceMs": 3600000}')
    assert status == 400  # would leave the range
    assert post_local(gw, "/_local/clock", b'{"advanceMs": 1e3}')[0] == 200  # a whole number written as 1e3
    status, payload = post_local(gw, "/_local/clock", b'{"reset": true}')
    assert status == 200 and payload["offsetMs"] == 0
    status, payload = post_local(gw, "/_local/clock", b"")
    assert status == 200 and payload["offsetMs"] == 0
    assert gw.clock is not None
    gw.clock.set_now(CLOCK_MAX_MS + 5)  # put just inside the range, the clock has run on past its end
    assert post_local(gw, "/_local/clock", b'{"advanceMs": 0}')[0] == 200  # reading it still works
    assert post_local(gw, "/_local/clock", b'{"advanceMs": -60000}')[0] == 200  # and so does moving back
    gw.clock.reset()


_json_numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["Infinity", "-Infinity", "NaN", "1e400", "-1e400", "1e20", "0", "-0", "1E3", "4.5"]),
)
_json_scalars = st.one_of(_json_numbers, st.sampled_from(["true", "false", "null", '"5"', '""', "[]", "{}"]))


@FUZZ
@given(
    fields=st.dictionaries(st.sampled_from(["advanceMs", "nowMs", "reset", "x"]), _json_scalars, max_size=3),
    start=st.integers(min_value=0, max_value=CLOCK_MAX_MS - 1),
)
def test_fuzzed_clock_bodies_answer_200_in_range_or_400(gw: Gateway, fields: dict[str, str], start: int) -> None:
    assert gw.clock is not None
    gw.clock.set_now(start)
    body = "{" + ",".join(f'"{key}":{value}' for key, value in fields.items()) + "}"
    status, payload = post_local(gw, "/_local/clock", body.encode())
    assert status in (200, 400), payload
    assert payload["success"] is (status == 200)
    assert 0 <= gw.clock.now_ms() < CLOCK_MAX_MS + 60_000  # put inside the range; it runs on from there
    if status == 200 and "nowMs" in fields:
        assert 0 <= int(float(fields["nowMs"])) < CLOCK_MAX_MS
        assert abs(payload["nowMs"] - int(float(fields["nowMs"]))) < 60_000
    if status == 400:
        assert payload["error"]["code"] == "INVALID_PARAMETERS" and payload["error"]["message"]


# --------------------------------------------------------------------------------------------- /_local/run-task


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"uuid": "a" * 5000}).encode(),
        json.dumps({"uuid": "a" * 257}).encode(),
        b'{"uuid": 5}',
        b'{"uuid": ["x"]}',
        b'{"uuid": "   "}',
        b'{"uuid": "a\\u0000b"}',
        b'{"uuid": "\\ud800"}',
        b'{"uuid": "x", "other": 1}',
        b"{}",
        b"",
        b'"uuid"',
        b"{",
        b'{"uuid": NaN}',
    ],
)
def test_run_task_rejects_bad_uuids_with_a_clear_400(gw: Gateway, body: bytes) -> None:
    status, payload = post_local(gw, "/_local/run-task", body)
    assert status == 400, payload
    assert payload["success"] is False and payload["error"]["code"] == "INVALID_PARAMETERS"
    assert payload["error"]["message"]


@FUZZ
@given(uuid=st.one_of(st.text(min_size=257, max_size=6000), st.integers(), st.none(), st.lists(st.text(max_size=3))))
def test_fuzzed_run_task_uuids_are_refused(gw: Gateway, uuid: Any) -> None:
    status, payload = post_local(gw, "/_local/run-task", json.dumps({"uuid": uuid}).encode())
    assert status == 400 and payload["error"]["code"] == "INVALID_PARAMETERS"


# --------------------------------------------------------------------------------------------- errors


def test_a_failing_tick_does_not_show_its_exception(gw: Gateway, tick: FailingTick) -> None:
    tick.fail = True
    status, payload = post_local(gw, "/_local/tick", b"")
    assert status == 500
    assert payload["error"]["code"] == "LOCAL_TICK_FAILED"
    assert SECRET not in json.dumps(payload) and "OverflowError" not in json.dumps(payload)
    tick.fail = False
    assert post_local(gw, "/_local/tick", b"") == (200, {"success": True, "claimed": 0})


def test_an_error_inside_the_gateway_is_a_json_500(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError(SECRET)

    monkeypatch.setattr(gw, "handle", broken)
    status, _, body = exchange(gw, b"GET /echo HTTP/1.1\r\nHost: l\r\n\r\n")
    assert status == 500
    assert json.loads(body) == {"message": "Internal Server Error"}


def test_concurrent_clock_moves_never_leave_the_range(gw: Gateway) -> None:
    assert gw.clock is not None
    gw.clock.set_now(CLOCK_MAX_MS - 10_000)

    def push() -> None:
        for _ in range(5):
            post_local(gw, "/_local/clock", b'{"advanceMs": 3000}')

    threads = [threading.Thread(target=push) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert gw.clock.now_ms() < CLOCK_MAX_MS
    gw.clock.reset()
