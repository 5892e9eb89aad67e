"""The clock, the queue and the call coalescer: what runs the engine, not what it stores."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from amsg.jsonio import JsonObject


class Clock(Protocol):
    def now_ms(self) -> int: ...


class CoalescingScope(Protocol):
    def participant(self) -> AbstractContextManager[None]:
        """Take part (the calling thread, for one record): its storage calls may share round trips."""
        ...


class CallCoalescer(Protocol):
    """Storage calls made at about the same time by the records of one batch, delivered concurrently, share
    round trips; every call keeps exactly the outcome it would have had alone (see docs/delivery.md)."""

    def session(self, participants: int) -> CoalescingScope:
        """A scope for ``participants`` records starting together (more may join as earlier ones finish)."""
        ...


class TaskQueue(Protocol):
    def send_many(self, messages: list[JsonObject]) -> list[int]:
        """Enqueue JSON messages (batches of 10); returns the indexes that could not be enqueued."""
        ...

    def backlog(self) -> int | None:
        """About how many messages wait in the queue (None: unknown); claim jobs pause above a limit."""
        ...
