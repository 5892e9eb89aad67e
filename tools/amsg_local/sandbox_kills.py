"""Random SIGKILLs of busy sandboxes: a Lambda dying mid-invocation, on the local stack's process sandboxes.

A killed ``run_task`` sandbox ends its invocation with ``Runtime.ExitError``; the batch's records stay in the
queue and come back after the visibility timeout, while the task's claim and lease are still held by the dead
run. That is the crash the delivery chain's claims, leases and fencing exist for (docs/delivery.md).

``SandboxKiller(runtime.function("RunTaskFunction"), rate=0.3, interval_s=0.5, seed=1)`` looks at the
function's busy sandboxes every ``interval_s`` and, with probability ``rate``, kills one of them (chosen by a
``random.Random(seed)``), up to ``max_kills``. Only sandboxes of the given function, and only processes this
stack started.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
from typing import Any

__all__ = ["SandboxKiller"]


class SandboxKiller:
    """A daemon thread killing busy sandboxes of one function at random; ``kills`` counts them."""

    def __init__(
        self, function: Any, *, rate: float = 0.3, interval_s: float = 0.5, seed: int = 0, max_kills: int | None = None
    ) -> None:
        if not 0.0 <= rate <= 1.0 or interval_s <= 0:
            raise ValueError("rate must be within 0..1 and interval_s positive")
        self.function = function  # a ProcessFunctionRuntime (busy_pids())
        self.rate = rate
        self.interval_s = interval_s
        self.kills = 0
        self.max_kills = max_kills  # then it stops (else every batch may die, and nothing is ever delivered)
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def kill_one(self) -> int | None:
        """Kill one busy sandbox now (the pid), or None when none is busy."""
        busy = sorted(self.function.busy_pids())
        if not busy:
            return None
        pid = int(self._random.choice(busy))
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            self.kills += 1
        return pid

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.max_kills is not None and self.kills >= self.max_kills:
                return
            if self._random.random() < self.rate:
                self.kill_one()

    def start(self) -> SandboxKiller:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="sandbox-killer", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(5)

    def __enter__(self) -> SandboxKiller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
