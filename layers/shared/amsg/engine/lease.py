"""Lease heartbeat for a delivery in progress (see docs/delivery.md): renewed every ``heartbeat_ms`` inside the
invocation, fenced by the claim version, stopped in ``finally``.

Most deliveries end long before their first beat is due (seconds against a 30 s heartbeat), so a keeper starts
no thread of its own: one timer thread per sandbox remembers when each keeper's first beat is due and only then
gives that keeper its heartbeat thread, instead of starting and joining a thread for every delivery.

Losing the lease (renewal refused: the task was cancelled, superseded, settled or taken over) sets ``lost``;
the pipeline checks it before every push and stops, so a worker that lost its claim sends nothing more.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from amsg.observability import logger


class LeaseKeeper:
    def __init__(self, renew: Callable[[], bool], interval_s: float) -> None:
        self._renew = renew
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()  # orders "start the heartbeat thread" against "stop"
        self.lost = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LeaseKeeper:
        if self._interval_s > 0:
            _first_beats().add(time.monotonic() + self._interval_s, self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """No renewal runs once this returns (an ongoing one is waited for, up to 5 s)."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)
        # the timer may remember this keeper for up to one interval: let it hold nothing of the delivery
        self._renew = _already_stopped

    def first_beat_due(self) -> None:
        """Called by the timer thread when the first beat is due: from now on this keeper has its own thread."""
        with self._lock:
            if self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._renew():
                    if not self._stop.is_set():
                        self.lost.set()
                        logger.warning("delivery lease lost; stopping before any further push")
                    return
            except Exception as exc:  # a throttled renew is not a lost lease; try again next beat
                logger.warning("lease renewal failed", extra={"error": type(exc).__name__})
            if self._stop.wait(self._interval_s):
                return


def _already_stopped() -> bool:
    return False


class _FirstBeats:
    """One daemon thread per sandbox that hands each keeper its heartbeat thread when its first beat is due."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, LeaseKeeper]] = []
        self._order = itertools.count()  # ties never compare keepers
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="lease-first-beats", daemon=True)
        self._thread.start()

    def add(self, at: float, keeper: LeaseKeeper) -> None:
        with self._changed:
            earliest = self._due[0][0] if self._due else None
            heapq.heappush(self._due, (at, next(self._order), keeper))
            if earliest is None or at < earliest:  # keepers share one interval: this is rare after the first
                self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._changed.wait(None if not self._due else max(0.0, self._due[0][0] - time.monotonic()))
                _, _, keeper = heapq.heappop(self._due)
            try:
                keeper.first_beat_due()
            except Exception as exc:  # never let one keeper stop the others' heartbeats
                logger.warning("lease heartbeat could not start", extra={"error": type(exc).__name__})


_timer: _FirstBeats | None = None
_timer_lock = threading.Lock()


def _first_beats() -> _FirstBeats:
    """The sandbox's timer, started on first use (never at import)."""
    global _timer
    with _timer_lock:
        if _timer is None:
            _timer = _FirstBeats()
        return _timer
