"""DynamoDB requests per delivered task, by operation, on moto and on DynamoDB Local.

For each kind of task (one-shot, recurring, two segments, LLM-generated) a set of users schedule one task each
through the real schedule route (in process), then the real tick claims them and ``run_message`` (what the
run_task handler calls per SQS record) delivers them: once with every record alone, once in SQS-sized batches
run together as the handler does (``run_together``: the records share round trips). Every DynamoDB request
the tick and run_task make is counted by operation and divided by the tasks delivered. The figure for records
alone must be the same on both backends: it is the request pattern of the code, not a property of the
emulator.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench import counting

USERS = int(__import__("os").environ.get("AMSG_BENCH_USERS", "20"))
T0_MS = 1_893_369_600_000
FIRST = "2030-01-01T00:00:00.000Z"  # one day after T0
DUE_MS = T0_MS + 86_400_000 + 1_000

SCENARIOS: dict[str, dict[str, Any]] = {
    "one-shot": {"userMessage": "早上好"},
    "recurring": {"userMessage": "早上好", "recurrenceType": "daily"},
    "two-segment": {"userMessage": "早上好。今天也要加油！"},
    # a task of a cloud-data owner appends through the owner-guarded outbox path (not folded); a user with a
    # frequency cap ("_policy", set before scheduling) reads the policy in the same batch read
    "owned one-shot": {"userMessage": "早上好", "owner": {"type": "character", "id": "rei", "label": "Rei"}},
    "capped one-shot": {
        "userMessage": "早上好",
        "_policy": {"quietHours": None, "caps": [{"scope": "character", "max": 1000, "windowMinutes": 1440}]},
    },
    "LLM": {
        "messageType": "prompted",
        "completePrompt": "say hi",
        "apiUrl": "https://llm.invalid/v1",
        "apiKey": "sk-bench-0123456789",
        "primaryModel": "m",
    },
}


class _Llm:
    """LlmClient port: answers at once (this bench counts storage requests, not LLM latency)."""

    def complete(self, request: Any, *, timeout_s: float) -> Any:
        from amsg.ports import LlmReply

        return LlmReply(content="你好。", reasoning=None, raw_status=200)


def _env(table: str, endpoint: str | None) -> dict[str, str]:
    env = {
        "AMSG_TABLE_NAME": table,
        "AMSG_MASTER_KEY": "c" * 64,
        "AMSG_VAPID_PUBLIC_KEY": "BPublic",
        "AMSG_VAPID_EMAIL": "bench@example.test",
        "AMSG_VAPID_PRIVATE_KEY": "private",
        "AMSG_PUSH_PACING_MS": "0",
    }
    if endpoint:
        env["AWS_ENDPOINT_URL_DYNAMODB"] = endpoint
        if os.environ.get("AMSG_DYNAMO_STATEMENTS"):  # the single writes' form to measure (default: statements)
            env["AMSG_DYNAMO_STATEMENTS"] = os.environ["AMSG_DYNAMO_STATEMENTS"]
    else:  # moto runs no conditional PartiQL: its single writes go one request each (DynamoDB Local's: statements)
        env["AMSG_DYNAMO_STATEMENTS"] = "off"
    return env


def measure(table: str, endpoint: str | None, batch_size: int = 1) -> dict[str, dict[str, Any]]:
    """Per scenario: requests per task by operation for schedule and for delivery (tick + run_task), each SQS
    batch of ``batch_size`` records run together as the run_task handler does (1: every record alone); also
    the units (split by table and index) and the wall time of each phase, for ``bench cost``."""
    import time

    from amsg import runtime
    from amsg.clock import FixedClock

    from tests.support.ddb_engine import MemoryQueue, RecordingPushSender, with_fakes
    from tests.support.inprocess import InProcessApi
    from tests.support.wire_client import WireClient, dummy_subscription

    results: dict[str, dict[str, Any]] = {}
    for name, fields in SCENARIOS.items():
        ctx = runtime.build_context(_env(table, endpoint))
        ctx.clock = FixedClock(T0_MS)
        runtime.use(ctx)
        sender, queue = RecordingPushSender(), MemoryQueue()
        with_fakes(ctx, sender, queue, llm=_Llm())
        transport = InProcessApi()
        clients = []
        for _ in range(USERS):
            client = WireClient(transport, str(uuid.uuid4()))
            client.init()
            client.put_subscription(dummy_subscription("https://push.invalid/x"))
            if "_policy" in fields:
                assert client.put_delivery_policy(fields["_policy"]).status == 200
            clients.append(client)
        counting.reset()
        started = time.perf_counter()
        for client in clients:
            extra = {k: v for k, v in fields.items() if not k.startswith("_")}
            payload = {"contactName": "Rei", "messageType": "fixed", "firstSendTime": FIRST, **extra}
            response = client.schedule(payload)
            assert response.status == 201, response.text
        schedule_s = time.perf_counter() - started
        schedule = _dynamodb_calls()
        with counting._lock:
            schedule_detail = dict(counting.unit_detail)
        schedule_billed = counting.billed()
        ctx.clock.current_ms = DUE_MS
        result = deliver(ctx, queue, batch_size)
        runtime.use(None)
        pushes = Counter(f"{p['taskUuid']}/{p['messageId']}" for p in sender.sent)
        results[name] = {
            **result,
            "schedule": {op: n / USERS for op, n in schedule.items()},
            "schedule_detail": {k: n / USERS for k, n in schedule_detail.items()},
            "schedule_billed": {k: n / USERS for k, n in schedule_billed.items()},
            "schedule_s": schedule_s / USERS,
            "pushes": sum(pushes.values()),
            "duplicates": sum(n - 1 for n in pushes.values()),
        }
    return results


def run_batch(ctx: Any, bodies: list[dict[str, Any]], *, tenant_keys: bool = False) -> int:
    """``run_message`` over one SQS batch's bodies run together, as the run_task handler does (with the tenant
    keys it shares between a batch's records on the multi-tenant line); the tasks delivered."""
    import functools

    from amsg.engine.messages import parse_task_message
    from amsg.engine.run_task import run_message, run_together

    shared: dict[str, Any] = {"tenant_keys": {}} if tenant_keys else {}
    jobs = [
        functools.partial(
            run_message,
            ctx,
            parse_task_message(json.dumps(body)),
            remaining_ms=lambda: 100_000,
            owner=f"b{i}",
            **shared,
        )
        for i, body in enumerate(bodies)
    ]
    return sum(result.get("successCount", 0) for result in run_together(ctx, jobs))


