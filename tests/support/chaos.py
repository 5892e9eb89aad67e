"""Fault-injection runs on the local stack: DynamoDB faults, a failing push service and sandbox kills, counted
per segment (the ``bench chaos`` runs and ``tests/e2e/test_chaos.py``).

A run seeds N one-shot tasks of two segments, each for its own user and push subscription, through the
stack's DynamoDB directly (never through the fault proxy), makes them due, turns the mode's faults on and ticks
(``POST /_local/tick``) until every task is settled or the run's wall budget is spent. When a round settles
nothing, the stack's clock moves forward by ``step_ms`` (past the run lease, into the retry back-offs), at most
``max_steps`` times (the total stays under the hour after which a late task is expired unsent), and the queue's
visibility timeout is shortened to ``visibility_s`` so that failed or killed batches come back within the run.
Then every segment is classified from what the push service accepted and what the table holds.
"""

from __future__ import annotations

import time
import urllib.error
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from amsg_local.ddb_faults import FaultPlan
from amsg_local.sandbox_kills import SandboxKiller

from tests.support.push_faults import PushFaultPlan

SEGMENTS = ("第一句。", "第二句！")
# what a chaos stack changes from the template's settings (and says so): no pacing between the two pushes,
# a push timeout short enough that a slow accept or a hang costs seconds, not ten
STACK_SETTINGS = {"AMSG_PUSH_PACING_MS": "0", "AMSG_PUSH_TIMEOUT_MS": "3000"}
CATEGORIES = ("once", "duplicated", "lost", "outbox", "failed", "pending")


@dataclass(frozen=True)
class Mode:
    """One fault mode: a DynamoDB fault plan, a push fault plan (built per run) and/or sandbox kills."""

    name: str
    what: str
    ddb: FaultPlan | None = None
    push: dict[str, float] = field(default_factory=dict)
    kill_rate: float = 0.0  # chance, every kill_interval_s, that one busy run_task sandbox is killed
    kill_interval_s: float = 0.5
    max_kills: int | None = None


def modes(outage_s: float = 60.0, seed: int = 7, *, small: bool = False) -> dict[str, Mode]:
    """Every fault mode of ``bench chaos``, by name (``outage_s``: the DynamoDB outage's length). ``small``: the
    rates of the test-suite versions, high enough that a run of ten tasks meets every fault."""
    k = 3.0 if small else 1.0  # 10% -> 30%, 2% -> 6%, ...

    def ddb(**rates: float) -> FaultPlan:
        return FaultPlan(seed=seed, **{kind: round(rate * k, 4) for kind, rate in rates.items()})

    def push(rate: float) -> float:
        return round(rate * 1.5, 4) if small else rate

    plans = (
        Mode("none", "no fault (the control)"),
        Mode("ddb-throttle", f"{10 * k:g}% of DynamoDB requests throttled", ddb(throttle=0.1)),
        Mode("ddb-500", f"{10 * k:g}% answered 500 InternalServerError", ddb(error=0.1)),
        Mode("ddb-drop", f"{10 * k:g}% applied, then the answer dropped", ddb(drop=0.1)),
        Mode("ddb-latency", f"{2 * k:g}% held 11 s (past the 10 s read timeout)", ddb(latency=0.02)),
        Mode("ddb-30", "30%: throttle, 500 and drop, 10% each", ddb(throttle=0.1 / k, error=0.1 / k, drop=0.1 / k)),
        Mode("ddb-outage", f"DynamoDB down {outage_s:g} s as delivery starts", FaultPlan(outage_s=outage_s)),
        Mode("push-429", f"{100 * push(0.2):g}% of pushes 429 with Retry-After", push={"rate_limited": push(0.2)}),
        Mode("push-5xx", f"{100 * push(0.2):g}% of pushes 500/502/503", push={"server_error": push(0.2)}),
        Mode("push-410", f"{100 * push(0.1):g}% of subscriptions gone (410)", push={"gone": push(0.1)}),
        Mode("push-hang", f"{100 * push(0.1):g}% of pushes never answered", push={"hang": push(0.1)}),
        Mode("push-slow", f"{100 * push(0.1):g}% accepted, 201 after the timeout", push={"slow_accept": push(0.1)}),
        Mode(
            "kills",
            "busy run_task sandboxes SIGKILLed, " + ("3, 0.05 s apart" if small else "p=0.3 every 0.5 s, up to 100"),
            kill_rate=1.0 if small else 0.3,
            kill_interval_s=0.05 if small else 0.5,
            max_kills=3 if small else 100,
        ),
    )
    return {mode.name: mode for mode in plans}


