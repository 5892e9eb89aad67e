"""Local stand-ins for EventBridge Scheduler (the tick) and the SQS event source mapping (run_task).

``LocalDelivery`` is the default ``tick_then_drain`` of the gateway: it invokes the tick function with the
ScheduleV2 input from the template and, while it runs and until the queue is empty, drains the task queue into
the SQS consumer the way the event source mapping does (it polls all the time on AWS, so records are processed
while the tick is still enqueuing): up to the template's ``ScalingConfig.MaximumConcurrency`` pollers, each
receiving up to ``BatchSize`` records and invoking the consumer (so that many invocations run in parallel), with
Lambda's partial-batch semantics (``ReportBatchItemFailures``): only records not listed in ``batchItemFailures`` are
deleted; a raised error, a timeout or a malformed response fails the whole batch. Failed records stay in the
queue and come back after the queue's visibility timeout, and go to the DLQ after ``maxReceiveCount``, exactly
as on AWS (so they are not retried within the same drain).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from amsg_local.lambda_runtime import Invocation, LambdaRuntime
from amsg_local.tables import LocalQueue, claim_queue_logical_id, task_queue_logical_id
from amsg_local.template import TemplateError, function_events, functions_with_event

__all__ = [
    "LocalDelivery",
    "TickNotConfigured",
    "TickRunner",
    "consumer_concurrency",
    "partial_batch_failures",
    "sqs_event",
]

log = logging.getLogger("local_stack.delivery")

TickThenDrain = Callable[[], dict[str, Any]]


class TickNotConfigured(RuntimeError):
    """The tick or run_task handler does not exist (yet): ``POST /_local/tick`` answers 501."""


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _invocation_summary(invocation: Invocation, *, include_value: bool = True) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "function": invocation.function,
        "requestId": invocation.request_id,
        "ok": invocation.ok,
        "durationMs": round(invocation.duration_ms, 1),
    }
    if invocation.ok and include_value:
        summary["result"] = _jsonable(invocation.value)
    if not invocation.ok:
        summary["error"] = {"type": invocation.error_type, "message": invocation.error_message}
    return summary


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str = "us-east-1") -> dict[str, Any]:
    """The event Lambda's SQS event source mapping builds from ReceiveMessage results."""
    records = []
    for message in messages:
        attributes = {key: str(value) for key, value in (message.get("Attributes") or {}).items()}
        message_attributes = {}
        for name, attr in (message.get("MessageAttributes") or {}).items():
            entry: dict[str, Any] = {
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": attr.get("DataType", "String"),
            }
            if "StringValue" in attr:
                entry["stringValue"] = attr["StringValue"]
            if "BinaryValue" in attr:
                entry["binaryValue"] = base64.b64encode(attr["BinaryValue"]).decode("ascii")
            message_attributes[name] = entry
        records.append(
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message.get("Body", ""),
                "attributes": attributes,
                "messageAttributes": message_attributes,
                "md5OfBody": message.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
        )
    return {"Records": records}


def partial_batch_failures(invocation: Invocation, message_ids: list[str]) -> set[str]:
    """Which records failed, by Lambda's rules for ``ReportBatchItemFailures``.

    Error, timeout, a non-object response, or one naming an unknown/empty ``itemIdentifier`` → the whole
    batch failed.
    ``None``, ``{}``, or an empty ``batchItemFailures`` → every record succeeded.
    """
    every = set(message_ids)
    if not invocation.ok:
        return every
    value = invocation.value
    if value is None:
        return set()
    if not isinstance(value, Mapping):
        return every  # not an object: Lambda treats an invalid response as a complete failure
    failures = value.get("batchItemFailures")
    if failures is None:
        return set()
    if not isinstance(failures, list):
        return every
    failed: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, Mapping) else None
        if not isinstance(identifier, str) or identifier not in every:
            return every
        failed.add(identifier)
    return failed


# The SQS event source mapping's default when ScalingConfig.MaximumConcurrency is not set is "as many as the
# account allows"; locally that would be one thread per batch, so we stop at a sane number.
DEFAULT_CONSUMER_CONCURRENCY = 5


