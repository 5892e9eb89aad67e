"""Tick throughput on DynamoDB Local: claims per second, DynamoDB requests, client CPU and DynamoDB Local's CPU per
claimed task, for both ways of writing claims (``ClaimWrites``), on one warmed-up DynamoDB Local."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from bench import counting

MODES = ("single", "transaction")
ROUND_MS = 600_000  # each round's tasks fall due after the previous round's leases (5 min) have ended


def main(tasks: int = 400) -> None:
    counting.install()
    from bench.capacity import _process_cpu_s
    from bench.ddb import dynamodb_local_server
    from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, with_fakes

    asked = os.environ.get("AMSG_CLAIM_WRITES", "").strip().lower()
    modes = [asked] if asked else list(MODES)
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(f"== tick on DynamoDB Local ({tasks} due tasks per round, load average {' '.join(load)})")
    with dynamodb_local_server("bench") as server:
        contexts = {}
        for mode in modes:
            ctx = contexts[mode] = ddb_context(server.endpoint_url, "bench", AMSG_CLAIM_WRITES=mode)
            with_fakes(ctx, RecordingPushSender(), MemoryQueue())
        # round 0 warms DynamoDB Local's JIT compiler up on every mode's requests; the rounds after it are measured
        for number, mode in enumerate([*modes, *modes]):
            ctx = contexts[mode]
            due = T0_MS + (number + 1) * ROUND_MS
            created = _seed(ctx, tasks, due)
            ctx.clock.current_ms = due + 1_000
            figures = _one_tick(ctx, lambda: _process_cpu_s(server.pid))
            if number >= len(modes):
                _report(mode, figures)
            for user, task_uuid in created:  # claimed, never delivered: gone before the next round's tick
                ctx.tasks.delete_task(user, task_uuid)


def _seed(ctx: Any, tasks: int, due: int) -> list[tuple[str, str]]:
    from amsg.crypto import compact_json, encrypt_for_storage
    from amsg.ports import NewTask

    ctx.clock.current_ms = due - 60_000
    created = []
    for i in range(tasks):
        user, task_uuid = f"{uuid.UUID(int=i % 40 + 1, version=4)}", str(uuid.uuid4())
        payload = compact_json({"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "metadata": {}})
        stored = encrypt_for_storage(payload, ctx.user_key(user))
        ctx.tasks.create_task(NewTask(user, task_uuid, stored, "fixed", due, ctx.clock.current_ms))
        created.append((user, task_uuid))
    return created


def _one_tick(ctx: Any, server_cpu: Any) -> dict[str, float]:
    from amsg.engine.tick import run_tick

    counting.reset()
    started, cpu_started, server_started = time.perf_counter(), time.process_time(), server_cpu()
    summary = run_tick(ctx)
    return {
        "elapsed": time.perf_counter() - started,
        "cpu": time.process_time() - cpu_started,
        "server": server_cpu() - server_started,
        "claimed": summary["claimedTasks"],
        "requests": counting.dynamodb_total(),
    }


def _report(mode: str, f: dict[str, float]) -> None:
    claimed = max(1, int(f["claimed"]))
    print(f"-- ClaimWrites={mode}: claimed {int(f['claimed'])} in {f['elapsed']:.2f} s")
    print(f"  claims/s             {f['claimed'] / f['elapsed']:8.1f}")
    # the tick's own CPU bounds its claim rate on AWS, where a 512 MB function gets ~0.29 of a vCPU
    print(
        f"  CPU per claim        {1000 * f['cpu'] / claimed:8.2f} ms  (this process: the tick's requests built,"
        " signed and parsed, plus the loopback relay to DynamoDB Local)"
    )
    print(f"  DynamoDB Local CPU   {1000 * f['server'] / claimed:8.2f} ms per claim")
    print(f"  DynamoDB requests    {int(f['requests']):8d}  ({f['requests'] / claimed:.2f} per claim)")