@dataclass
class Seeded:
    user: str
    uuid: str
    endpoint_id: str


@dataclass
class Result:
    mode: str
    tasks: int
    counts: Counter[str]
    samples: list[str]  # up to five tasks not pushed once, described (duplicated, lost or pending first)
    seconds: float
    ticks: int
    clock_moved_ms: int
    injected: dict[str, int]

    @property
    def ok(self) -> bool:
        return self.counts["duplicated"] == 0 and self.counts["lost"] == 0 and self.counts["pending"] == 0


def direct_context(stack: Any) -> Any:
    """The layer's context on the stack's table, straight to DynamoDB (around the fault proxy)."""
    from amsg import runtime

    env = stack.function_environment()
    if stack.dynamodb_endpoint:
        env["AWS_ENDPOINT_URL_DYNAMODB"] = stack.dynamodb_endpoint
    return runtime.build_context(env)


def clock_ms(stack: Any, advance_ms: int = 0) -> int:
    return int(stack.post_local("/_local/clock", {"advanceMs": advance_ms})["nowMs"])


def seed_tasks(stack: Any, push: Any, count: int, *, message: str = "".join(SEGMENTS)) -> tuple[int, list[Seeded]]:
    """``count`` one-shot tasks due in an hour (stack clock), one user and subscription each; ``(due_ms, tasks)``."""
    from amsg.crypto import compact_json, encrypt_for_storage
    from amsg.ports import NewTask

    ctx = direct_context(stack)
    now_ms = clock_ms(stack)
    due_ms = now_ms + 3_600_000
    payload = compact_json({"contactName": "Rei", "messageType": "fixed", "userMessage": message, "metadata": {}})

    def one(_: int) -> Seeded:
        user, task_uuid = str(uuid.uuid4()), str(uuid.uuid4())
        key = ctx.user_key(user)
        subscription = push.subscribe()
        ctx.subscriptions.put_push_subscription(user, encrypt_for_storage(compact_json(subscription.to_json()), key), 1)
        new = NewTask(user, task_uuid, encrypt_for_storage(payload, key), "fixed", due_ms, now_ms)
        ctx.tasks.create_task(new)
        return Seeded(user, task_uuid, subscription.endpoint_id)

    with ThreadPoolExecutor(8) as pool:
        return due_ms, list(pool.map(one, range(count)))


def _settled(ctx: Any, task: Seeded) -> bool:
    row = ctx.tasks.get_task(task.user, task.uuid)
    return row is None or row.status == "failed"


def _tick(stack: Any) -> None:
    try:
        stack.post_local("/_local/tick")
    except urllib.error.HTTPError:
        pass  # a tick that failed (DynamoDB down past the SDK's retries): the next round ticks again


def drive(
    stack: Any, tasks: list[Seeded], *, budget_s: float, step_ms: int = 150_000, max_steps: int = 16
) -> tuple[int, int]:
    """Tick until every task is settled (or ``budget_s`` ran out); ``(ticks, clock_moved_ms)``."""
    ctx = direct_context(stack)
    remaining = list(tasks)
    ticks = steps = 0
    deadline = time.monotonic() + budget_s
    with ThreadPoolExecutor(8) as pool:
        while remaining and time.monotonic() < deadline:
            _tick(stack)
            ticks += 1
            settled = list(pool.map(lambda task: _settled(ctx, task), remaining))
            progressed = any(settled)
            remaining = [task for task, done in zip(remaining, settled, strict=True) if not done]
            if remaining and not progressed:
                if steps < max_steps:
                    clock_ms(stack, step_ms)
                    steps += 1
                time.sleep(1.0)  # failed and killed batches come back after the queue's visibility timeout
    return ticks, steps * step_ms


def _segment(accepted: int, row: Any, in_outbox: bool, unsettled: bool) -> str:
    if accepted > 1:
        return "duplicated"
    if unsettled:  # pushed or not, its task is not finished (left pending or sent)
        return "pending"
    if accepted == 1:
        return "once"
    if row is not None and row.status == "failed" and row.last_error:
        return "failed"
    return "outbox" if in_outbox else "lost"


