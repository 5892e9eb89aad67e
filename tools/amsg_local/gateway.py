"""A local API Gateway HTTP API: serves every HttpApi route of template.yaml on loopback, in process.

Behaviour copied from API Gateway HTTP API (payload format 2.0), because clients and tests must see here what
they will see on AWS:

* routing: exact ``METHOD /path`` (then ``ANY``, then ``{param}``/``{proxy+}`` routes), otherwise ``$default``;
  no trailing-slash normalisation, HEAD is its own method;
* events: ``version`` 2.0, lower-cased headers with duplicates comma-joined, ``cookies``,
  ``queryStringParameters`` comma-joined, ``requestContext.http``, stage ``$default``; the body is text only
  for ``text/*``, ``application/json``, ``application/xml``, ``application/javascript`` without a
  ``Content-Encoding`` (everything else, a missing Content-Type included, arrives base64 encoded);
* responses: ``statusCode``/``headers``/``body``/``isBase64Encoded``; a value without ``statusCode`` becomes a
  200 JSON response; ``cookies`` are ignored here;
* CORS (like API Gateway): with allowed origins, preflights (OPTIONS + Origin + Access-Control-Request-Method)
  are answered here with 204, allowed origins are added to every response, and CORS headers from handlers are
  dropped; without allowed origins there is no CORS at all (OPTIONS reaches ``$default``);
* limits (AWS): request payload over 10 MB → 413 ``{"message":"Request Entity Too Large"}`` before any
  handler runs; an event over Lambda's 6 MB invocation limit → the same 413 (on AWS the invoke fails; 413 is
  our documented local answer); a response over 6 MB, an unhandled error or a Lambda timeout → 500
  ``{"message":"Internal Server Error"}``; no answer within 30 s → 503 ``{"message":"Service Unavailable"}``.

* transport: keep-alive (HTTP/1.1), ``TCP_NODELAY`` on every accepted socket (without it a response written
  in pieces waits out the peer's delayed ACK, ~40 ms), headers and body sent in one write, a listen backlog of
  :data:`LISTEN_BACKLOG` so bursts of connections are queued instead of reset, a read timeout
  (:data:`READ_TIMEOUT_S`) for idle keep-alive connections and bodies that stall (408), and errors found before
  routing (too many or too long headers, bad framing) answered as API Gateway does, in JSON
  ``{"message": ...}``, never as an HTML page;
* methods and framing: every method that is a valid token is routed (unknown ones reach ``$default``); a
  request line that is not ``METHOD target HTTP/1.x`` is a 400 (see ``framing.py``); an error inside the
  gateway is a 500 ``{"message":"Internal Server Error"}``, never a dropped connection.

Local-only: ``POST /_local/tick`` runs one tick and drains the task queue (501 when not available),
``/_local/clock`` and ``/_local/run-task`` (their input checks and the clock's range: ``local_input.py``).
Their errors never carry exception text (it goes to the log).
``GET /_local/stats`` counts invocations, cold starts and sandboxes per function; ``GET /_local/environment``
tells ``amsg invoke`` and ``amsg status`` where the stack keeps its data (``stack_info.py``: no secret).
"""

from __future__ import annotations

import base64
import errno
import json
import logging
import re
import secrets
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from amsg_local.delivery import TickNotConfigured, TickRunner, TickThenDrain
from amsg_local.http_answer import LISTEN_BACKLOG, GatewayResponse, json_body
from amsg_local.lambda_runtime import LAMBDA_SYNC_PAYLOAD_LIMIT, LambdaRuntime
from amsg_local.local_input import BadLocalRequest, clock_target, parse_object, task_uuid
from amsg_local.stack_info import ENVIRONMENT_PATH, describe
from amsg_local.template import CorsConfig, Route, http_routes

__all__ = [
    "API_PAYLOAD_LIMIT",
    "INTEGRATION_TIMEOUT_S",
    "LISTEN_BACKLOG",
    "READ_TIMEOUT_S",
    "Gateway",
    "GatewayResponse",
    "Router",
    "is_text_body",
]

# Logger names must not contain the Powertools service name ("amsg"): Powertools' log de-duplication filter on
# the root handlers drops every record whose logger name contains it.
log = logging.getLogger("local_stack.gateway")

