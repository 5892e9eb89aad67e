"""Load on ``make run``'s stack (its default backend) with keep-alive clients at concurrency 1, 8 and 32.

Per route: client latency p50/p95/p99 and errors, beside the handler's own time (measured around the handler
call in the local Lambda runtime), so the local gateway's overhead (client p50 - handler p50, and the ratio)
is visible. Also the memory of this process and of DynamoDB Local, and then a soak: ``AMSG_BENCH_LOAD_SOAK``
more requests (10,000 by default; 0 skips it) over the five routes at concurrency 8, with the memory printed
at each quarter, so that growth per request shows. Numbers are printed, never asserted.
"""

from __future__ import annotations

import http.client
import os
import statistics
import threading
import time
import urllib.parse
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

LEVELS = (1, 8, 32)
SOAK_CLIENTS = 8
ROUTES = ("GET /get-user-key", "GET /capabilities", "POST /schedule-message", "GET /messages", "GET /message")


def _keep_alive_transport(base_url: str) -> Callable[..., tuple[int, dict[str, str], bytes]]:
    """A wire-client transport that keeps one HTTP/1.1 connection per thread (reconnects if it drops)."""
    parsed = urllib.parse.urlsplit(base_url)
    local = threading.local()

    def send(method: str, path: str, headers: dict[str, str], body: bytes | None) -> tuple[int, dict[str, str], bytes]:
        for attempt in (1, 2):
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    return send


