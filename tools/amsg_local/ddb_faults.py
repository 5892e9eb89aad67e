"""A DynamoDB fault proxy: an HTTP proxy on loopback in front of DynamoDB Local that fails requests on purpose.

The delivery chain promises no push twice and no segment lost whatever DynamoDB does (docs/delivery.md); this
proxy is how the local stack and the tests make DynamoDB misbehave the ways it does in production:

* ``throttle``: ``400`` with ``ThrottlingException`` or ``ProvisionedThroughputExceededException`` (alternately),
  bodies and headers as DynamoDB sends them; nothing is applied;
* ``error``: ``500 InternalServerError``; nothing is applied;
* ``drop``: the request is forwarded and applied, then the answer is dropped (the connection is reset), so the
  client does not know that its write happened and retries it;
* ``latency``: the request waits ``latency_s`` (past botocore's 10 s read timeout) before it is forwarded: the
  client gives up and retries, and the first copy is applied late;
* ``outage``: for ``outage_s`` seconds after :meth:`FaultProxy.start_outage` (or after start, when the plan has
  one) every connection is reset at once.

Each request draws its fault from one ``random.Random(seed)`` in arrival order, so a run is reproducible up to
the order in which concurrent requests arrive. ``FaultPlan.parse("throttle=0.1,drop=0.05,seed=7")`` reads the
``amsg local --dynamodb-faults`` spelling. Sockets get ``TCP_NODELAY`` on both sides, as every server of the
local stack; the proxy listens on 127.0.0.1 only and keeps one upstream connection per client connection.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import random
import socket
import struct
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["FAULT_KINDS", "FaultPlan", "FaultProxy", "fault_plan"]

FAULT_KINDS = ("throttle", "error", "drop", "latency")
_JSON = "application/x-amz-json-1.0"
_PREFIX = "com.amazonaws.dynamodb.v20120810#"
_THROTTLES = (
    ("ThrottlingException", "Rate of requests exceeds the allowed throughput."),
    (
        "ProvisionedThroughputExceededException",
        "The level of configured provisioned throughput for the table was exceeded. Consider increasing your "
        "provisioning level with the UpdateTable API.",
    ),
)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}


@dataclass(frozen=True)
class FaultPlan:
    """Fault rates (0..1, per request, exclusive: their sum is the share of requests that fail) and an outage."""

    throttle: float = 0.0
    error: float = 0.0
    drop: float = 0.0
    latency: float = 0.0
    latency_s: float = 11.0  # botocore's read timeout in the table adapter is 10 s
    outage_s: float = 0.0
    seed: int = 0
    # only requests whose X-Amz-Target operation is listed (e.g. {"TransactWriteItems"}); empty = every request
    operations: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        rates = [getattr(self, kind) for kind in FAULT_KINDS]
        if any(not 0.0 <= rate <= 1.0 for rate in rates) or sum(rates) > 1.0 + 1e-9:
            raise ValueError("fault rates must be within 0..1 and add up to at most 1")
        if self.latency_s < 0 or self.outage_s < 0:
            raise ValueError("latency_s and outage_s must not be negative")

    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        """``"throttle=0.1,error=0.05,drop=0.02,latency=0.01,latency_s=11,outage=60,seed=7,ops=PutItem+Query"``."""
        values: dict[str, Any] = {}
        for item in (part.strip() for part in spec.split(",")):
            if not item:
                continue
            name, sep, raw = item.partition("=")
            name = {"outage": "outage_s", "ops": "operations", "500": "error"}.get(name.strip(), name.strip())
            if not sep or name not in cls.__dataclass_fields__:
                raise ValueError(f"unknown DynamoDB fault setting {item!r}")
            if name == "operations":
                values[name] = frozenset(op for op in raw.split("+") if op)
            else:
                values[name] = int(raw) if name == "seed" else float(raw)
        return cls(**values)

    def describe(self) -> str:
        """The settings that differ from no fault at all, in the spelling :meth:`parse` reads."""
        names = {"outage_s": "outage", "operations": "ops"}
        parts = []
        for name, default in FaultPlan().__dict__.items():
            value = getattr(self, name)
            if value != default:
                shown = "+".join(sorted(value)) if name == "operations" else f"{value:g}"
                parts.append(f"{names.get(name, name)}={shown}")
        return ",".join(parts) or "no faults"

    @property
    def active(self) -> bool:
        return self.outage_s > 0 or any(getattr(self, kind) > 0 for kind in FAULT_KINDS)


def fault_plan(spec: str) -> FaultPlan:
    """``FaultPlan.parse`` for argparse (its name is the one an error message shows)."""
    return FaultPlan.parse(spec)


class _QuietServer(ThreadingHTTPServer):
    """A client that went away (a sandbox killed on purpose, holding a keep-alive connection) is not an error of
    the proxy: no traceback for it; anything else is reported as ``socketserver`` does."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FaultProxy:
    """``with FaultProxy("http://127.0.0.1:8000", FaultPlan(throttle=0.1)) as proxy: proxy.endpoint_url``."""

    def __init__(self, target_url: str, plan: FaultPlan | None = None, *, host: str = "127.0.0.1") -> None:
        parts = urlsplit(target_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the fault proxy forwards to a plain http:// endpoint, not {target_url!r}")
        self.target = (parts.hostname, parts.port or 80)
        self._host = host
        self._lock = threading.Lock()
        self._plan = FaultPlan()
        self._random = random.Random(0)
        self._outage_until = 0.0
        self._counts: dict[str, int] = {}
        self._server: ThreadingHTTPServer | None = None
        self.variants = itertools.count()  # which throttle error the next one is (the two alternate)
        self.set_plan(plan or FaultPlan())

    # ------------------------------------------------------------------ control

    def set_plan(self, plan: FaultPlan) -> None:
        """Use ``plan`` from now on (its seed restarts the draws; its outage, if any, starts now)."""
        with self._lock:
            self._plan = plan
            self._random = random.Random(plan.seed)
            self._outage_until = time.monotonic() + plan.outage_s if plan.outage_s else 0.0

    @property
    def plan(self) -> FaultPlan:
        return self._plan

    def start_outage(self, seconds: float) -> None:
        """Reset every connection for ``seconds`` from now."""
        with self._lock:
            self._outage_until = time.monotonic() + seconds

    def in_outage(self) -> bool:
        return time.monotonic() < self._outage_until

    def clear(self) -> None:
        """No more faults (the counts stay)."""
        self.set_plan(replace(FaultPlan(), seed=self._plan.seed))

    def counts(self) -> dict[str, int]:
        """Requests seen (``requests``) and faults injected, by kind (``outage`` counts reset connections)."""
        with self._lock:
            return dict(self._counts)

    def _count(self, key: str) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def decide(self, operation: str) -> str | None:
        """The fault for one request (None = forward it as it is); one draw per request, in arrival order."""
        with self._lock:
            self._counts["requests"] = self._counts.get("requests", 0) + 1
            if time.monotonic() < self._outage_until:
                self._counts["outage"] = self._counts.get("outage", 0) + 1
                return "outage"
            plan = self._plan
            if plan.operations and operation not in plan.operations:
                return None
            draw = self._random.random()
            for kind in FAULT_KINDS:
                rate = getattr(plan, kind)
                if draw < rate:
                    self._counts[kind] = self._counts.get(kind, 0) + 1
                    return kind
                draw -= rate
            return None

    # ------------------------------------------------------------------ lifecycle

    def start(self, port: int = 0) -> FaultProxy:
        if self._server is None:
            server = _QuietServer((self._host, port), _make_handler(self))
            server.daemon_threads = True
            self._server = server
            threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="ddb-fault-proxy", daemon=True
            ).start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fault proxy is not started")
        return f"http://{self._host}:{self._server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def error_body(kind: str, draw: int) -> tuple[int, bytes]:
    """DynamoDB's status and JSON body for a throttle (``draw`` picks which of the two) or an internal error."""
    if kind == "throttle":
        code, message = _THROTTLES[draw % len(_THROTTLES)]
        return 400, json.dumps({"__type": _PREFIX + code, "message": message}).encode()
    return 500, json.dumps({"__type": _PREFIX + "InternalServerError", "message": "Internal server error"}).encode()


