"""run_task's CPU outside the DynamoDB request path, per part: ``python -m bench pushcpu``.

Runs, N times (``AMSG_BENCH_PUSHCPU_TASKS``, 2,000), the work a fixed-text one-shot delivery does besides its
storage requests, in the order the record handler does it: the SQS record's parse, the stored payload's and the
push subscription's decryption, the push's generation, the outbox row's encryption, the push's JSON, the Web
Push request (RFC 8291 record, VAPID header, the HTTP POST to a loopback push service that decrypts and
VAPID-checks it), the delivery's log line and metrics. Each part is timed on the calling thread's CPU clock
(``time.thread_time_ns``), so the push service's own CPU (another thread) is not counted. Prints µs per task by
part. ``AMSG_BENCH_PUSHCPU_PROFILE=<file>`` also writes a cProfile of the loop.
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PARTS = (
    "sqs record",
    "payload decrypt",
    "subscription decrypt",
    "generate pushes",
    "outbox row encrypt",
    "push JSON",
    "push record (RFC 8291)",
    "VAPID header",
    "HTTP POST",
    "log line (INFO)",
    "metrics",
)


class _Parts:
    """CPU nanoseconds per part on this thread."""

    def __init__(self) -> None:
        self.ns = dict.fromkeys(PARTS, 0)

    def time[T](self, part: str, call: Callable[[], T]) -> T:
        started = time.thread_time_ns()
        result = call()
        self.ns[part] += time.thread_time_ns() - started
        return result


def run(tasks: int = 2_000) -> dict[str, Any]:
    """µs of this thread's CPU per task and part, and the pushes the loopback service accepted."""
    from amsg.adapters.webpush_sender import WebPushSender
    from amsg.engine.messages import TaskMessage
    from amsg.jsonio import dumps
    from amsg.observability import metric_batch
    from amsg.vapid import generate_vapid_keys

    from tests.support.fake_push import FakePushService

    public, private = generate_vapid_keys()
    parts = _Parts()
    profile_path = os.environ.get("AMSG_BENCH_PUSHCPU_PROFILE")
    profile = cProfile.Profile() if profile_path else None
    due_ms = 1_790_000_000_000
    bodies = [dumps(TaskMessage(str(uuid.uuid4()), str(uuid.uuid4()), 1, due_ms).to_body()) for _ in range(tasks)]
    sender = WebPushSender(private, public, "bench@example.test")
    with _info_logs(), FakePushService(vapid_public_key=public) as push, sender:
        task = _Task(sender, [push.subscribe().to_json() for _ in range(50)])
        task.run(_Parts(), bodies[0], 0)  # the pool's connection, the VAPID token
        push.clear()
        if profile is not None:
            profile.enable()
        with metric_batch():
            for index, body in enumerate(bodies):
                task.run(parts, body, index)
        if profile is not None and profile_path:
            profile.disable()
            profile.dump_stats(profile_path)
        accepted = len(push.wait_for(tasks, timeout_s=30.0))
    per_task = {part: ns / tasks / 1000 for part, ns in parts.ns.items()}
    return {"tasks": tasks, "accepted": accepted, "us_per_task": per_task}


class _Task:
    """One fixed-text one-shot delivery's work besides its storage requests, part by part."""

    def __init__(self, sender: Any, subscriptions: list[dict[str, Any]]) -> None:
        from amsg.crypto import UserCodec, compact_json

        self.sender = sender
        self.codec = UserCodec.derive("d" * 64, str(uuid.uuid4()))
        payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": "到点了", "metadata": {}}
        self.stored_payload = self.codec.encrypt(compact_json(payload))
        self.subscriptions = [self.codec.encrypt(compact_json(sub)) for sub in subscriptions]

    def run(self, parts: _Parts, body: str, index: int) -> None:
        from amsg import jsonio
        from amsg.adapters.webpush_sender import _parse_subscription, encrypt_aes128gcm
        from amsg.crypto import compact_json
        from amsg.domain.splitting import split_message
        from amsg.engine.messages import parse_task_message
        from amsg.engine.pushes import Occurrence, content_pushes, encode_push
        from amsg.observability import emit_metric, logger

        codec = self.codec
        message = parts.time("sqs record", lambda: _sqs(body, parse_task_message))
        payload = parts.time("payload decrypt", lambda: codec.decrypt_payload(self.stored_payload))
        stored = self.subscriptions[index % len(self.subscriptions)]
        sub = parts.time("subscription decrypt", lambda: jsonio.loads(codec.decrypt(stored)))
        occurrence = Occurrence(index + 1, message.uuid, message.next_send_at_ms)
        text = str(payload["userMessage"])
        now_ms = message.next_send_at_ms
        pushes = parts.time(
            "generate pushes", lambda: content_pushes(payload, occurrence, split_message(text, None), now_ms)
        )
        parts.time("outbox row encrypt", lambda: [codec.encrypt(compact_json(push)) for push in pushes])
        data = parts.time("push JSON", lambda: encode_push(pushes[0]))
        endpoint, ua_public, auth = _parse_subscription(sub)
        record = parts.time("push record (RFC 8291)", lambda: encrypt_aes128gcm(data, ua_public, auth))
        authorization = parts.time("VAPID header", lambda: self.sender._authorization(endpoint))
        parts.time("HTTP POST", lambda: _post(self.sender, endpoint, record, authorization))
        parts.time("log line (INFO)", lambda: _log_delivered(logger, message.uuid, now_ms))
        parts.time("metrics", lambda: emit_metric("DeliveryLatency", "Milliseconds", 12.0))


