"""The local stack itself (``amsg local`` on DynamoDB Local), with thread sandboxes (before) and process sandboxes
(after): the delivery rate of ``AMSG_BENCH_LOCAL_TASKS`` (1,000) due one-shot tasks through ``POST /_local/tick``
(each task to its own push subscription, so a duplicate or a lost push shows), the API's keep-alive latency at
concurrency 1, 8 and 32, the stack's start-up time and the cold starts per function (``GET /_local/stats``).
Numbers are printed, never asserted.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.load import _keep_alive_transport, _pct

MODES = ("thread", "process")
LEVELS = (1, 8, 32)
ROUTES = ("GET /get-user-key", "GET /capabilities", "GET /messages")


def _seed(stack: Any, push: Any, tasks: int) -> tuple[int, list[str]]:
    """``tasks`` one-shot tasks due in an hour (stack clock), one user and subscription each; returns due ms."""
    from amsg import runtime
    from amsg.crypto import compact_json, encrypt_for_storage
    from amsg.ports import NewTask

    ctx = runtime.build_context(dict(os.environ))
    now_ms = int(stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"])
    due_ms = now_ms + 3_600_000
    payload = compact_json({"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "metadata": {}})
    endpoints: list[str] = []

    def seed_user(_: int) -> None:
        user = str(uuid.uuid4())
        key = ctx.user_key(user)
        subscription = push.subscribe()
        endpoints.append(subscription.endpoint_id)
        ctx.subscriptions.put_push_subscription(user, encrypt_for_storage(compact_json(subscription.to_json()), key), 1)
        ctx.tasks.create_task(
            NewTask(
                user,
                str(uuid.uuid4()),
                encrypt_for_storage(payload, key),
                "fixed",
                due_ms,
                now_ms,
            )
        )

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(seed_user, range(tasks)))
    return due_ms, endpoints


def _kind(pid: int) -> str:
    if pid == os.getpid():
        return "gateway"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
    except OSError:
        return "other"
    text = b" ".join(argv)
    for marker, kind in (
        (b"sandbox_worker", "sandboxes"),
        (b"DynamoDBLocal", "dynamodb-local"),
        (b"relay.py", "relay"),
    ):
        if marker in text:
            return kind
    return "other"


def _tree_cpu_s() -> dict[str, float]:
    """CPU seconds of this process and every live descendant, by kind (sandboxes, DynamoDB Local, relay)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    kinds: dict[str, float] = {}
    for pid in tree:
        kind = _kind(pid)
        kinds[kind] = kinds.get(kind, 0.0) + cpu.get(pid, 0.0)
    return kinds