API_PAYLOAD_LIMIT = 10 * 1024 * 1024  # HTTP API quota: 10 MB payload
INTEGRATION_TIMEOUT_S = 30.0  # HTTP API: hard maximum integration timeout
READ_TIMEOUT_S = 30.0  # an idle keep-alive connection, or a request whose bytes stop arriving, is closed
LOCAL_TICK_PATH = "/_local/tick"
LOCAL_CLOCK_PATH = "/_local/clock"
LOCAL_RUN_TASK_PATH = "/_local/run-task"
LOCAL_STATS_PATH = "/_local/stats"

_TEXT_TYPES = {"application/json", "application/xml", "application/javascript"}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade", "te", "trailer"}


class MovableClock(Protocol):
    """The clock the stack injects into the handlers' context (``amsg.clock.OffsetClock``)."""

    offset_ms: int

    def now_ms(self) -> int: ...
    def advance(self, ms: int) -> int: ...
    def set_now(self, now_ms: int) -> int: ...
    def reset(self) -> int: ...


def is_text_body(headers: Mapping[str, str]) -> bool:
    """Whether API Gateway passes the request body as text (else base64, ``isBase64Encoded: true``)."""
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding and encoding != "identity":
        return False
    media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media_type.startswith("text/") or media_type in _TEXT_TYPES


def build_v2_event(
    route: Route,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: dict[str, str],
    body: bytes,
    path_params: dict[str, str] | None = None,
    source_ip: str = "127.0.0.1",
    host: str = "127.0.0.1",
    request_id: str | None = None,
) -> dict[str, Any]:
    """The API Gateway HTTP API payload v2 event of one request (``headers`` folded: lower-case, joined)."""
    request_id = request_id or base64.b64encode(secrets.token_bytes(10)).decode("ascii")
    now = datetime.now(UTC)
    event_headers = {key: value for key, value in headers.items() if key != "cookie"}
    event_headers.setdefault("x-forwarded-for", source_ip)
    event_headers.setdefault("x-forwarded-proto", "http")
    event_headers.setdefault("x-forwarded-port", host.rsplit(":", 1)[-1] if ":" in host else "80")
    event_headers.setdefault("x-amzn-trace-id", f"Root=1-{int(now.timestamp()):08x}-{uuid.uuid4().hex[:24]}")
    domain = headers.get("host", host)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route.route_key,
        "rawPath": raw_path,
        "rawQueryString": raw_query,
    }
    if "cookie" in headers:
        event["cookies"] = [c.strip() for c in re.split(r"[;,]", headers["cookie"]) if c.strip()]
    event["headers"] = event_headers
    if raw_query:
        params: dict[str, str] = {}
        for key, value in parse_qsl(raw_query, keep_blank_values=True):
            params[key] = f"{params[key]},{value}" if key in params else value
        event["queryStringParameters"] = params
    if path_params:
        event["pathParameters"] = path_params
    event["requestContext"] = {
        "accountId": "123456789012",
        "apiId": "local",
        "domainName": domain,
        "domainPrefix": domain.split(".", 1)[0],
        "http": {
            "method": method,
            "path": raw_path,
            "protocol": "HTTP/1.1",
            "sourceIp": source_ip,
            "userAgent": headers.get("user-agent", ""),
        },
        "requestId": request_id,
        "routeKey": route.route_key,
        "stage": "$default",
        "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
        "timeEpoch": int(now.timestamp() * 1000),
    }
    if body:
        text = None
        if is_text_body(headers):
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is None:
            event["body"] = base64.b64encode(body).decode("ascii")
            event["isBase64Encoded"] = True
        else:
            event["body"] = text
            event["isBase64Encoded"] = False
    else:
        event["isBase64Encoded"] = False
    return event


# --------------------------------------------------------------------------------------------- routing


@dataclass(frozen=True)
class _Pattern:
    route: Route
    regex: re.Pattern[str]
    greedy: bool
    literal_segments: int