class _Handler(BaseHTTPRequestHandler):
    """One client connection: each request is answered with its fault, or forwarded on this connection's own
    upstream connection."""

    protocol_version = "HTTP/1.1"
    proxy: FaultProxy  # set on the subclass each proxy makes
    upstream: http.client.HTTPConnection | None = None

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        if self.upstream is not None:
            self.upstream.close()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        fault = self.proxy.decide((self.headers.get("X-Amz-Target") or "").rpartition(".")[2])
        if fault in ("throttle", "error"):
            status, payload = error_body(fault, next(self.proxy.variants))
            self._answer(status, [("Content-Type", _JSON), ("x-amzn-RequestId", uuid.uuid4().hex)], payload)
            return
        if fault == "latency":
            time.sleep(self.proxy.plan.latency_s)
        answer = None if fault == "outage" else self._forward(body)
        if answer is None or fault == "drop":
            self._reset()
            return
        self._answer(*answer)

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """DynamoDB's answer, or None when the upstream connection failed."""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        try:
            if self.upstream is None:
                self.upstream = http.client.HTTPConnection(*self.proxy.target, timeout=60)
                self.upstream.connect()
                assert self.upstream.sock is not None
                self.upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.upstream.request("POST", self.path, body=body, headers=headers)
            response = self.upstream.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            if self.upstream is not None:
                self.upstream.close()
            self.upstream = None
            return None
        kept = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP]
        return response.status, kept, payload

    def _answer(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
        try:
            self.send_response_only(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            self.close_connection = True

    def _reset(self) -> None:
        """Close with a TCP reset: the client sees its connection die with no answer."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _make_handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    return type("FaultProxyHandler", (_Handler,), {"proxy": proxy})
