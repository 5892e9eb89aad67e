"""Count AWS requests per operation through botocore's event system (what a Lambda would be billed for)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import boto3

_lock = threading.Lock()
calls: Counter[str] = Counter()


def _count(event_name: str, **_: Any) -> None:
    # event_name = "before-call.<service>.<Operation>"
    _, service, operation = event_name.split(".", 2)
    with _lock:
        calls[f"{service}.{operation}"] += 1


_installed = False


def install() -> None:
    """Hook every boto3 session created from now on (the table adapter builds its own sessions)."""
    global _installed
    if _installed:
        return
    _installed = True
    original = boto3.session.Session.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.events.register("before-call.*.*", _count)

    boto3.session.Session.__init__ = init  # type: ignore[method-assign]
    boto3.DEFAULT_SESSION = None


def reset() -> None:
    with _lock:
        calls.clear()


def dynamodb_total() -> int:
    with _lock:
        return sum(n for key, n in calls.items() if key.startswith("dynamodb."))