class Router:
    """API Gateway's route selection for one HTTP API."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self.default: Route | None = None
        self._exact: dict[tuple[str, str], Route] = {}
        self._patterns: list[_Pattern] = []
        for route in routes:
            if route.path == "$default":
                self.default = route
            elif "{" in route.path:
                self._patterns.append(self._compile(route))
            else:
                self._exact[(route.method, route.path)] = route
        # most specific first: non-greedy before greedy, more literal segments first, a method before ANY
        self._patterns.sort(key=lambda p: (p.greedy, -p.literal_segments, p.route.method == "ANY"))

    @staticmethod
    def _compile(route: Route) -> _Pattern:
        parts = []
        greedy = False
        literal = 0
        for segment in route.path.strip("/").split("/"):
            match = re.fullmatch(r"\{([A-Za-z0-9_.-]+)(\+?)\}", segment)
            if match and match.group(2):
                parts.append(f"(?P<{_group(match.group(1))}>.+)")
                greedy = True
            elif match:
                parts.append(f"(?P<{_group(match.group(1))}>[^/]+)")
            else:
                parts.append(re.escape(segment))
                literal += 1
        return _Pattern(route, re.compile("/" + "/".join(parts)), greedy, literal)

    def match(self, method: str, path: str) -> tuple[Route | None, dict[str, str]]:
        route = self._exact.get((method, path)) or self._exact.get(("ANY", path))
        if route is not None:
            return route, {}
        for pattern in self._patterns:
            if pattern.route.method not in (method, "ANY"):
                continue
            found = pattern.regex.fullmatch(path)
            if found:
                return pattern.route, {_ungroup(k): v for k, v in found.groupdict().items()}
        return self.default, {}


def _group(name: str) -> str:
    return "p_" + re.sub(r"[^A-Za-z0-9_]", lambda m: f"_{ord(m.group()):x}_", name)


def _ungroup(group: str) -> str:
    return re.sub(r"_([0-9a-f]+)_", lambda m: chr(int(m.group(1), 16)), group[2:])


# --------------------------------------------------------------------------------------------- gateway


class Gateway:
    """Template-driven HTTP API. ``handle()`` is transport-free; :meth:`start` serves it over HTTP."""

    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        cors: CorsConfig | None = None,
        runtime: LambdaRuntime | None = None,
        tick_then_drain: TickThenDrain | None = None,
        tick_interval_s: float = 0.0,
        integration_timeout_s: float = INTEGRATION_TIMEOUT_S,
        payload_limit: int = API_PAYLOAD_LIMIT,
        lambda_payload_limit: int = LAMBDA_SYNC_PAYLOAD_LIMIT,
        parameters: Mapping[str, Any] | None = None,
        read_timeout_s: float = READ_TIMEOUT_S,
        clock: MovableClock | None = None,
    ) -> None:
        self.template = template
        self.clock = clock
        self.read_timeout_s = read_timeout_s
        self.cors = cors
        self._owns_runtime = runtime is None  # a runtime we made, we stop (its sandbox processes) with us
        self.runtime = runtime or LambdaRuntime(template, parameters=parameters)
        self.routes = http_routes(template, parameters)
        self.router = Router(self.routes)
        self.ticks = TickRunner(tick_then_drain, tick_interval_s)
        self.integration_timeout_s = integration_timeout_s
        self.payload_limit = payload_limit
        self.lambda_payload_limit = lambda_payload_limit
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._clock_lock = threading.Lock()  # a clock move is checked against the range and applied at once

    # ------------------------------------------------------------------ request handling

    def handle(
        self,
        method: str,
        target: str,
        header_pairs: Sequence[tuple[str, str]],
        body: bytes,
        *,
        source_ip: str = "127.0.0.1",
        host: str = "127.0.0.1",
    ) -> GatewayResponse:
        """Answer one request (``target`` is the raw request target: path plus optional query)."""
        headers = fold_headers(header_pairs)
        origin = headers.get("origin")
        if len(body) > self.payload_limit:
            return self._with_cors(GatewayResponse.message(413, "Request Entity Too Large"), origin)
        if self.cors is not None and method == "OPTIONS" and origin and "access-control-request-method" in headers:
            return self._preflight(origin)
        split = urlsplit(target)
        raw_path = split.path or "/"
        if method == "POST" and raw_path == LOCAL_TICK_PATH:
            return self._with_cors(self._local_tick(), origin)
        if method == "POST" and raw_path == LOCAL_CLOCK_PATH:
            return self._with_cors(self._local_clock(body), origin)
        if method == "POST" and raw_path == LOCAL_RUN_TASK_PATH:
            return self._with_cors(self._local_run_task(body), origin)
        if method == "GET" and raw_path in (LOCAL_STATS_PATH, ENVIRONMENT_PATH):
            return self._local_info(raw_path)
        route, path_params = self.router.match(method, raw_path)
        if route is None:
            return self._with_cors(GatewayResponse.message(404, "Not Found"), origin)
        request_id = base64.b64encode(secrets.token_bytes(10)).decode("ascii")
        event = build_v2_event(
            route, method, raw_path, split.query, headers, body, path_params, source_ip, host, request_id
        )
        event_size = len(json_body(event))
        if event_size > self.lambda_payload_limit:
            log.warning(
                "%s %s: event of %d bytes exceeds Lambda's %d-byte invocation limit",
                method,
                raw_path,
                event_size,
                self.lambda_payload_limit,
            )
            return self._with_cors(GatewayResponse.message(413, "Request Entity Too Large"), origin)
        invocation = self.runtime.invoke(route.function_logical_id, event, wait_cap_s=self.integration_timeout_s)
        if invocation.error_type == "Caller.Timeout":
            response = GatewayResponse.message(503, "Service Unavailable")
        elif not invocation.ok:
            response = GatewayResponse.message(500, "Internal Server Error")
        else:
            response = _to_http(invocation.value, route)
        response.headers.append(("apigw-requestid", request_id))
        return self._with_cors(response, origin)

    def _preflight(self, origin: str) -> GatewayResponse:
        assert self.cors is not None
        headers: list[tuple[str, str]] = []
        allowed = self.cors.match_origin(origin)
        if allowed:
            headers.append(("access-control-allow-origin", allowed))
            if self.cors.allow_credentials:
                headers.append(("access-control-allow-credentials", "true"))
            if self.cors.allow_methods:
                headers.append(("access-control-allow-methods", ",".join(m.upper() for m in self.cors.allow_methods)))
            if self.cors.allow_headers:
                headers.append(("access-control-allow-headers", ",".join(h.lower() for h in self.cors.allow_headers)))
            if self.cors.max_age is not None:
                headers.append(("access-control-max-age", str(self.cors.max_age)))
            if allowed != "*":
                headers.append(("vary", "origin"))
        return GatewayResponse(204, headers, b"")

    def _with_cors(self, response: GatewayResponse, origin: str | None) -> GatewayResponse:
        if self.cors is None:
            return response
        kept = []
        for name, value in response.headers:
            if name.lower().startswith("access-control-"):
                log.warning("dropping %s returned by a handler (CORS belongs to the gateway)", name)
                continue
            kept.append((name, value))
        response.headers = kept
        allowed = self.cors.match_origin(origin) if origin else None
        if allowed:
            response.headers.append(("access-control-allow-origin", allowed))
            if self.cors.allow_credentials:
                response.headers.append(("access-control-allow-credentials", "true"))
            if self.cors.expose_headers:
                response.headers.append(("access-control-expose-headers", ",".join(self.cors.expose_headers)))
            if allowed != "*":
                _merge_vary(response.headers, "origin")
        return response

    def _local_info(self, raw_path: str) -> GatewayResponse:
        """``/_local/stats`` (per-function counts) or ``/_local/environment`` (endpoints, no secret: stack_info)."""
        if raw_path == LOCAL_STATS_PATH:
            info = self.runtime.stats()
        else:
            queue = getattr(self.ticks.tick_then_drain, "queue", None)
            environment = self.runtime.environment()  # the functions' (the stack's over the caller's)
            info = describe(environment, clock=self.clock, dead_letter_url=getattr(queue, "dead_letter_url", None))
            info["lastTick"] = self.ticks.last_run
        return GatewayResponse(
            200, [("content-type", "application/json; charset=utf-8")], json_body({"success": True, **info})
        )

    def _local_run_task(self, body: bytes) -> GatewayResponse:
        """Local-only ``runTask(uuid)``: ``{"uuid": "..."}`` → ``{ran, reason?|summary}``, then drains the queue."""
        try:
            wanted = task_uuid(parse_object(body, frozenset({"uuid"})))
        except BadLocalRequest as exc:
            return _local_error(400, "INVALID_PARAMETERS", str(exc))
        from amsg import runtime
        from amsg.engine.run_now import run_task_now

        try:
            result = run_task_now(runtime.app_context(), wanted)
        except Exception:
            log.exception("local run-task failed")
            return _local_error(500, "LOCAL_RUN_TASK_FAILED", "runTask failed; the stack's log has the error")
        return _local_ok({"success": True, **result})

    def _local_clock(self, body: bytes) -> GatewayResponse:
        """Local-only time travel on the injected clock: ``{"advanceMs": n}``, ``{"nowMs": n}``, ``{"reset": true}``."""
        clock = self.clock
        if clock is None:
            return _local_error(501, "NOT_IMPLEMENTED", "this stack has no clock")
        try:
            request = parse_object(body, frozenset({"advanceMs", "nowMs", "reset"}))
            with self._clock_lock:
                current = clock.now_ms()
                target = clock_target(request, current)
                if target is None:
                    clock.reset()
                else:
                    clock.advance(target - current)  # exactly advanceMs; nowMs up to the time between reads
        except BadLocalRequest as exc:
            return _local_error(400, "INVALID_PARAMETERS", str(exc))
        return _local_ok({"success": True, "nowMs": clock.now_ms(), "offsetMs": clock.offset_ms})

    def _local_tick(self) -> GatewayResponse:
        try:
            summary = self.ticks.run_once()
        except TickNotConfigured as exc:
            return _local_error(501, "NOT_IMPLEMENTED", str(exc))
        except Exception:
            log.exception("local tick failed")
            return _local_error(500, "LOCAL_TICK_FAILED", "the tick failed; the stack's log has the error")
        return _local_ok({"success": True, **summary})

    # ------------------------------------------------------------------ serving

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve in a background thread; returns the base URL (``http://127.0.0.1:<port>``)."""
        if self._server is not None:
            raise RuntimeError("gateway already started")
        from amsg_local.transport import IPv4Server, IPv6Server, make_handler

        server_class = IPv6Server if ":" in host else IPv4Server
        try:
            server = server_class((host, port), make_handler(self))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OSError(exc.errno, f"port {port} on {host} is already in use (try --port 0 or PORT=...)") from exc
            raise
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="amsg-local-gateway", daemon=True
        )
        self._thread.start()
        self.ticks.start()
        return self.base_url

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("gateway is not running")
        address = self._server.server_address
        host, port = str(address[0]), address[1]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    def stop(self) -> None:
        self.ticks.stop()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self._owns_runtime:
            self.runtime.close()


