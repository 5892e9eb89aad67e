"""Running callables as the participants of one coalescing session, as run_task's records of a batch do."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from amsg.adapters.dynamo.coalescing import DynamoCoalescer
from amsg.adapters.dynamo.table import DynamoTable


def run_together(table: DynamoTable, jobs: list[Callable[[], Any]], *, wait_s: float = 0.5) -> list[Any]:
    """Run ``jobs`` as participants of one session, one thread each; returns results or raised exceptions."""
    session = DynamoCoalescer(table, max_wait_s=wait_s).session(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def run(index: int) -> None:
        with session.participant():
            try:
                results[index] = jobs[index]()
            except Exception as exc:
                results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def counter_key(name: str) -> dict[str, str]:
    """The key of a test's counter item ``name`` (its ``n`` is what the coalescing tests compare and set)."""
    return {"PK": f"U#{name}", "SK": "C#n"}


class CounterSpace:
    """The one part of a key space that a pending-count decrement needs: where its counter lives."""

    def __init__(self, key: dict[str, str]) -> None:
        self._key = key

    def pending_counter_key(self) -> dict[str, str]:
        return self._key
