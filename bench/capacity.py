"""Capacity run: N due one-shot tasks on DynamoDB Local, delivered by the real tick and run_task handlers to a
loopback push service that decrypts every push (RFC 8291) and checks its VAPID token (RFC 8292).

Like AWS: the tick handler runs once a minute (EventBridge Scheduler) with the template's TickClaimLimit; the
run_task handler runs in ``RunTaskMaxConcurrency`` separate processes (Lambda sandboxes), each taking SQS-shaped
batches of ``BatchSize`` records, failed records going back to the queue. Tasks are seeded straight into the
table (two requests each, like the schedule route) with a due time in the future, then every process's clock
is moved so that the run starts at the due time. Printed: time from due to the last push, tasks/s, duplicates,
lost tasks and the ratio to the reference server's 50 claims per one-minute tick.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing as mp
import os
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import calltimes, jfr
from bench.sandboxes import SharedOffsetClock, consumer, invocation, sqs_event, use_mp_queues, wait_ready

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_PER_MINUTE = 50
TICK_EVERY_S = 60.0
DEADLINE_S = 240.0


def template_defaults() -> dict[str, int]:
    from amsg_local.template import load_template

    template = load_template()
    params = template.get("Parameters", {})
    resources = template.get("Resources", {})

    def batch_size(name: str) -> int:
        events = (resources.get(name, {}).get("Properties", {}).get("Events") or {}).values()
        return next((int(e["Properties"].get("BatchSize", 10)) for e in events if e.get("Type") == "SQS"), 10)

    def default(name: str, fallback: int) -> int:
        return int(params.get(name, {}).get("Default", fallback))

    default_timeout = int(template.get("Globals", {}).get("Function", {}).get("Timeout", 3))

    def timeout_s(name: str) -> int:
        return int(resources.get(name, {}).get("Properties", {}).get("Timeout", default_timeout))

    return {
        "concurrency": default("RunTaskMaxConcurrency", 5),
        "claim_limit": default("TickClaimLimit", 5000),
        "claimers": default("ClaimerMaxConcurrency", 0) if "ClaimerFunction" in resources else 0,
        "claim_page_size": default("ClaimPageSize", 500),
        "claim_backlog_limit": default("ClaimBacklogLimit", 20_000),
        "batch_size": batch_size("RunTaskFunction"),
        "claimer_batch_size": batch_size("ClaimerFunction"),
        "tick_timeout_s": timeout_s("TickFunction"),
        "run_task_timeout_s": timeout_s("RunTaskFunction"),
        "claimer_timeout_s": timeout_s("ClaimerFunction"),
    }


def start_sandboxes(spawn: Any, env: dict[str, str], offset_ms: Any, defaults: dict[str, int]) -> tuple:
    """The run_task sandboxes (``RunTaskMaxConcurrency``) and the claimers (``ClaimerMaxConcurrency``) as
    processes, each polling its queue: (queues by function, the results queue, the processes)."""
    queues = {"run_task": spawn.Queue(), "ready": spawn.Queue()}
    if defaults["claimers"]:
        queues["claimer"] = spawn.Queue()
    results = spawn.Queue()
    plan = [("run_task", defaults["concurrency"], defaults["batch_size"], defaults["run_task_timeout_s"])]
    if defaults["claimers"]:
        plan.append(("claimer", defaults["claimers"], defaults["claimer_batch_size"], defaults["claimer_timeout_s"]))
    processes = [
        spawn.Process(target=consumer, args=(env, offset_ms, queues, batch, timeout, results, function), daemon=True)
        for function, count, batch, timeout in plan
        for _ in range(count)
    ]
    for process in processes:
        process.start()
    wait_ready(queues, len(processes))
    return queues, results, processes


def stop_sandboxes(queues: dict[str, Any], results: Any, processes: list[Any]) -> list[dict[str, Any]]:
    """Tell every sandbox to stop (one None each on its queue) and collect what each one did."""
    for inbox in queues.values():
        for _ in processes:
            inbox.put(None)
    stats = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=10)
    return stats


def _warm_up(ctx: Any, push: Any, seed: Any, tasks: int, defaults: dict[str, int]) -> float:
    """Deliver ``tasks`` unrelated one-shot tasks (their own users) through the tick and run_task handlers in this
    process before the run, so that DynamoDB Local's JVM has compiled its delivery code paths (conditional claims,
    batch reads, transactions) before the measured minute. DynamoDB on AWS has no such warm-up; without it, JIT
    compilation took ~15–20 % of the JVM's CPU during the run (Java Flight Recorder). The run_task sandboxes of
    the run itself still start cold. Returns the seconds it took."""
    from amsg import runtime
    from amsg.context import DeliveryPorts
    from amsg.timeutil import iso_from_ms

    from tests.support.ddb_engine import MemoryQueue
    from tests.support.inprocess import load_handler_module

    began = time.perf_counter()
    queue = MemoryQueue()
    delivery = ctx.delivery
    ctx.delivery = DeliveryPorts(
        make_push_sender=delivery.make_push_sender, make_llm=delivery.make_llm, make_queue=lambda: queue
    )
    runtime.use(ctx)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the handlers' metric lines would drown the report
            seed(tasks, ctx.now_ms())
            tick = load_handler_module(ROOT / "functions/tick/tick_handler.py")
            run_task = load_handler_module(ROOT / "functions/run_task/run_task_handler.py")
            tick.handler(
                {"scheduledTime": iso_from_ms(ctx.now_ms())},
                invocation("tick", defaults["tick_timeout_s"]),
            )
            bodies = []
            while not queue.items.empty():
                bodies.append(json.dumps(queue.items.get_nowait()))
            batch_size = defaults["batch_size"]
            for start in range(0, len(bodies), batch_size):
                run_task.handler(
                    sqs_event(bodies[start : start + batch_size]),
                    invocation("run_task", defaults["run_task_timeout_s"]),
                )
    finally:
        ctx.delivery = delivery
        push.clear()
    return time.perf_counter() - began


def _loop_ms() -> float:
    """This machine's speed right now: the best of five runs of a fixed pure-Python loop, in ms. On a shared VM it
    drifts (the same loop took 1.0–1.7× as long within an hour here), and every figure of the run drifts with it."""
    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        best = min(best, time.perf_counter() - began)
    return best * 1000


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of another process (``/proc/<pid>/stat``; 0 where there is no /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mb(pid: int) -> float:
    """Another process's peak resident memory in MB (``VmHWM`` in ``/proc/<pid>/status``; 0 without /proc)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith("VmHWM:")), 0.0)


