"""Where a sandbox's time goes between its handler calls' own CPU: each DynamoDB call's wall time by operation,
and how much of the run the sandbox spent inside its handler (``AMSG_BENCH_CALL_TIMES=1``; docs/performance.md,
"What bounds the 10,000 run"). Off by default: the wrapper adds a little client CPU to every call."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Any


class CallTimes:
    """Counts and total wall seconds per DynamoDB operation made through any botocore client of this process."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        self._lock = threading.Lock()

    def install(self) -> None:
        import botocore.client

        original = botocore.client.BaseClient._make_api_call
        times = self

        def timed(client: Any, operation: str, params: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(client, operation, params)
            finally:
                times.add(operation, time.perf_counter() - started)

        botocore.client.BaseClient._make_api_call = timed  # type: ignore[method-assign]

    def add(self, operation: str, seconds: float) -> None:
        with self._lock:
            self.count[operation] += 1
            self.seconds[operation] += seconds

    def snapshot(self) -> dict[str, tuple[int, float]]:
        with self._lock:
            return {op: (n, self.seconds[op]) for op, n in self.count.items()}


def wanted() -> CallTimes | None:
    """A recorder installed in this process when ``AMSG_BENCH_CALL_TIMES`` asks for one."""
    if os.environ.get("AMSG_BENCH_CALL_TIMES", "").strip() not in ("1", "true", "on"):
        return None
    times = CallTimes()
    times.install()
    return times


def summary(stats: list[dict[str, Any]], function: str) -> str:
    """One line for the sandboxes of ``function``: each operation's calls and mean wall time, and how busy the
    sandboxes were (time inside the handler over the time from their first batch to their last)."""
    calls: dict[str, list[float]] = {}
    busy = span = 0.0
    for s in (s for s in stats if s["function"] == function and s.get("calls") is not None):
        busy, span = busy + s["busy_s"], span + s["span_s"]
        for op, (n, seconds) in s["calls"].items():
            totals = calls.setdefault(op, [0, 0.0])
            totals[0], totals[1] = totals[0] + n, totals[1] + seconds
    ops = ", ".join(f"{op} {int(n)} × {1000 * sec / max(1, n):.0f} ms" for op, (n, sec) in sorted(calls.items()))
    return f"{function}: {ops}; inside the handler {100 * busy / max(span, 1e-9):.0f}% of its run"
