"""Memory of ``amsg local --moto`` (the default without Java) under writes: RSS per 1,000 writes.

Two workloads on a fresh stack, one after the other: ``POST /schedule-message`` (a DynamoDB transaction per
write, ten tasks per user) and small ``PUT /client-state`` writes, ``AMSG_BENCH_MOTO_WRITES`` (1,000) each
after 50 warm-up writes. RSS of this process (the whole stack: gateway, handlers, the embedded moto server)
is printed at each quarter and as growth per 1,000 writes, with the mean latency of each quarter (it stays
flat as the table grows: see ``tools/amsg_local/embedded.py``). Numbers are printed, never asserted.
"""

from __future__ import annotations

import gc
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.load import _keep_alive_transport, _rss_mb

TASKS_PER_USER = 10
WARMUP = 50


def _writes(name: str, write: Callable[[int], int], indexes: range) -> None:
    for index in indexes:
        status = write(index)
        if status >= 300:
            raise RuntimeError(f"{name} write {index}: HTTP {status}")


def _run(name: str, total: int, write: Callable[[int], int]) -> None:
    before = _rss_mb()
    _writes(name, write, range(WARMUP))  # first calls of each path: imports, sandboxes, caches
    gc.collect()
    start = _rss_mb()
    quarter = max(1, total // 4)
    print(f"  {name:<22} {before:7.1f} MB, after {WARMUP} warm-up writes {start:7.1f} MB")
    done = 0
    while done < total:
        batch = min(quarter, total - done)
        started = time.perf_counter()
        _writes(name, write, range(WARMUP + done, WARMUP + done + batch))
        elapsed_ms = (time.perf_counter() - started) * 1000 / batch
        done += batch
        gc.collect()
        print(f"  {name:<22} {done:>6} writes {_rss_mb():7.1f} MB  ({elapsed_ms:6.1f} ms/write)")
    grown = _rss_mb() - start
    print(f"  {name:<22} growth {grown:+.1f} MB = {grown * 1000 / total:+.1f} MB per 1,000 writes")


def main() -> None:
    from amsg.timeutil import iso_from_ms
    from amsg_local.cli import start_local_stack

    from bench.stack_config import stack_config
    from tests.support.wire_client import WireClient, dummy_subscription

    total = int(os.environ.get("AMSG_BENCH_MOTO_WRITES", "1000"))
    config, _ = stack_config()
    with start_local_stack(config=config, dynamodb_local=False, warm=True) as stack:
        print(f"== moto memory ({stack.backend}; {total} writes per route; {stack.base_url})")
        transport = _keep_alive_transport(stack.base_url)
        first = iso_from_ms(int(stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"]) + 86_400_000)
        body = {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": first}
        users: dict[int, Any] = {}

        def schedule(index: int) -> int:
            slot = index // TASKS_PER_USER
            if slot not in users:
                client = WireClient(transport, str(uuid.uuid4()))
                client.init()
                client.put_subscription(dummy_subscription())
                users.clear()
                users[slot] = client
            return users[slot].schedule(body).status

        state_user = WireClient(transport, str(uuid.uuid4()))
        state_user.init()

        def client_state(index: int) -> int:
            entry = {"namespace": "bench", "key": f"k{index % 20}", "value": f"v{index}", "updatedAt": 1_000 + index}
            return state_user.put_client_state([entry]).status

        _run("POST /schedule-message", total, schedule)
        _run("PUT /client-state", total, client_state)