def deliver(ctx: Any, queue: Any, batch_size: int, tenant_keys: bool = False) -> dict[str, Any]:
    """The real tick, then ``run_message`` over the queue in batches of ``batch_size`` run together (what the
    run_task handler does per SQS batch); requests, units and wall times per delivered task."""
    import time

    from amsg.engine.tick import run_tick

    counting.reset()
    started = time.perf_counter()
    summary = run_tick(ctx)
    tick_s = time.perf_counter() - started
    delivered, batches, run_s = 0, 0, 0.0
    while not queue.items.empty():
        batch = [queue.items.get_nowait() for _ in range(min(batch_size, queue.items.qsize()))]
        started = time.perf_counter()
        delivered += run_batch(ctx, batch, tenant_keys=tenant_keys)
        run_s += time.perf_counter() - started
        batches += 1
    calls = _dynamodb_calls()
    with counting._lock:
        units, detail = dict(counting.units), dict(counting.unit_detail)
    billed = counting.billed()
    per = max(1, delivered)
    return {
        "deliver": {op: n / per for op, n in calls.items()},
        "units": {kind: n / per for kind, n in units.items()},
        "deliver_detail": {k: n / per for k, n in detail.items()},
        "billed": {k: n / per for k, n in billed.items()},
        "delivered": delivered,
        "claimed": summary["claimedTasks"],
        "tick_s": tick_s / per,
        "run_s": run_s / per,
        "batches": batches / per,
    }


def _dynamodb_calls() -> Counter[str]:
    with counting._lock:
        return Counter({k.split(".", 1)[1]: n for k, n in counting.calls.items() if k.startswith("dynamodb.")})


@contextmanager
def moto_backend() -> Iterator[tuple[str, str | None]]:
    import boto3
    from amsg_local.tables import create_tables_from_template
    from amsg_local.template import load_template
    from moto import mock_aws

    with mock_aws():
        create_tables_from_template(boto3.client("dynamodb", region_name="us-east-1"), load_template(), "bench")
        yield "bench", None


@contextmanager
def ddb_local_backend() -> Iterator[tuple[str, str | None]]:
    from bench.ddb import dynamodb_local_table

    with dynamodb_local_table("bench-requests") as endpoint_url:
        yield "bench-requests", endpoint_url


def _line(counts: dict[str, float]) -> str:
    total = sum(counts.values())
    parts = ", ".join(f"{op} {n:.2f}" for op, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{total:5.2f}  ({parts})"


def main() -> None:
    counting.install()
    backends: list[tuple[str, Callable[[], Any]]] = [("moto", moto_backend), ("DynamoDB Local", ddb_local_backend)]
    totals: dict[str, dict[str, float]] = {}
    print(f"== DynamoDB requests per delivered task ({USERS} users, one push service, pacing 0)")
    from bench.capacity import template_defaults

    batch_size = template_defaults()["batch_size"]
    for label, backend in backends:
        with backend() as (table, endpoint):
            results = measure(table, endpoint)
            batched = measure(table, endpoint, batch_size)
        print(f"  {label}")
        for name, result in results.items():
            deliver, schedule = result["deliver"], result["schedule"]
            totals.setdefault(name, {})[label] = sum(deliver.values())
            print(f"    {name:15s} deliver  {_line(deliver)}   (each record alone)")
            print(
                f"    {'':15s} deliver  {_line(batched[name]['deliver'])}   (SQS batches of {batch_size}, records"
                f" together; {batched[name]['duplicates']} duplicates)"
            )
            capacity = result["units"]
            if label == "DynamoDB Local":  # moto reports no units for transactions, so its figure means nothing
                print(
                    f"    {'':15s} units    read {capacity.get('read', 0.0):5.2f},"
                    f" write {capacity.get('write', 0.0):5.2f} per delivered task (as DynamoDB Local reports them:"
                    " one item per multi-item transaction and nothing for PartiQL statements, so writes are low;"
                    " `bench cost` bills them)"
                )
            print(
                f"    {'':15s} schedule {_line(schedule)}"
                f"   [{result['delivered']} delivered, {result['pushes']} pushes, {result['duplicates']} duplicates]"
            )
    if os.environ.get("AMSG_DYNAMO_STATEMENTS", "on").strip().lower() != "off":
        print(
            "  backends not compared: moto sends each single write (a claim, a mark) as its own request, DynamoDB"
            " Local several as one statement batch (AMSG_DYNAMO_STATEMENTS=off sends them alike, and compares)"
        )
        return
    same = all(len({round(v, 2) for v in by_backend.values()}) == 1 for by_backend in totals.values())
    print(f"  same figure on both backends (each record alone): {'yes' if same else 'NO'}")
    print(
        "  (in a batch, how many calls share a request depends on when the records reach them; paths with extra"
        " reads, such as the owned one, may merge less on one backend than on the other)"
    )
