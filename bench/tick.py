"""Tick throughput on DynamoDB Local: claims per second, and DynamoDB requests per claimed task."""

from __future__ import annotations

import os
import time
import uuid

from bench import counting


def main(tasks: int = 400) -> None:
    counting.install()
    from amsg.crypto import compact_json, encrypt_for_storage
    from amsg.engine.tick import run_tick
    from amsg.ports import NewTask

    from bench.ddb import dynamodb_local_table
    from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, with_fakes

    with dynamodb_local_table("bench") as endpoint_url:
        ctx = ddb_context(endpoint_url, "bench", AMSG_CLAIM_WRITES=os.environ.get("AMSG_CLAIM_WRITES", "single"))
        queue = MemoryQueue()
        with_fakes(ctx, RecordingPushSender(), queue)
        due = T0_MS + 60_000
        for i in range(tasks):
            user = f"{uuid.UUID(int=i % 40 + 1, version=4)}"
            payload = compact_json({"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "metadata": {}})
            ctx.tasks.create_task(
                NewTask(
                    user,
                    str(uuid.uuid4()),
                    encrypt_for_storage(payload, ctx.user_key(user)),
                    "fixed",
                    due,
                    T0_MS,
                )
            )
        ctx.clock.current_ms = T0_MS + 61_000
        counting.reset()
        started, cpu_started = time.perf_counter(), time.process_time()
        summary = run_tick(ctx)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        claimed = summary["claimedTasks"]
        print("== tick on DynamoDB Local")
        print(f"  due tasks {tasks}, claimed {claimed}, enqueued {summary['enqueuedTasks']} in {elapsed:.2f} s")
        print(f"  claims/s             {claimed / elapsed:8.1f}")
        # the tick's own CPU bounds its claim rate on AWS, where a 512 MB function gets ~0.29 of a vCPU
        print(
            f"  CPU per claim        {1000 * cpu / max(1, claimed):8.2f} ms  (this process: the tick's requests"
            " built, signed and parsed, plus the loopback relay to DynamoDB Local)"
        )
        requests = counting.dynamodb_total()
        print(f"  DynamoDB requests    {requests:8d}  ({requests / max(1, claimed):.2f} per claim)")