@contextlib.contextmanager
def _info_logs() -> Iterator[None]:
    """Lambda's log level (INFO; the bench's environment says WARNING), the lines written to /dev/null: their
    cost, not the terminal's."""
    from amsg.observability import logger

    previous_level = logger.log_level
    handlers = [handler for handler in logger.handlers if isinstance(handler, logging.StreamHandler)]
    with open(os.devnull, "w") as devnull:
        streams = [handler.setStream(devnull) for handler in handlers]
        logger.setLevel(logging.INFO)
        try:
            yield
        finally:
            for handler, stream in zip(handlers, streams, strict=True):
                handler.setStream(stream)
            logger.setLevel(previous_level)


def _sqs(body: str, parse: Callable[[str], Any]) -> Any:
    """One parse of the body: the batch's grouping by user and the record handler share it."""
    return parse(body)


def _log_delivered(logger: Any, uuid_text: str, now_ms: int) -> None:
    """The record's ``task delivered`` line with the summary a one-shot delivery logs."""
    from amsg.engine.summary import DeliverySummary

    summary = DeliverySummary(total_tasks=1, success_count=1, deleted_once_off=1)
    result = summary.as_dict(started_ms=now_ms, now_ms=now_ms + 40)
    result["taskUuid"] = uuid_text
    logger.info("task delivered", extra={"summary": result})


def _post(sender: Any, endpoint: str, record: bytes, authorization: str) -> int:
    headers = {
        "Content-Type": "application/octet-stream",
        "Content-Encoding": "aes128gcm",
        "TTL": "86400",
        "Authorization": authorization,
    }
    status: int = sender._post(endpoint, record, headers, 10.0)
    return status


def handler_cpu(tasks: int = 1_000, batch_size: int = 5) -> dict[str, Any]:
    """The real run_task handler (powertools batch processing, the engine, the push sender) on the in-memory
    stores of the tests: µs of CPU per delivered task with no DynamoDB client at all. The in-memory stores keep
    no coalescer, so a batch's records run one after the other on this thread and its CPU clock sees them all
    (the push service's own CPU, on its threads, is not counted)."""
    from amsg import runtime
    from amsg.crypto import compact_json
    from amsg.engine.tick import run_tick
    from amsg.ports import NewTask
    from amsg.vapid import generate_vapid_keys

    from bench.sandboxes import invocation, sqs_event
    from tests.support.ddb_engine import MemoryQueue
    from tests.support.fake_push import FakePushService
    from tests.support.fakes import memory_context
    from tests.support.inprocess import load_handler_module

    public, private = generate_vapid_keys()
    env = {"AMSG_TABLE_NAME": "bench", "AMSG_MASTER_KEY": "d" * 64, "AMSG_VAPID_PUBLIC_KEY": public}
    env.update(AMSG_VAPID_PRIVATE_KEY=private, AMSG_VAPID_EMAIL="bench@example.test", AMSG_PUSH_PACING_MS="0")
    queue, t0_ms = MemoryQueue(), 1_790_000_000_000
    ctx = memory_context(env, t0_ms, queue=queue)
    runtime.use(ctx)
    module = load_handler_module(Path(__file__).resolve().parents[1] / "functions/run_task/run_task_handler.py")
    payload = compact_json({"contactName": "Rei", "messageType": "fixed", "userMessage": "到点了", "metadata": {}})
    with _info_logs(), FakePushService(vapid_public_key=public) as push, open(os.devnull, "w") as devnull:
        for index in range(tasks + batch_size):
            user = str(uuid.UUID(int=index // 5 + 1, version=4))
            codec = ctx.codec(user)
            if index % 5 == 0:
                ctx.subscriptions.put_push_subscription(
                    user, codec.encrypt(compact_json(push.subscribe().to_json())), 1
                )
            ctx.tasks.create_task(
                NewTask(user, str(uuid.uuid4()), codec.encrypt(payload), "fixed", t0_ms + 60_000, t0_ms)
            )
        ctx.clock.current_ms = t0_ms + 61_000  # type: ignore[attr-defined]
        run_tick(ctx)
        bodies = [json.dumps(queue.items.get_nowait()) for _ in range(queue.items.qsize())]
        batches = [bodies[i : i + batch_size] for i in range(0, len(bodies), batch_size)]
        with contextlib.redirect_stdout(devnull):  # the metric documents' cost, not the terminal's
            module.handler(sqs_event(batches[0]), invocation("run_task", 900))  # the connection, the token
            started = time.thread_time_ns()
            for batch in batches[1:]:
                module.handler(sqs_event(batch), invocation("run_task", 900))
            cpu_ns = time.thread_time_ns() - started
        accepted = len(push.wait_for(len(bodies), timeout_s=30.0))
    runtime.use(None)
    delivered = len(bodies) - len(batches[0])
    return {"tasks": delivered, "accepted": accepted, "us_per_task": cpu_ns / max(1, delivered) / 1000}


def main() -> None:
    tasks = int(os.environ.get("AMSG_BENCH_PUSHCPU_TASKS", "2000"))
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    result = run(tasks)
    print(f"\npushcpu: {tasks} tasks, {result['accepted']} pushes accepted, load average {' '.join(loadavg)}")
    total = sum(result["us_per_task"].values())
    for part, us in result["us_per_task"].items():
        print(f"  {part:<24} {us:8.1f} µs per task")
    print(f"  {'total':<24} {total:8.1f} µs per task")
    whole = handler_cpu(tasks)
    print(
        f"  the run_task handler on in-memory stores (no DynamoDB client): {whole['us_per_task']:8.1f} µs per task"
        f" ({whole['tasks']} tasks in batches of 5, {whole['accepted']} pushes accepted)"
    )