def _delivery(stack: Any, push: Any, tasks: int) -> dict[str, Any]:
    target = len(push.received) + tasks
    due_ms, endpoints = _seed(stack, push, tasks)
    now_ms = int(stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"])
    stack.post_local("/_local/clock", {"advanceMs": due_ms - now_ms + 1_000})
    started, cpu_started, push_started = time.perf_counter(), time.process_time(), push.cpu_s
    tree_started, load_started = _tree_cpu_s(), os.getloadavg()[0]
    ticks, tick_ms = 0, 0.0
    while len(push.received) < target and time.perf_counter() - started < 600:
        summary = stack.post_local("/_local/tick")
        tick_ms += float((summary.get("tick") or {}).get("durationMs") or 0.0)
        ticks += 1
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    tree_ended, load = _tree_cpu_s(), max(load_started, os.getloadavg()[0])
    tree_cpu = {kind: tree_ended[kind] - tree_started.get(kind, 0.0) for kind in tree_ended}
    per_endpoint = [len(push.received_for(endpoint)) for endpoint in endpoints]
    return {
        "delivered": sum(1 for n in per_endpoint if n >= 1),
        "duplicates": sum(n - 1 for n in per_endpoint if n > 1),
        "seconds": elapsed,
        "ticks": ticks,
        "tick_s": tick_ms / 1000,
        "gateway_cpu_s": cpu,
        "tree_cpu_s": sum(tree_cpu.values()),
        "cpu_by_kind_s": tree_cpu,
        "load": load,
        "push_cpu_s": push.cpu_s - push_started,
    }


def _latency(stack: Any, push: Any) -> list[tuple[int, float, float, float, int]]:
    from tests.support.wire_client import WireClient

    transport = _keep_alive_transport(stack.base_url)
    users = []
    for _ in range(max(LEVELS)):
        client = WireClient(transport, str(uuid.uuid4()))
        client.init()
        users.append(client)
    rows = []
    for level in LEVELS:
        latencies: list[float] = []
        errors = [0]
        lock = threading.Lock()

        def worker(index: int, level: int = level) -> None:
            client = users[index]
            for i in range(max(30, 240 // level)):
                route = ROUTES[(index + i) % len(ROUTES)]
                method, path = route.split(" ", 1)
                began = time.perf_counter()
                try:
                    status = client.request(method, path).status
                except Exception:
                    status = 0
                with lock:
                    latencies.append((time.perf_counter() - began) * 1000)
                    errors[0] += status == 0 or status >= 500

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(level)]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - began
        rows.append((level, statistics.median(latencies), _pct(latencies, 95), len(latencies) / wall, errors[0]))
    return rows


def _count_push_cpu(push: Any) -> None:
    """Add up the CPU the loopback push service spends in this process (it decrypts and verifies every push)."""
    handle = push._handle
    push.cpu_s = 0.0
    lock = threading.Lock()

    def counted(*args: Any, **kwargs: Any) -> Any:
        began = time.thread_time()
        try:
            return handle(*args, **kwargs)
        finally:
            with lock:
                push.cpu_s += time.thread_time() - began

    push._handle = counted


def run(mode: str, tasks: int) -> dict[str, Any]:
    from amsg_local.cli import start_local_stack

    from bench.stack_config import stack_config
    from tests.support.fake_push import FakePushService

    config, public = stack_config(AMSG_PUSH_PACING_MS="0")
    with FakePushService(vapid_public_key=public) as push:
        _count_push_cpu(push)
        began = time.perf_counter()
        with start_local_stack(config=config, dynamodb_local=True, sandboxes=mode, warm=True) as stack:
            start_s = time.perf_counter() - began  # (as `amsg local`: process sandboxes warm in the background)
            delivery = _delivery(stack, push, tasks)
            again = _delivery(stack, push, tasks)  # the same, every sandbox warm
            latency = _latency(stack, push)
            stats = stack.gateway.runtime.stats()
    return {"mode": mode, "start_s": start_s, "delivery": delivery, "again": again, "latency": latency, "stats": stats}


def main() -> None:
    tasks = int(os.environ.get("AMSG_BENCH_LOCAL_TASKS", "1000"))
    modes = [m for m in os.environ.get("AMSG_BENCH_LOCAL_MODES", ",".join(MODES)).split(",") if m]
    print(f"== the local stack on DynamoDB Local: {tasks} due one-shot tasks through POST /_local/tick, API latency")
    for mode in modes:
        result = run(mode, tasks)
        print(f"  sandboxes={mode}: stack started in {result['start_s']:.1f} s")
        for label, d in (("first run", result["delivery"]), ("second run", result["again"])):
            print(
                f"    {label:<10} {d['delivered']}/{tasks} delivered in {d['seconds']:.1f} s"
                f" = {d['delivered'] / d['seconds']:.1f} tasks/s ({d['ticks']} ticks taking {d['tick_s']:.1f} s,"
                f" {d['duplicates']} duplicates, {tasks - d['delivered']} lost; load average {d['load']:.1f})"
            )
            print(
                f"               CPU per task: gateway process {1000 * d['gateway_cpu_s'] / tasks:.1f} ms"
                f" (push service {1000 * d['push_cpu_s'] / tasks:.1f} ms), whole stack (sandboxes, DynamoDB"
                f" Local, relay) {1000 * d['tree_cpu_s'] / tasks:.1f} ms:"
                + ", ".join(f" {k} {1000 * v / tasks:.1f}" for k, v in sorted(d["cpu_by_kind_s"].items()))
            )
        for level, p50, p95, rate, errors in result["latency"]:
            print(
                f"    latency    c={level:<2} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  {rate:6.0f} req/s  errors {errors}"
            )
        cold = {
            name: (fn["coldStarts"], fn["initMsAvg"])
            for name, fn in result["stats"]["functions"].items()
            if fn.get("coldStarts")
        }
        if cold:
            print(f"    cold starts (count, mean Init Duration ms): {json.dumps(cold)}")


if __name__ == "__main__":
    main()