def _rss_mb(pid: int | str = "self") -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _memory(ddb_pid: int | None) -> tuple[float, float]:
    """RSS in MB of this process (the whole local stack) and of DynamoDB Local (nan on the moto backend)."""
    return _rss_mb(), _rss_mb(ddb_pid) if ddb_pid else float("nan")


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main(levels: tuple[int, ...] = LEVELS) -> None:
    from amsg.timeutil import iso_from_ms
    from amsg_local.cli import start_local_stack

    from bench.stack_config import stack_config
    from tests.support.fake_push import FakePushService
    from tests.support.wire_client import WireClient

    config, public = stack_config()
    with FakePushService(vapid_public_key=public) as push, start_local_stack(config=config, warm=True) as stack:
        ddb_pid = stack._ddb_local.pid if stack._ddb_local is not None else None
        print(f"== load on the local stack ({stack.backend}; keep-alive clients; {stack.base_url})")
        rss_start = _memory(ddb_pid)

        handler_ms: dict[str, list[float]] = defaultdict(list)
        runtime = stack.gateway.runtime
        original_invoke = runtime.invoke
        function_route = {route.function_logical_id: f"{route.method} {route.path}" for route in stack.gateway.routes}

        def timed_invoke(logical_id: str, event: Any, **kwargs: Any) -> Any:
            invocation = original_invoke(logical_id, event, **kwargs)
            if invocation.handler_ms is not None:
                route = function_route.get(logical_id, logical_id).replace("/api/v1", "")
                handler_ms[route].append(invocation.handler_ms)
            return invocation

        runtime.invoke = timed_invoke  # type: ignore[method-assign]
        transport = _keep_alive_transport(stack.base_url)
        users = []
        for _ in range(max(levels)):
            client = WireClient(transport, str(uuid.uuid4()))
            client.init()
            client.put_subscription(push.subscribe().to_json())
            users.append(client)
        first = iso_from_ms(int(stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"]) + 86_400_000)
        known: dict[str, str] = {}
        for client in users:
            made = client.schedule(
                {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": first}
            )
            known[client.user_id] = made.data["uuid"]

        call = _caller(first, known)
        print(
            f"  {'c':>2} {'route':<24} {'n':>5} {'err':>4} {'p50 ms':>8} {'p95':>8} {'p99':>8}"
            f" {'handler p50':>11} {'p95':>7} {'overhead p50':>12} {'ratio':>6} {'req/s':>7}"
        )
        for level in levels:
            handler_ms.clear()
            _level(users, call, level, handler_ms)
        runtime.invoke = original_invoke  # type: ignore[method-assign]
        rss_levels = _memory(ddb_pid)
        print(
            f"  memory (RSS MB) after the levels: this process {rss_start[0]:.0f} -> {rss_levels[0]:.0f};"
            f" DynamoDB Local {rss_start[1]:.0f} -> {rss_levels[1]:.0f}"
        )
        soak = int(os.environ.get("AMSG_BENCH_LOAD_SOAK", "10000"))
        if soak:
            _soak(users[:SOAK_CLIENTS], call, soak, ddb_pid)
        rss_end = _memory(ddb_pid)
        print(
            f"  memory (RSS MB)  this process {rss_start[0]:.0f} -> {rss_end[0]:.0f};"
            f" DynamoDB Local {rss_start[1]:.0f} -> {rss_end[1]:.0f}"
        )


def _caller(first: str, known: dict[str, str]) -> Callable[[Any, str], int]:
    """One request of ``route`` by a client, answering its status; the scheduled task is due at ``first``."""
    body = {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": first}
    requests: dict[str, Callable[[Any], int]] = {
        "GET /get-user-key": lambda client: client.request("GET", "/get-user-key").status,
        "GET /capabilities": lambda client: client.request("GET", "/capabilities").status,
        "POST /schedule-message": lambda client: client.schedule(body).status,
        "GET /messages": lambda client: client.list_messages(limit=20).status,
        "GET /message": lambda client: client.get_message(known[client.user_id]).status,
    }
    return lambda client, route: requests[route](client)


def _level(users: list[Any], call: Callable[[Any, str], int], level: int, handler_ms: dict[str, list[float]]) -> None:
    """``level`` clients at once, each round the routes; one line per route and one for all."""
    per_route = max(60, 20 * level)
    latencies: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    lock = threading.Lock()

    def worker(index: int) -> None:
        client = users[index]
        mine = [ROUTES[(index + i) % len(ROUTES)] for i in range(per_route * len(ROUTES) // level)]
        for route in mine:
            started = time.perf_counter()
            try:
                status = call(client, route)
            except Exception:
                status = 0
            elapsed = (time.perf_counter() - started) * 1000
            with lock:
                latencies[route].append(elapsed)
                if status == 0 or status >= 500:
                    errors[route] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(level)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    total = sum(len(v) for v in latencies.values())
    for route in ROUTES:
        got = latencies[route]
        handler = handler_ms.get(route, [])
        client_p50 = statistics.median(got)
        handler_p50 = statistics.median(handler) if handler else float("nan")
        print(
            f"  {level:>2} {route:<24} {len(got):>5} {errors[route]:>4} {client_p50:>8.2f}"
            f" {_pct(got, 95):>8.2f} {_pct(got, 99):>8.2f} {handler_p50:>11.2f} {_pct(handler, 95):>7.2f}"
            f" {client_p50 - handler_p50:>12.2f} {client_p50 / handler_p50:>6.2f} {len(got) / wall:>7.0f}"
        )
    print(f"  {level:>2} {'all routes':<24} {total:>5} {sum(errors.values()):>4} -> {total / wall:.0f} req/s")


def _soak(clients: list[Any], call: Callable[[Any, str], int], total: int, ddb_pid: int | None) -> None:
    """``total`` requests round the routes from ``len(clients)`` keep-alive clients; RSS at each quarter."""
    per_client = total // len(clients)
    done = [0] * len(clients)
    errors = [0] * len(clients)

    def worker(index: int) -> None:
        for i in range(per_client):
            try:
                status = call(clients[index], ROUTES[(index + i) % len(ROUTES)])
            except Exception:
                status = 0
            if status == 0 or status >= 500:
                errors[index] += 1
            done[index] += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(clients))]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    marks = [total * q // 4 for q in (1, 2, 3)]
    points = []
    while any(thread.is_alive() for thread in threads):
        time.sleep(0.2)
        if marks and sum(done) >= marks[0]:
            marks.pop(0)
            points.append((sum(done), *_memory(ddb_pid)))
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    points.append((sum(done), *_memory(ddb_pid)))
    line = "; ".join(f"{n}: {ours:.0f} / {ddb:.0f}" for n, ours, ddb in points)
    print(
        f"  soak: {sum(done)} more requests at c={len(clients)} in {wall:.0f} s ({sum(done) / wall:.0f} req/s),"
        f" {sum(errors)} errors"
    )
    print(f"  memory during the soak (requests: RSS MB of this process / DynamoDB Local)  {line}")
