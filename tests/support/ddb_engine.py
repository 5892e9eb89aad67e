"""The delivery engine wired to DynamoDB Local with in-memory fakes for the non-DynamoDB ports, so races are
decided by DynamoDB's conditional writes alone (the thing under test)."""

from __future__ import annotations

import functools
import json
import queue as queue_lib
import threading
import uuid
from collections import Counter
from typing import Any

from amsg import runtime
from amsg.clock import FixedClock
from amsg.context import DeliveryPorts

MASTER_KEY = "a" * 64
T0_MS = 1_893_369_600_000


class MemoryQueue:
    """TaskQueue port fake: thread-safe FIFO of message bodies."""

    def __init__(self) -> None:
        self.items: queue_lib.Queue[dict[str, Any]] = queue_lib.Queue()

    def send_many(self, messages: list[dict[str, Any]]) -> list[int]:
        for message in messages:
            self.items.put(json.loads(json.dumps(message)))
        return []

    def backlog(self) -> int | None:
        return self.items.qsize()


class Killed(BaseException):
    """Simulates the Lambda sandbox dying mid-delivery (not an Exception: nothing in the engine catches it)."""


class RecordingPushSender:
    """PushSender port fake: records every push it accepts; can kill the worker at a chosen push."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[dict[str, Any]] = []
        self.kill_before: set[str] = set()
        self.kill_after: set[str] = set()
        self.statuses: list[int] = []  # answers for the next pushes (non-2xx raise PushSendError)
        self.late: set[str] = set()  # accepted, but the answer comes after the sender's timeout (unconfirmed)

    def send(self, subscription: Any, payload: bytes | str, **_: Any) -> int:
        push = json.loads(payload)
        message_id = push["messageId"]
        with self.lock:
            if message_id in self.kill_before:
                self.kill_before.discard(message_id)
                raise Killed(message_id)
            status = self.statuses.pop(0) if self.statuses else 201
            if status >= 300:
                from amsg.failures import PushSendError

                raise PushSendError(f"Web Push delivery failed: {status}", status=status)
            self.sent.append(push)
            if message_id in self.late:
                from amsg.failures import PushSendError

                raise PushSendError("Web Push delivery failed: ReadTimeout", unconfirmed=True)
            if message_id in self.kill_after:
                self.kill_after.discard(message_id)
                raise Killed(message_id)
        return 201

    def counts(self) -> Counter[str]:
        """Pushes per (task, message id): message ids embed per-user task ids, so they repeat across users."""
        with self.lock:
            return Counter(f"{p['taskUuid']}/{p['messageId']}" for p in self.sent)


def seed_fixed_task(
    ctx,
    user: str,
    message: str,
    *,
    recurrence: str = "none",
    due_ms: int = T0_MS + 60_000,
    subscription: dict[str, Any] | None = None,
) -> str:
    """A fixed-text task of ``user`` due at ``due_ms``, created through the task store after the user's push
    subscription (``https://push.invalid/x`` unless given); returns its uuid."""
    from amsg.crypto import compact_json, encrypt_for_storage
    from amsg.ports import NewTask

    key = ctx.user_key(user)
    sub = subscription or {"endpoint": "https://push.invalid/x", "keys": {}}
    ctx.subscriptions.put_push_subscription(user, encrypt_for_storage(compact_json(sub), key), 1)
    task_uuid = str(uuid.uuid4())
    payload = {
        "contactName": "Rei",
        "messageType": "fixed",
        "userMessage": message,
        "recurrenceType": recurrence,
        "metadata": {},
    }
    stored = encrypt_for_storage(compact_json(payload), key)
    ctx.tasks.create_task(NewTask(user, task_uuid, stored, "fixed", due_ms, T0_MS))
    return task_uuid


def ddb_context(endpoint: str, table: str, **env_overrides: str):
    env = {
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "AMSG_TABLE_NAME": table,
        "AMSG_MASTER_KEY": MASTER_KEY,
        "AMSG_VAPID_PUBLIC_KEY": "BPublic",
        "AMSG_VAPID_EMAIL": "ops@example.test",
        "AMSG_VAPID_PRIVATE_KEY": "private",
        "AMSG_PUSH_PACING_MS": "0",
        **env_overrides,
    }
    ctx = runtime.build_context(env)
    ctx.clock = FixedClock(T0_MS)
    return ctx


def with_fakes(
    ctx, sender: RecordingPushSender, queue: MemoryQueue, llm: Any = None, claim_queue: MemoryQueue | None = None
) -> None:
    """Fakes for the push service, the task queue (and the claim queue: the tick then fans claims out)."""
    make_llm = ctx.delivery.make_llm if llm is None else (lambda: llm)
    ctx.delivery = DeliveryPorts(
        make_push_sender=lambda: sender,
        make_llm=make_llm,
        make_queue=lambda: queue,
        make_claim_queue=lambda: claim_queue,
    )


def consume(ctx, queue: MemoryQueue, stop: threading.Event, *, duplicate: bool = True, batch_size: int = 5) -> None:
    """One run_task consumer draining ``queue`` until ``stop`` is set and the queue is empty, in SQS-sized
    batches whose records run together as in production (``run_together``: concurrent, sharing round trips).
    With ``duplicate`` every message is in its batch twice, as SQS's at-least-once delivery may hand it over
    again (here at the same time, on the same sandbox: the hardest case for exactly-once)."""
    from amsg.engine.messages import parse_task_message
    from amsg.engine.run_task import run_message, run_together

    while not (stop.is_set() and queue.items.empty()):
        try:
            bodies = [queue.items.get(timeout=0.05)]
        except queue_lib.Empty:
            continue
        while len(bodies) < batch_size:
            try:
                bodies.append(queue.items.get_nowait())
            except queue_lib.Empty:
                break
        messages = [parse_task_message(json.dumps(body)) for body in bodies]
        if duplicate:
            messages += messages
        # a user's records run in order on one worker; the copies get keys of their own so that they run at the
        # same time as the originals, as on two sandboxes
        keys = [f"{m.user_id}#{i >= len(bodies)}" if m is not None else None for i, m in enumerate(messages)]
        run_together(
            ctx,
            [
                functools.partial(
                    run_message,
                    ctx,
                    message,
                    remaining_ms=lambda: 100_000,
                    owner=f"consumer:{threading.get_ident()}:{i}",
                )
                for i, message in enumerate(messages)
            ],
            keys=keys,
        )


def race(ctx, queue: MemoryQueue, *, ticks: int = 2, consumers: int = 2, duplicate: bool = True) -> list[dict]:
    """``ticks`` racing ticks feeding ``consumers`` racing consumers; returns the ticks' summaries once the
    queue is drained."""
    from amsg.engine.tick import run_tick

    stop = threading.Event()
    summaries: list[dict] = []
    consumer_threads = [
        threading.Thread(target=consume, args=(ctx, queue, stop), kwargs={"duplicate": duplicate})
        for _ in range(consumers)
    ]
    tick_threads = [
        threading.Thread(target=lambda i=i: summaries.append(run_tick(ctx, owner=f"tick-{i}"))) for i in range(ticks)
    ]
    for thread in consumer_threads + tick_threads:
        thread.start()
    for thread in tick_threads:
        thread.join()
    stop.set()
    for thread in consumer_threads:
        thread.join()
    return summaries