# In provisioned mode each event poller drives up to about ten concurrent invocations (AWS's figure), and
# ``MaximumPollers`` is then what bounds the function's concurrency.
INVOCATIONS_PER_POLLER = 10


def consumer_concurrency(template: Mapping[str, Any], logical_id: str) -> int:
    """The SQS event's ``ScalingConfig.MaximumConcurrency`` (parameter defaults applied; 2..1000 on AWS), or in
    provisioned mode ``ProvisionedPollerConfig.MaximumPollers`` x the invocations one poller drives."""
    for props in function_events(template, logical_id, "SQS"):
        scaling = props.get("ScalingConfig") or {}
        if isinstance(scaling, Mapping) and scaling.get("MaximumConcurrency") is not None:
            return max(1, int(scaling["MaximumConcurrency"]))
        pollers = props.get("ProvisionedPollerConfig") or {}
        if isinstance(pollers, Mapping) and pollers.get("MaximumPollers") is not None:
            return max(1, int(pollers["MaximumPollers"])) * INVOCATIONS_PER_POLLER
    return DEFAULT_CONSUMER_CONCURRENCY


class LocalDelivery:
    """The default ``tick_then_drain`` for a template with a scheduled tick and an SQS consumer."""

    def __init__(
        self,
        template: Mapping[str, Any],
        runtime: LambdaRuntime,
        sqs_client: Any,
        queue: LocalQueue,
        *,
        region: str = "us-east-1",
        max_batches: int = 100_000,
        concurrency: int | None = None,
        clock: Any = None,
        claim_queue: LocalQueue | None = None,
    ) -> None:
        self.clock = clock  # the stack's movable clock: the tick's scheduled time follows POST /_local/clock
        self.template = template
        self.runtime = runtime
        self.sqs = sqs_client
        self.queue = queue
        self.region = region
        self.max_batches = max_batches
        scheduled = functions_with_event(template, "ScheduleV2") + functions_with_event(template, "Schedule")
        self.tick_function = scheduled[0] if scheduled else None
        try:
            self.consumer_function: str | None = task_queue_logical_id(template)[0]
        except TemplateError:
            self.consumer_function = None
        if concurrency is not None:
            self.concurrency = max(1, concurrency)
        elif self.consumer_function is not None:
            self.concurrency = consumer_concurrency(template, self.consumer_function)
        else:
            self.concurrency = DEFAULT_CONSUMER_CONCURRENCY
        if self.consumer_function is not None and runtime.handler_file(self.consumer_function).is_file():
            consumer = runtime.function(self.consumer_function)  # every poller needs a sandbox of its own
            consumer.max_sandboxes = max(consumer.max_sandboxes, self.concurrency)
        # the claim queue and its claimer (claim fan-out): the tick's jobs are claimed there, the claimed tasks
        # land in the task queue; both drained at once, as their event source mappings would
        self.claim_queue = claim_queue
        claimer = claim_queue_logical_id(template) if claim_queue is not None else None
        self.claimer_function: str | None = claimer[0] if claimer else None
        self.claim_concurrency = consumer_concurrency(template, claimer[0]) if claimer else 0
        if self.claimer_function is not None and runtime.handler_file(self.claimer_function).is_file():
            function = runtime.function(self.claimer_function)
            function.max_sandboxes = max(function.max_sandboxes, self.claim_concurrency)
        self._input = self._schedule_input()
        self._drain_lock = threading.Lock()  # one drain at a time: a tick's drain waits for the event source's
        self._source_stop = threading.Event()
        self._source: threading.Thread | None = None

    def start_event_source(self, interval_s: float = 0.5) -> None:
        """Poll the queue in the background, as the event source mapping does on AWS, so messages enqueued
        outside a tick (the multi-tenant line's ``send-notifications``) are delivered without one. A tick's own
        drain still returns only once the queue is empty (the two never drain at the same time)."""
        if self._source is not None or self.consumer_function is None:
            return

        def loop() -> None:
            while not self._source_stop.wait(interval_s):
                try:
                    self.drain()
                except Exception as exc:  # the next poll tries again; a broken consumer is reported by its drain
                    log.warning("local event source: %s", exc)

        self._source = threading.Thread(target=loop, name="amsg-local-event-source", daemon=True)
        self._source.start()

    def stop_event_source(self, timeout_s: float = 10.0) -> None:
        self._source_stop.set()
        source, self._source = self._source, None
        if source is not None:
            source.join(timeout_s)

    def _schedule_input(self) -> str | None:
        if not self.tick_function:
            return None
        for kind in ("ScheduleV2", "Schedule"):
            for props in function_events(self.template, self.tick_function, kind):
                given = props.get("Input")
                if isinstance(given, str):
                    return given
        return None

    def missing(self) -> str | None:
        """Why this cannot run yet (None when both handler files exist)."""
        roles = [("tick", self.tick_function), ("SQS consumer", self.consumer_function)]
        if self.claim_queue is not None:
            roles.append(("claimer", self.claimer_function))
        for role, logical_id in roles:
            if logical_id is None:
                return f"the template has no {role} function"
            path = self.runtime.handler_file(logical_id)
            if not path.is_file():
                return f"{logical_id} handler {path.name} does not exist yet"
        return None

    def tick_event(self, now: datetime | None = None) -> dict[str, Any]:
        """What EventBridge Scheduler sends: the template's Input with its context attributes filled in."""
        if now is None:
            now = datetime.fromtimestamp(self.clock.now_ms() / 1000, UTC) if self.clock else datetime.now(UTC)
        moment = now.replace(microsecond=0)
        scheduled_time = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        execution_id = uuid.uuid4().hex[:16]
        if self._input is None:
            return {"scheduledTime": scheduled_time, "executionId": execution_id}
        text = (
            self._input.replace("<aws.scheduler.scheduled-time>", scheduled_time)
            .replace("<aws.scheduler.execution-id>", execution_id)
            .replace("<aws.scheduler.attempt-number>", "0")
            .replace(
                "<aws.scheduler.schedule-arn>",
                f"arn:aws:scheduler:{self.region}:123456789012:schedule/default/{self.tick_function}",
            )
        )
        event: dict[str, Any] = json.loads(text)
        return event

    def tick(self) -> dict[str, Any]:
        assert self.tick_function is not None
        invocation = self.runtime.invoke(self.tick_function, self.tick_event())
        return _invocation_summary(invocation)

    def drain(self, producer_done: threading.Event | None = None) -> dict[str, Any]:
        """Feed the queue to the consumer until nothing is visible, with ``concurrency`` pollers in parallel.

        Each poller receives one batch, invokes the consumer and deletes the records that did not fail, then
        polls again; it stops when a receive comes back empty (failed records stay invisible until their
        visibility timeout, so they are not retried within this drain) or after ``max_batches`` in total.
        While ``producer_done`` is not set (the tick still runs), an empty receive long-polls and tries again.
        """
        assert self.consumer_function is not None
        with self._drain_lock:
            if self.claim_queue is None or self.claimer_function is None:
                return self._drain(self.consumer_function, self.queue, self.concurrency, producer_done)
            claims_done = threading.Event()  # the task queue's producers: the claimers, until the claim queue is empty
            claimed: dict[str, Any] = {}

            def claim() -> None:
                try:
                    assert self.claim_queue is not None and self.claimer_function is not None
                    claimed.update(
                        self._drain(self.claimer_function, self.claim_queue, self.claim_concurrency, producer_done)
                    )
                finally:
                    claims_done.set()

            claimers = threading.Thread(target=claim, name="amsg-local-claim-drain", daemon=True)
            claimers.start()
            drained = self._drain(self.consumer_function, self.queue, self.concurrency, claims_done)
            claimers.join()
            return {**drained, "claimer": claimed}

    def _drain(
        self, consumer: str, queue: LocalQueue, concurrency: int, producer_done: threading.Event | None
    ) -> dict[str, Any]:
        totals: dict[str, Any] = {"function": consumer, "batches": 0, "received": 0, "deleted": 0, "failed": 0}
        errors: list[dict[str, Any]] = []
        results: list[Any] = []
        lock = threading.Lock()

        def poll() -> None:
            while True:
                with lock:
                    if totals["batches"] >= self.max_batches:
                        return
                    totals["batches"] += 1
                finished = producer_done is None or producer_done.is_set()
                response = self.sqs.receive_message(
                    QueueUrl=queue.url,
                    MaxNumberOfMessages=max(1, min(queue.batch_size, 10)),
                    WaitTimeSeconds=0 if finished else 1,
                    MessageSystemAttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
                messages = response.get("Messages") or []
                if not messages:
                    with lock:
                        totals["batches"] -= 1
                    if finished:
                        return
                    continue
                ids = [message["MessageId"] for message in messages]
                invocation = self.runtime.invoke(consumer, sqs_event(messages, queue.arn, self.region))
                failed = partial_batch_failures(invocation, ids)
                succeeded = [message for message in messages if message["MessageId"] not in failed]
                for start in range(0, len(succeeded), 10):
                    chunk = succeeded[start : start + 10]
                    self.sqs.delete_message_batch(
                        QueueUrl=queue.url,
                        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
                    )
                with lock:
                    totals["received"] += len(messages)
                    totals["deleted"] += len(succeeded)
                    totals["failed"] += len(failed)
                    if not invocation.ok:
                        errors.append(_invocation_summary(invocation))
                    elif invocation.value is not None:
                        results.append(_jsonable(invocation.value))

        with ThreadPoolExecutor(concurrency, thread_name_prefix=f"sqs-poller-{consumer}") as pool:
            for future in [pool.submit(poll) for _ in range(concurrency)]:
                future.result()
        return {**totals, "concurrency": concurrency, "errors": errors, "results": results}

    def __call__(self) -> dict[str, Any]:
        reason = self.missing()
        if reason:
            raise TickNotConfigured(reason)
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def tick() -> None:
            try:
                outcome["tick"] = self.tick()
            except BaseException as exc:  # re-raised below, after the pollers stopped
                outcome["error"] = exc
            finally:
                done.set()

        thread = threading.Thread(target=tick, name="amsg-local-tick-invoke", daemon=True)
        thread.start()
        drained = self.drain(producer_done=done)
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return {"tick": outcome["tick"], "runTask": drained}


class TickRunner:
    """Runs ``tick_then_drain`` on demand and, with ``interval_s > 0``, every ``interval_s`` in a daemon thread.

    One run at a time: a manual ``POST /_local/tick`` waits for a periodic run in progress (and vice versa).
    """

    def __init__(self, tick_then_drain: TickThenDrain | None, interval_s: float = 0.0) -> None:
        self.tick_then_drain = tick_then_drain
        self.interval_s = interval_s
        self._run_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False
        # the last run, for `amsg status`: {"atMs" (wall clock), "summary"} or {"atMs", "error"}
        self.last_run: dict[str, Any] | None = None

    def run_once(self) -> dict[str, Any]:
        if self.tick_then_drain is None:
            raise TickNotConfigured("no tick_then_drain was configured for this gateway")
        with self._run_lock:
            try:
                result = self.tick_then_drain()
            except Exception as exc:
                self.last_run = {"atMs": int(time.time() * 1000), "error": type(exc).__name__}
                raise
            self.last_run = {"atMs": int(time.time() * 1000), "summary": result}
            return result

    def start(self) -> None:
        if self.interval_s <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="amsg-local-tick", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                summary = self.run_once()
            except TickNotConfigured as exc:
                if not self._warned:
                    log.warning("periodic tick skipped: %s", exc)
                    self._warned = True
                continue
            except Exception:
                log.exception("periodic tick failed")
                continue
            run_task = summary.get("runTask") or {}
            if run_task.get("received") or not (summary.get("tick") or {}).get("ok", True):
                log.info("tick: %s", json.dumps(summary, default=str)[:2000])

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)