def classify(stack: Any, push: Any, tasks: list[Seeded]) -> tuple[Counter[str], list[str]]:
    """Per segment: pushed once, duplicated, failed visibly (the task ``failed`` with ``lastError``), waiting in
    the outbox (not accepted by the push service, unacked in the outbox), pending (its task neither deleted nor
    failed: unfinished, whether the segment went out or not), lost (none of these)."""
    ctx = direct_context(stack)
    accepted: Counter[tuple[str, int]] = Counter()
    for key, count in push.accepted_counts().items():
        task_uuid, _, message_id = key.partition("/")
        accepted[(task_uuid, int(message_id.rsplit("_", 1)[1]))] += count
    now_ms = ctx.now_ms()

    def one(task: Seeded) -> tuple[list[str], str]:
        row = ctx.tasks.get_task(task.user, task.uuid)
        rows = ctx.outbox.list_unacked(task.user, 0, 50, now_ms)
        # one task per user: every row of the user is this task's (index from the id: msg_task_<id>@<occ>_<i>)
        waiting = {int(r.message_id.rsplit("_", 1)[1]) for r in rows if r.delivered_at is None}
        unsettled = row is not None and row.status != "failed"
        kinds = [_segment(accepted[(task.uuid, i)], row, i in waiting, unsettled) for i in range(len(SEGMENTS))]
        return kinds, _describe(task, row, rows, [accepted[(task.uuid, i)] for i in range(len(SEGMENTS))])

    counts: Counter[str] = Counter(dict.fromkeys(CATEGORIES, 0))
    broken: list[str] = []
    other: list[str] = []  # waiting in the outbox or failed: accounted for, still worth a look
    with ThreadPoolExecutor(8) as pool:
        for kinds, description in pool.map(one, tasks):
            counts.update(kinds)
            if set(kinds) != {"once"}:
                sample = broken if {"duplicated", "lost", "pending"} & set(kinds) else other
                sample.append(f"{'/'.join(kinds)}: {description}")
    return counts, (broken + other)[:5]


def _describe(task: Seeded, row: Any, rows: list[Any], accepted: list[int]) -> str:
    """What a broken task looks like (for a report): its row, its outbox rows, the pushes accepted."""
    state = "deleted" if row is None else f"{row.status} retry={row.retry_count} lastError={row.last_error!r}"
    outbox = [
        f"{r.message_id}(sending={r.sending_at is not None} delivered={r.delivered_at is not None}"
        f" unconfirmed={getattr(r, 'unconfirmed_at', None) is not None})"
        for r in rows
    ]
    return f"task {task.uuid} {state}; outbox {outbox or 'empty'}; accepted per segment {accepted}"


@contextmanager
def chaos_stack() -> Iterator[tuple[Any, Any]]:
    """``(stack, push)``: the local stack with its handlers' DynamoDB behind a (quiet) fault proxy, process
    sandboxes warmed at start, the chaos settings, and the fake push service that records every push."""
    from tests.support.e2e_stack import stack_with_push

    with stack_with_push("c" * 64, dynamodb_faults=FaultPlan(), warm=True, **STACK_SETTINGS) as (stack, push):
        yield stack, push


def run_mode(
    stack: Any, push: Any, mode: Mode, count: int, *, budget_s: float = 600.0, visibility_s: int = 10, seed: int = 7
) -> Result:
    """Seed ``count`` tasks, deliver them under ``mode``'s faults, count every segment."""
    stack.client("sqs").set_queue_attributes(
        QueueUrl=stack.queue_url, Attributes={"VisibilityTimeout": str(visibility_s)}
    )
    due_ms, tasks = seed_tasks(stack, push, count)
    clock_ms(stack, due_ms - clock_ms(stack) + 1_000)
    plan = PushFaultPlan(seed=seed, **mode.push) if mode.push else None
    killer = None
    if mode.kill_rate:
        consumer = stack.gateway.ticks.tick_then_drain.consumer_function
        function = stack.gateway.runtime.function(consumer)
        killer = SandboxKiller(
            function, rate=mode.kill_rate, interval_s=mode.kill_interval_s, seed=seed, max_kills=mode.max_kills
        )
    proxy = stack.dynamodb_faults
    started = time.monotonic()
    push.faults = plan
    if proxy is not None and mode.ddb is not None:
        proxy.set_plan(mode.ddb)
    before = dict(proxy.counts()) if proxy is not None else {}
    try:
        if killer is not None:
            killer.start()
        ticks, moved = drive(stack, tasks, budget_s=budget_s)
    finally:
        if killer is not None:
            killer.stop()
        push.faults = None
        if proxy is not None:
            proxy.clear()
    seconds = time.monotonic() - started
    injected = dict(plan.injected) if plan is not None else {}
    if proxy is not None:
        injected.update({k: v - before.get(k, 0) for k, v in proxy.counts().items() if v - before.get(k, 0)})
    if killer is not None:
        injected["kills"] = killer.kills
    counts, samples = classify(stack, push, tasks)
    return Result(mode.name, count, counts, samples, seconds, ticks, moved, injected)
