"""The Lambda sandboxes of the delivery benchmarks, each a process of its own: run_task consumers and claimers
taking SQS-shaped batches from multiprocessing queues (what SQS is between the tick, the claimers and run_task),
failed records going back to their queue, CPU measured from the first record on."""

from __future__ import annotations

import cProfile
import json
import os
import queue as queue_lib
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench import calltimes

ROOT = Path(__file__).resolve().parents[1]


def invocation(function_name: str, timeout_s: int) -> Any:
    """A Lambda context whose remaining time runs down from the function's timeout, as on AWS (the tick stops
    claiming on its time margin, a record hands its claim back when too little time is left)."""
    from tests.support.inprocess import LambdaContext

    deadline = time.monotonic() + timeout_s

    class Invocation(LambdaContext):
        def get_remaining_time_in_millis(self) -> int:
            return max(0, int((deadline - time.monotonic()) * 1000))

    return Invocation(function_name=function_name, remaining_ms=timeout_s * 1000, aws_request_id=str(uuid.uuid4()))


class MpQueue:
    """TaskQueue port over a multiprocessing queue (what SQS is between the tick and the run_task sandboxes)."""

    def __init__(self, inbox: Any) -> None:
        self.inbox = inbox

    def send_many(self, messages: list[dict[str, Any]]) -> list[int]:
        for message in messages:
            self.inbox.put(json.dumps(message))
        return []

    def backlog(self) -> int | None:
        return self.inbox.qsize()


def sqs_event(bodies: list[str]) -> dict[str, Any]:
    """An SQS event source batch as Lambda delivers it to run_task."""
    return {
        "Records": [
            {
                "messageId": str(i),
                "receiptHandle": str(i),
                "body": text,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "0"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:bench",
                "awsRegion": "us-east-1",
            }
            for i, text in enumerate(bodies)
        ]
    }


HANDLERS = {"run_task": "functions/run_task/run_task_handler.py", "claimer": "functions/claimer/claimer_handler.py"}


class SharedOffsetClock:
    """A clock every process shares: wall time plus an offset in a ``multiprocessing.Value`` that the bench moves
    (``bench spike`` jumps from one zone's 08:00 to the next)."""

    def __init__(self, offset: Any) -> None:
        self.offset = offset

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + int(self.offset.value)


def consumer(
    env: dict[str, str],
    offset_ms: Any,
    queues: dict[str, Any],
    batch_size: int,
    timeout_s: int,
    results: Any,
    function: str = "run_task",
) -> None:
    """One sandbox of ``function`` (run_task or the claimer): the real handler, SQS-shaped batches from
    ``queues[function]`` (``offset_ms``: the clock's offset, fixed or a shared ``multiprocessing.Value``),
    failed records go back to it; the handler's own queues are ``queues["run_task"]`` (the
    task queue) and ``queues["claimer"]`` (the claim queue). A claimer reports when each job ran (seconds since
    the epoch) and what it claimed: the claim timeline."""
    os.environ.update(env)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (the handlers' metric lines would drown the report)
    from amsg import runtime
    from amsg.clock import OffsetClock

    from tests.support.inprocess import load_handler_module

    ctx = runtime.build_context(dict(os.environ))
    ctx.clock = SharedOffsetClock(offset_ms) if hasattr(offset_ms, "value") else OffsetClock(offset_ms=offset_ms)
    use_mp_queues(ctx, queues)
    runtime.use(ctx)
    # a Lambda init: the handler module's runtime.prepare() does its init-phase work (the table's client, the
    # push stack's imports) during the import, not in the sandbox's first batch
    os.environ["AWS_LAMBDA_INITIALIZATION_TYPE"] = "on-demand"
    module = load_handler_module(ROOT / HANDLERS[function])
    if function == "run_task":
        _ = ctx.delivery.push_sender  # built on a sandbox's first push (its Web Push stack): warm on AWS at 08:00
    if "ready" in queues:  # imported and warm, as Lambda's pollers are before a spike
        queues["ready"].put(function)
    inbox = queues[function]
    handled = redelivered = 0
    call_times = calltimes.wanted()
    busy_s, first, last = 0.0, 0.0, 0.0
    jobs: list[tuple[float, float, int]] = []
    cpu_start: float | None = None
    # AMSG_BENCH_PROFILE=<dir>: each sandbox writes a cProfile of its handler calls there (where the CPU goes)
    profile_dir = os.environ.get("AMSG_BENCH_PROFILE")
    profile = cProfile.Profile() if profile_dir else None
    while True:
        bodies = _batch(inbox, batch_size)
        if not bodies:
            break
        if cpu_start is None:
            cpu_start = time.process_time()  # CPU of the run only, not of the imports above
        if profile is not None:
            profile.enable()
        began = time.time()
        result = module.handler(sqs_event(bodies), invocation(function, timeout_s))
        if profile is not None:
            profile.disable()
        ended = time.time()
        busy_s, first, last = busy_s + ended - began, first or began, ended
        if function == "claimer":
            jobs.append((began, ended, result["summary"]["claimedTasks"]))
        for failure in result.get("batchItemFailures", []):
            inbox.put(bodies[int(failure["itemIdentifier"])])
            redelivered += 1
        handled += len(bodies)
    cpu_s = time.process_time() - cpu_start if cpu_start is not None else 0.0
    if profile is not None and profile_dir:
        profile.dump_stats(os.path.join(profile_dir, f"{function}-{os.getpid()}.prof"))
    results.put(
        {
            "function": function,
            "handled": handled,
            "redelivered": redelivered,
            "cpu_s": cpu_s,
            "jobs": jobs,
            "calls": call_times.snapshot() if call_times else None,
            "busy_s": busy_s,
            "span_s": last - first,
        }
    )


def wait_ready(queues: dict[str, Any], count: int, timeout_s: float = 300.0) -> None:
    """Until ``count`` sandboxes have imported their handler (a busy machine takes its time)."""
    for _ in range(count):
        queues["ready"].get(timeout=timeout_s)


def _batch(inbox: Any, batch_size: int) -> list[str]:
    """Up to ``batch_size`` bodies: waits for the first; empty once the queue says stop (None, passed on)."""
    body = inbox.get()
    if body is None:
        return []
    bodies = [body]
    while len(bodies) < batch_size:
        try:
            more = inbox.get_nowait()
        except queue_lib.Empty:
            break
        if more is None:
            inbox.put(None)
            break
        bodies.append(more)
    return bodies


def use_mp_queues(ctx: Any, queues: dict[str, Any]) -> None:
    """``ctx`` enqueues to the bench's process queues (the task queue, and the claim queue when there is one)."""
    from amsg.context import DeliveryPorts

    delivery = ctx.delivery
    ctx.delivery = DeliveryPorts(
        make_push_sender=delivery.make_push_sender,
        make_llm=delivery.make_llm,
        make_queue=lambda: MpQueue(queues["run_task"]),
        make_claim_queue=lambda: MpQueue(queues["claimer"]) if "claimer" in queues else None,
    )
