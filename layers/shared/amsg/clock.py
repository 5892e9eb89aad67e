"""The one clock. Everything that needs "now" takes a :class:`amsg.ports.Clock` so tests can move time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from amsg.timeutil import iso_from_ms

if TYPE_CHECKING:  # annotations only: a route that needs no port should not import amsg.ports at cold start
    from amsg.ports import Clock


class SystemClock:
    """Wall-clock time."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class OffsetClock:
    """Another clock shifted by an offset that can move while it runs (thread-safe).

    The local stack injects one into its context for ``POST /_local/clock`` (time travel to try recurrence,
    back-off and stale handling by hand); the production clock itself never moves.
    """

    def __init__(self, base: Clock | None = None, offset_ms: int = 0) -> None:
        self._base = base or SystemClock()
        self._offset_ms = offset_ms
        self._lock = threading.Lock()

    @property
    def offset_ms(self) -> int:
        return self._offset_ms

    def now_ms(self) -> int:
        return self._base.now_ms() + self._offset_ms

    def advance(self, ms: int) -> int:
        """Move ``ms`` forward (or back when negative); returns the new now."""
        with self._lock:
            self._offset_ms += ms
        return self.now_ms()

    def set_now(self, now_ms: int) -> int:
        """Make "now" be ``now_ms`` (time keeps running from there)."""
        with self._lock:
            self._offset_ms = now_ms - self._base.now_ms()
        return self.now_ms()

    def reset(self) -> int:
        with self._lock:
            self._offset_ms = 0
        return self.now_ms()


@dataclass
class FixedClock:
    """A clock tests set and advance by hand."""

    current_ms: int

    def now_ms(self) -> int:
        return self.current_ms

    def advance(self, ms: int) -> None:
        self.current_ms += ms


def now_iso(clock: Clock) -> str:
    return iso_from_ms(clock.now_ms())