def _local_ok(payload: dict[str, Any]) -> GatewayResponse:
    return GatewayResponse(200, [("content-type", "application/json; charset=utf-8")], json_body(payload))


def _local_error(status: int, code: str, message: str) -> GatewayResponse:
    payload = {"success": False, "error": {"code": code, "message": message}}
    return GatewayResponse(status, [("content-type", "application/json; charset=utf-8")], json_body(payload))


def fold_headers(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Lower-case names; duplicates joined with commas (payload 2.0 has no multi-value headers)."""
    folded: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower()
        folded[key] = f"{folded[key]},{value}" if key in folded else value
    return folded


def _merge_vary(headers: list[tuple[str, str]], value: str) -> None:
    for index, (name, current) in enumerate(headers):
        if name.lower() == "vary":
            if value not in [v.strip().lower() for v in current.split(",")]:
                headers[index] = (name, f"{current}, {value}")
            return
    headers.append(("vary", value))


def _to_http(value: Any, route: Route) -> GatewayResponse:
    """Interpret a payload-2.0 Lambda response like API Gateway (a malformed one is a 500)."""
    if not (isinstance(value, Mapping) and "statusCode" in value):
        plain = value if isinstance(value, str) else json.dumps(value)
        return GatewayResponse(200, [("content-type", "application/json")], plain.encode("utf-8"))
    try:
        status = int(value["statusCode"])
        if not 100 <= status <= 599:
            raise ValueError(status)
        raw_headers = value.get("headers") or {}
        headers = [(str(k).lower(), _header_text(v)) for k, v in raw_headers.items() if v is not None]
        body = value.get("body")
        if body is None:
            data = b""
        elif not isinstance(body, str):
            raise TypeError("body must be a string")
        elif value.get("isBase64Encoded"):
            data = base64.b64decode(body, validate=True)
        else:
            data = body.encode("utf-8")
    except (TypeError, ValueError) as exc:
        log.error("%s returned a malformed Lambda response: %r", route.function_logical_id, exc)
        return GatewayResponse.message(500, "Internal Server Error")
    headers = [(k, v) for k, v in headers if k not in _HOP_BY_HOP]
    return GatewayResponse(status, headers, data)


def _header_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)
