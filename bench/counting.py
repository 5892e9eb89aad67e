"""Count AWS requests per operation through botocore's event system (what a Lambda would be billed for)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import boto3

_lock = threading.Lock()
calls: Counter[str] = Counter()
# consumed capacity as the backend reports it ("read"/"write" units: table plus any index it names)
units: Counter[str] = Counter()
_READS = {"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"}
_REPORTS_CAPACITY = _READS | {
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "TransactWriteItems",
}


def _count(event_name: str, **_: Any) -> None:
    # event_name = "before-call.<service>.<Operation>"
    _, service, operation = event_name.split(".", 2)
    with _lock:
        calls[f"{service}.{operation}"] += 1


def _ask_capacity(params: dict[str, Any], model: Any, **_: Any) -> None:
    # the code under test never asks for it; asking changes nothing but the response
    if model.name in _REPORTS_CAPACITY:
        params.setdefault("ReturnConsumedCapacity", "INDEXES")


def _add_capacity(parsed: dict[str, Any], model: Any, **_: Any) -> None:
    consumed = parsed.get("ConsumedCapacity") if isinstance(parsed, dict) else None
    if not consumed:
        return
    kind = "read" if model.name in _READS else "write"
    with _lock:
        for entry in consumed if isinstance(consumed, list) else [consumed]:
            units[kind] += float(entry.get("CapacityUnits", 0.0))


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
        self.events.register("provide-client-params.dynamodb.*", _ask_capacity)
        self.events.register("after-call.dynamodb.*", _add_capacity)

    boto3.session.Session.__init__ = init  # type: ignore[method-assign]
    boto3.DEFAULT_SESSION = None


def reset() -> None:
    with _lock:
        calls.clear()
        units.clear()


def dynamodb_total() -> int:
    with _lock:
        return sum(n for key, n in calls.items() if key.startswith("dynamodb."))
