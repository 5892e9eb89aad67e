"""``python -m bench chaos``: every fault mode over N two-segment tasks on the local stack, counted per segment.

The local stack on DynamoDB Local (process sandboxes) with the handlers behind the DynamoDB fault proxy, a
failing push service, and busy ``run_task`` sandboxes killed at random (``tests/support/chaos.py``). Per mode it
prints the segments pushed exactly once, duplicated, lost, waiting in the outbox (not accepted by the push
service, there for the client's pull), failed visibly (the task ``failed`` with ``lastError``), and pending
(segments of tasks still unsettled when the run ended). The goal in every mode: 0 duplicated, 0 lost, 0 pending.

``AMSG_BENCH_CHAOS_TASKS`` (1,000) tasks per mode, ``AMSG_BENCH_CHAOS_MODES`` (all; a comma list of names),
``AMSG_BENCH_CHAOS_OUTAGE_S`` (60), ``AMSG_BENCH_CHAOS_BUDGET_S`` (900, wall time per mode);
``AMSG_BENCH_CHAOS_VERBOSE=1`` describes up to five tasks per mode that were not simply pushed once (broken
ones first). Numbers are printed, never asserted (``tests/e2e/test_chaos.py`` asserts the small versions).
"""

from __future__ import annotations

import logging
import os
import time

from tests.support import chaos

HEADER = f"{'mode':<13} {'faults':<54} {'once':>6} {'dup':>4} {'lost':>4} {'outbox':>6} {'failed':>6} {'pending':>7}"


def _row(mode: chaos.Mode, result: chaos.Result, load: float) -> str:
    c = result.counts
    injected = ", ".join(f"{k} {v}" for k, v in sorted(result.injected.items()) if k != "requests")
    return (
        f"{mode.name:<13} {mode.what:<54} {c['once']:>6} {c['duplicated']:>4} {c['lost']:>4} {c['outbox']:>6}"
        f" {c['failed']:>6} {c['pending']:>7}   {result.seconds:5.0f} s, {result.ticks} ticks, clock"
        f" +{result.clock_moved_ms // 60_000} min, load {load:.1f}; injected: {injected or '-'}"
        f" ({result.injected.get('requests', 0)} DynamoDB requests)"
    )


def main() -> None:
    tasks = int(os.environ.get("AMSG_BENCH_CHAOS_TASKS", "1000"))
    outage_s = float(os.environ.get("AMSG_BENCH_CHAOS_OUTAGE_S", "60"))
    budget_s = float(os.environ.get("AMSG_BENCH_CHAOS_BUDGET_S", "900"))
    every = chaos.modes(outage_s)
    chosen = [m for m in os.environ.get("AMSG_BENCH_CHAOS_MODES", ",".join(every)).split(",") if m]
    logging.getLogger("local_stack").setLevel(logging.CRITICAL)  # the injected failures, one traceback each
    os.environ["POWERTOOLS_LOG_LEVEL"] = "CRITICAL"  # and the sandboxes' warnings: the counts say it all
    print(
        f"== chaos: {tasks} one-shot tasks of {len(chaos.SEGMENTS)} segments per mode on the local stack (DynamoDB"
        " Local behind the fault proxy, process sandboxes); segments counted"
    )
    print(
        f"   template settings except {', '.join(f'{k}={v}' for k, v in chaos.STACK_SETTINGS.items())}; the queue's"
        " visibility timeout 10 s (720 s in the template) and, when a round settles nothing, the stack's clock"
        " moved 2.5 min (past the 90 s run lease, into the retry back-offs) to force redeliveries and lease expiry"
    )
    started = time.perf_counter()
    with chaos.chaos_stack() as (stack, push):
        print(f"   stack started in {time.perf_counter() - started:.1f} s; load average {os.getloadavg()[0]:.1f}")
        print(HEADER)
        for name in chosen:
            mode = every[name]
            result = chaos.run_mode(stack, push, mode, tasks, budget_s=budget_s)
            print(_row(mode, result, os.getloadavg()[0]), flush=True)
            for sample in result.samples if os.environ.get("AMSG_BENCH_CHAOS_VERBOSE") else ():
                print(f"      {sample}")


if __name__ == "__main__":
    main()