def run(tasks: int = 10_000, users: int = 1_000, warm_up: int = 1_000, recording: Path | None = None) -> dict[str, Any]:
    import boto3
    from amsg import runtime
    from amsg.crypto import compact_json, encrypt_for_storage
    from amsg.ports import NewTask
    from amsg.timeutil import iso_from_ms
    from amsg.vapid import generate_vapid_keys
    from amsg_local.dynamodb_local import start_dynamodb_local
    from amsg_local.progress import Progress
    from amsg_local.tables import create_tables_from_template
    from amsg_local.template import load_template

    from tests.support.fake_push import FakePushService
    from tests.support.inprocess import load_handler_module

    defaults = template_defaults()
    public, private = generate_vapid_keys()
    server = start_dynamodb_local(jvm_options=(jfr.recording_option(recording),) if recording else ())
    spawn = mp.get_context("spawn")
    try:
        client = boto3.client("dynamodb", endpoint_url=server.endpoint_url, region_name="us-east-1")
        create_tables_from_template(client, load_template(), "capacity")
        env = {
            **bench_environment(server.endpoint_url, "capacity", "d" * 64, (public, private), defaults),
            "AMSG_TICK_CLAIM_LIMIT": str(defaults["claim_limit"]),
        }
        os.environ.update(env)
        ctx = runtime.build_context(dict(os.environ))
        with FakePushService(vapid_public_key=public) as push:
            due_ms = ctx.now_ms() + 3_600_000
            seeded_at = time.perf_counter()
            per_user = max(1, tasks // users)

            payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": "到点了", "metadata": {}}

            def seed(count: int, due_ms: int) -> None:
                """``count`` one-shot tasks due at ``due_ms``, ``per_user`` for each new user (and its push
                subscription)."""
                user_ids = [str(uuid.uuid4()) for _ in range(-(-count // per_user))]

                def seed_user(user: str) -> None:
                    key = ctx.user_key(user)
                    subscription = compact_json(push.subscribe().to_json())
                    ctx.subscriptions.put_push_subscription(user, encrypt_for_storage(subscription, key), 1)
                    for _ in range(per_user):
                        ctx.tasks.create_task(
                            NewTask(
                                user,
                                str(uuid.uuid4()),
                                encrypt_for_storage(compact_json(payload), key),
                                "fixed",
                                due_ms,
                                ctx.now_ms(),
                                one_shot=True,  # as the schedule route creates a one-shot
                            )
                        )

                with ThreadPoolExecutor(max_workers=16) as pool:
                    list(pool.map(seed_user, user_ids))

            seed(users * per_user, due_ms)
            seed_s = time.perf_counter() - seeded_at
            warm_s = _warm_up(ctx, push, seed, warm_up, defaults) if warm_up else 0.0

            loadavg = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
            loop_ms_before = _loop_ms()
            # from here on every clock says: the run starts at the due time
            offset = spawn.Value("q", 0)  # every process's clock: moved below, once the sandboxes are warm
            tick_module = load_handler_module(ROOT / "functions/tick/tick_handler.py")
            runtime.use(ctx)
            queues, results, consumers = start_sandboxes(spawn, env, offset, defaults)
            wall_start_ms = time.time_ns() // 1_000_000 + 1_000
            offset.value = due_ms - wall_start_ms
            ctx.clock = SharedOffsetClock(offset)
            use_mp_queues(ctx, queues)
            time.sleep(max(0.0, wall_start_ms / 1000 - time.time()))
            started = time.time()
            java_cpu, own_cpu = _process_cpu_s(server.pid), time.process_time()
            ticks: list[dict[str, Any]] = []

            def scheduler(stop: threading.Event) -> None:
                while not stop.is_set():
                    began = time.time() - started
                    ticks.append(
                        tick_module.handler(
                            {"scheduledTime": iso_from_ms(ctx.now_ms())},
                            invocation("tick", defaults["tick_timeout_s"]),
                        )
                    )
                    ticks[-1]["_window"] = (began, time.time() - started)
                    stop.wait(max(0.0, started + len(ticks) * TICK_EVERY_S - time.time()))

            stop = threading.Event()
            ticker = threading.Thread(target=scheduler, args=(stop,), daemon=True)
            ticker.start()
            progress = Progress()  # on a terminal only: the figures printed at the end stay the output
            while len(push.received) < tasks and time.time() - started < DEADLINE_S:
                progress.update(f"capacity: {len(push.received)}/{tasks} pushed, {time.time() - started:.0f} s")
                time.sleep(0.5)
            progress.done()
            received = push.received
            java_cpu, own_cpu = _process_cpu_s(server.pid) - java_cpu, time.process_time() - own_cpu
            stop.set()
            stats = stop_sandboxes(queues, results, consumers)
            ticker.join(timeout=60)
            loop_ms_after = _loop_ms()
            java_rss_mb = _peak_rss_mb(server.pid)
    finally:
        server.stop()
    last = max((r.received_at for r in received), default=started)
    ok = [r for r in received if r.payload is not None and r.vapid.ok]
    per_task = Counter(r.payload.get("taskUuid") for r in ok)
    return {
        "tasks": tasks,
        "users": users,
        "seed_s": seed_s,
        "warm_up": warm_up,
        "warm_s": warm_s,
        "concurrency": defaults["concurrency"],
        "batch_size": defaults["batch_size"],
        "claim_limit": defaults["claim_limit"],
        "ticks": len(ticks),
        "claimers": defaults["claimers"],
        "claimed": sum(t.get("claimedTasks", 0) for t in ticks) + sum(j[2] for s in stats for j in s["jobs"]),
        "to_last_push_s": last - started,
        "window": (started, last),
        "delivered": len(per_task),
        "duplicates": sum(n - 1 for n in per_task.values()),
        "lost": tasks - len(per_task),
        "rejected": len(received) - len(ok),
        "redelivered": sum(s["redelivered"] for s in stats if s["function"] == "run_task"),
        "java_rss_mb": java_rss_mb,
        "cpu_s": {
            "DynamoDB Local (JVM)": java_cpu,
            "run_task processes": sum(s["cpu_s"] for s in stats if s["function"] == "run_task"),
            "claimer processes": sum(s["cpu_s"] for s in stats if s["function"] == "claimer"),
            "bench process (tick, push service, relay)": own_cpu,
        },
        "stats": stats,
        # each claim job: (s after due it started, s it ended, tasks it claimed)
        "claim_jobs": sorted((a - started, b - started, n) for s in stats for a, b, n in s["jobs"]),
        "cores": os.cpu_count() or 1,
        "loadavg": " ".join(loadavg),
        "loop_ms": (loop_ms_before, loop_ms_after),
        # when each tick ran (s after due) and what it claimed; pushes received per 10 s after due
        "tick_windows": [
            (*t["_window"], t.get("claimedTasks", 0), (t.get("details") or {}).get("stoppedBy")) for t in ticks
        ],
        "pushes_per_10s": Counter(int((r.received_at - started) // 10) for r in received),
    }


def print_timelines(result: dict[str, Any]) -> None:
    """When the ticks ran, when the claims happened (the claim timeline: tasks claimed per 10 s, by the tick
    itself or by the claim jobs it fanned out), and the pushes per 10 s with the idle buckets among them."""
    ticks = ", ".join(
        f"{a:.0f}–{b:.0f} s: {n}" + (f" (stopped by its {why})" if why else "")
        for a, b, n, why in result["tick_windows"]
    )
    print(f"  ticks (seconds after due: claimed by the tick itself)  {ticks}")
    jobs = result["claim_jobs"]
    if jobs:
        claims: Counter[int] = Counter()
        for _, end, n in jobs:
            claims[int(end // 10)] += n
        span = f"{jobs[0][0]:.1f}–{max(end for _, end, _ in jobs):.1f} s"
        print(f"  claim jobs {len(jobs)} ({span} after due); claimed per 10 s  {_timeline(claims)}")
    buckets = result["pushes_per_10s"]
    idle = sum(1 for i in range(max(buckets, default=0)) if not buckets.get(i))
    print(f"  pushes per 10 s after due   {_timeline(buckets)}   ({idle} idle bucket(s) before the last push)")


def _timeline(buckets: Counter[int]) -> str:
    return " ".join(str(buckets.get(i, 0)) for i in range(max(buckets, default=0) + 1))


def main(tasks: int | None = None) -> None:
    tasks = tasks or int(os.environ.get("AMSG_BENCH_CAPACITY_TASKS", "10000"))
    warm_up = int(os.environ.get("AMSG_BENCH_CAPACITY_WARMUP", "1000"))
    wanted = os.environ.get("AMSG_BENCH_JFR", "").strip()
    if wanted and not jfr.available():
        raise SystemExit("AMSG_BENCH_JFR needs the JDK's jfr on PATH")
    recording = Path(wanted).resolve() if wanted else None
    result = run(tasks=tasks, users=max(1, tasks // 10), warm_up=warm_up, recording=recording)
    elapsed = result["to_last_push_s"]
    rate = result["delivered"] / elapsed if elapsed > 0 else 0.0
    print(f"== capacity run on DynamoDB Local ({result['tasks']} one-shot tasks due at once, {result['users']} users)")
    print(
        f"  template: RunTaskMaxConcurrency {result['concurrency']}, BatchSize {result['batch_size']},"
        f" ClaimerMaxConcurrency {result['claimers']}; {result['ticks']} tick(s), {result['claimed']} claimed"
    )
    print(f"  load average before the run {result['loadavg']}")
    print(f"  seeded in {result['seed_s']:.1f} s (not part of the run)")
    if result["warm_up"]:
        print(
            f"  DynamoDB Local warmed up first: {result['warm_up']} other tasks delivered in {result['warm_s']:.1f} s"
            " (its JIT compiler; AMSG_BENCH_CAPACITY_WARMUP=0 to skip)"
        )
    print(f"  time from due to last push  {elapsed:8.1f} s   (goal: within 60 s)")
    print(f"  delivered tasks/s           {rate:8.1f}")
    print(
        f"  delivered {result['delivered']}, duplicates {result['duplicates']}, lost {result['lost']},"
        f" rejected by the push service {result['rejected']}, records redelivered {result['redelivered']}"
    )
    if elapsed > 0:
        cpu = ", ".join(f"{name} {sec:.1f} s ({sec / elapsed:.2f} cores)" for name, sec in result["cpu_s"].items())
        print(f"  CPU during the run ({result['cores']} cores here): {cpu}")
        # every party shares this machine's cores: the run cannot end before (CPU per task × tasks) / cores
        per_task = {name: 1000 * sec / max(1, result["delivered"]) for name, sec in result["cpu_s"].items()}
        total = sum(per_task.values())
        shares = ", ".join(f"{name.split(' (')[0]} {ms:.1f}" for name, ms in per_task.items())
        floor_s = total * result["tasks"] / 1000 / result["cores"]
        busy = sum(result["cpu_s"].values()) / (elapsed * result["cores"])
        print(
            f"  CPU per delivered task      {total:8.1f} ms  ({shares}); all cores busy: {floor_s:.0f} s at the"
            f" least; they were {100 * busy:.0f}% busy"
        )
    from amsg_local.dynamodb_local import DEFAULT_GC

    collector = os.environ.get("AMSG_DYNAMODB_LOCAL_GC", DEFAULT_GC) or "the JVM's default collector"
    print(f"  DynamoDB Local's peak resident memory {result['java_rss_mb']:.0f} MB ({collector})")
    print_timelines(result)
    if recording is not None:
        print("\n".join(jfr.report(recording, result["window"])))
    if any(s.get("calls") is not None for s in result["stats"]):
        for function in ("run_task", "claimer"):
            print(f"  DynamoDB calls, wall time  {calltimes.summary(result['stats'], function)}")
    per_minute = rate * 60
    before, after = result["loop_ms"]
    print(
        f"  machine speed: a fixed Python loop took {before:.0f} ms before the run, {after:.0f} ms after "
        "(lower: faster)"
    )
    print(f"  vs the reference's {REFERENCE_PER_MINUTE}/min: {per_minute / REFERENCE_PER_MINUTE:8.1f}x")


def bench_environment(
    endpoint: str, table: str, master_key: str, vapid: tuple[str, str], defaults: dict[str, Any]
) -> dict[str, str]:
    """The functions' environment of a bench on DynamoDB Local: the template's claim settings, bench keys."""
    public, private = vapid
    return {
        **{k: v for k, v in os.environ.items() if k.startswith(("AWS_", "POWERTOOLS_"))},
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "AMSG_TABLE_NAME": table,
        "AMSG_MASTER_KEY": master_key,
        "AMSG_VAPID_PUBLIC_KEY": public,
        "AMSG_VAPID_PRIVATE_KEY": private,
        "AMSG_VAPID_EMAIL": "bench@example.test",
        "AMSG_CLAIM_PAGE_SIZE": str(defaults["claim_page_size"]),
        "AMSG_CLAIM_BACKLOG_LIMIT": str(defaults["claim_backlog_limit"]),
        # the template's ClaimWrites (single) unless the bench is asked for the other mode
        "AMSG_CLAIM_WRITES": os.environ.get("AMSG_CLAIM_WRITES", "single"),
        # an invocation that records no metric makes Powertools warn on every flush: noise in the results
        "PYTHONWARNINGS": "ignore::UserWarning:aws_lambda_powertools.metrics.provider.base",
    }
