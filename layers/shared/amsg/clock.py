"""The one clock. Everything that needs "now" takes a :class:`amsg.ports.Clock` so tests can move time."""

from __future__ import annotations

import time
from dataclasses import dataclass

from amsg.timeutil import iso_from_ms


class SystemClock:
    """Wall-clock time. ``offset_ms`` exists only for the local stack's ``POST /_local/clock`` (time travel
    for trying recurrence, back-off and stale handling by hand); nothing on AWS ever sets it."""

    offset_ms: int = 0

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + SystemClock.offset_ms


@dataclass
class FixedClock:
    """A clock tests set and advance by hand."""

    current_ms: int

    def now_ms(self) -> int:
        return self.current_ms

    def advance(self, ms: int) -> None:
        self.current_ms += ms


def now_iso(clock: SystemClock | FixedClock) -> str:
    return iso_from_ms(clock.now_ms())
