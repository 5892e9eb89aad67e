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
# the same units split: "<read|write> <Operation> <table|gsi:name|lsi:name>"
unit_detail: Counter[str] = Counter()
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
            _split(kind, model.name, entry)


def _split(kind: str, operation: str, entry: dict[str, Any]) -> None:
    """Table and per-index units of one ConsumedCapacity entry (what ``INDEXES`` reports)."""
    table = entry.get("Table", {}).get("CapacityUnits")
    indexed = 0.0
    for label, field in (("gsi", "GlobalSecondaryIndexes"), ("lsi", "LocalSecondaryIndexes")):
        for name, used in (entry.get(field) or {}).items():
            indexed += float(used.get("CapacityUnits", 0.0))
            unit_detail[f"{kind} {operation} {label}:{name}"] += float(used.get("CapacityUnits", 0.0))
    if table is None:
        table = float(entry.get("CapacityUnits", 0.0)) - indexed
    unit_detail[f"{kind} {operation} table"] += float(table)


_installed = False
# a bench.units.Meter when write units are billed from item sizes (DynamoDB Local undercounts transactions)
meter: Any = None


def _meter_before(**kwargs: Any) -> None:
    if meter is not None:
        meter.before(**kwargs)


def _meter_after(**kwargs: Any) -> None:
    if meter is not None:
        meter.after(**kwargs)


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
        self.events.register("before-call.dynamodb.*", _meter_before)
        self.events.register("after-call.dynamodb.*", _meter_after)

    boto3.session.Session.__init__ = init  # type: ignore[method-assign]
    boto3.DEFAULT_SESSION = None


def reset() -> None:
    with _lock:
        calls.clear()
        units.clear()
        unit_detail.clear()
    if meter is not None:
        from bench import units as billing

        billing.reset()


def dynamodb_total() -> int:
    with _lock:
        return sum(n for key, n in calls.items() if key.startswith("dynamodb."))


def billed() -> dict[str, float]:
    """Write units billed by the meter since the last reset ("<Operation> <target>"), {} without one."""
    if meter is None:
        return {}
    from bench import units as billing

    return billing.snapshot()
