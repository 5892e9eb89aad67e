"""``bench spike``'s watch over a spike's pushes (bench/spike.py): a push that arrives while the bench reads the
ones before it is still counted, so a punctual task is never reported as never pushed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from bench import spike


@dataclass
class _Push:
    payload: dict[str, str]
    received_at: float = field(default_factory=time.time)


class _ArrivingWhileRead(list[_Push]):
    """The push service's list of accepted pushes, where each read of the new ones lets one more arrive (the
    service's thread appends while the bench iterates)."""

    def __init__(self, arrivals: list[_Push]) -> None:
        super().__init__()
        self.arrivals = arrivals

    def __getitem__(self, index: Any) -> Any:
        result = super().__getitem__(index)
        if isinstance(index, slice) and self.arrivals:
            arrival = self.arrivals.pop(0)
            arrival.received_at = time.time()
            self.append(arrival)
        return result


@dataclass
class _Offset:
    value: int = 0


class _Tick:
    @staticmethod
    def handler(event: dict[str, Any], context: Any) -> None:
        return None


class _Ctx:
    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000


def test_a_push_that_arrives_during_a_read_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spike, "SPIKE_DEADLINE_S", 3.0)
    tasks = {"a", "b", "c"}
    push = type("Push", (), {})()
    push.received = _ArrivingWhileRead([_Push({"taskUuid": t}) for t in sorted(tasks)])
    due = time.time_ns() // 1_000_000
    lateness, missing, _ = spike._spike(_Tick(), _Ctx(), push, _Offset(), due, tasks)
    assert missing == set()
    assert len(lateness) == 3
    assert all(0 <= late < 3 for late in lateness)
