"""Write units as DynamoDB bills them, computed from the items before and after each write.

DynamoDB Local reports consumed capacity, but for a ``TransactWriteItems`` of several items it reports the units of
one item only (5 Puts of 3 KB: 6 units, DynamoDB bills 30), so every multi-item transaction is undercounted there.
This meter reads the items a write names before and after it (a side client, not counted) and applies DynamoDB's
billing rules: per item ``ceil(max(old, new) / 1 KB)`` units (a delete: the old item; at least 1), twice that inside
a transaction (a ``ConditionCheck`` included: it is billed as a transactional write of the item it reads); per index
whose entry appears, changes or disappears: 1 unit per KB of the index entry (the larger of its old and new size; a
key change: a delete and a put), twice inside a transaction (what DynamoDB Local reports for a one-item
transaction). Item size: attribute names and values in UTF-8, numbers ~1 byte per two digits + 1, as DynamoDB
documents it; an index entry is its projected attributes, the table and index keys, and 100 bytes. Single-item
writes agree with what DynamoDB Local reports (``tests/ddb_local/test_write_units.py``).
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections import Counter
from typing import Any

_local = threading.local()
_lock = threading.Lock()
# "<Operation> <table|gsi:name|lsi:name>" -> units
billed: Counter[str] = Counter()
TRACE = bool(os.environ.get("AMSG_BENCH_UNITS_TRACE"))  # print every billed item write and its sizes
_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem", "BatchExecuteStatement"}
# a statement's verb and table (the project's statements quote the table: adapters/dynamo/statements.py)
_STATEMENT = re.compile(r'^(UPDATE|DELETE FROM) "([^"]+)"')


class Schema:
    """The table's key and its indexes (key attributes and projection), from template.yaml."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.keys = [k["AttributeName"] for k in table["KeySchema"]]
        self.indexes: dict[str, tuple[list[str], str, set[str]]] = {}
        for label, field in (("gsi", "GlobalSecondaryIndexes"), ("lsi", "LocalSecondaryIndexes")):
            for index in table.get(field, []):
                projection = index.get("Projection", {})
                self.indexes[f"{label}:{index['IndexName']}"] = (
                    [k["AttributeName"] for k in index["KeySchema"]],
                    projection.get("ProjectionType", "ALL"),
                    set(projection.get("NonKeyAttributes", [])),
                )

    def entry(self, name: str, item: dict[str, Any] | None) -> dict[str, Any] | None:
        """The index entry ``item`` has in index ``name`` (None: not in it)."""
        keys, kind, extra = self.indexes[name]
        if item is None or any(k not in item for k in keys):
            return None
        if kind == "ALL":
            return dict(item)
        wanted = set(keys) | set(self.keys) | (extra if kind == "INCLUDE" else set())
        return {k: v for k, v in item.items() if k in wanted}


def value_size(value: dict[str, Any]) -> int:
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        digits = len(v.lstrip("-").replace(".", "").lstrip("0")) or 1
        return (digits + 1) // 2 + 1
    if kind == "B":
        return len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(value_size({kind[0]: e}) for e in v)
    if kind == "L":
        return 3 + sum(1 + value_size(e) for e in v)
    return 3 + sum(1 + len(k.encode()) + value_size(e) for k, e in v.items())  # M


def item_size(item: dict[str, Any] | None) -> int:
    return 0 if item is None else sum(len(k.encode()) + value_size(v) for k, v in item.items())


def kb(size: int) -> int:
    return max(1, math.ceil(size / 1024))


class Meter:
    """Hooked to a boto3 session's events: snapshots the named items before a write, bills after it."""

    def __init__(self, endpoint: str, schema: Schema) -> None:
        import botocore.session

        self.schema = schema
        self.side = botocore.session.get_session().create_client(
            "dynamodb",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )

    def attach(self, client: Any) -> None:
        """Bill every write ``client`` (a botocore DynamoDB client) makes from now on."""
        client.meta.events.register("before-call.dynamodb.*", self.before)
        client.meta.events.register("after-call.dynamodb.*", self.after)

    def _get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        item = self.side.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        return item

    def _key(self, item: dict[str, Any]) -> dict[str, Any]:
        return {k: item[k] for k in self.schema.keys}

    def _targets(self, operation: str, params: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
        """(action, table, key) of every item the write names."""
        if operation == "TransactWriteItems":
            out = []
            for action in params.get("TransactItems", []):
                ((kind, body),) = action.items()
                key = body.get("Key") or self._key(body["Item"])
                out.append((kind, body["TableName"], key))
            return out
        if operation == "BatchWriteItem":
            return [
                (
                    "Put" if "PutRequest" in r else "Delete",
                    table,
                    r.get("DeleteRequest", {}).get("Key") or self._key(r["PutRequest"]["Item"]),
                )
                for table, requests in params.get("RequestItems", {}).items()
                for r in requests
            ]
        if operation == "BatchExecuteStatement":
            return [self._statement_target(s) for s in params.get("Statements", [])]
        key = params.get("Key") or self._key(params["Item"])
        return [(operation.replace("Item", ""), params["TableName"], key)]

    def _statement_target(self, statement: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        """(action, table, key) of one ``UPDATE`` / ``DELETE`` statement: each key attribute is compared with a
        ``?`` in the ``WHERE`` clause, whose parameter is the one at the count of ``?`` before it."""
        text, parameters = statement["Statement"], statement.get("Parameters", [])
        match = _STATEMENT.match(text)
        if match is None:
            raise ValueError(f"not a metered statement: {text[:40]!r}")
        where = text.index(" WHERE ")
        key = {}
        for name in self.schema.keys:
            at = text.index(f'"{name}" = ?', where)
            key[name] = parameters[text.count("?", 0, at)]
        return ("Update" if match.group(1) == "UPDATE" else "Delete", match.group(2), key)

    def before(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        """``before-call``: ``params`` is the serialized request, its body the wire-format JSON."""
        if model.name not in _WRITES:
            return
        targets = self._targets(model.name, json.loads(params["body"]))
        _local.pending = (model.name, [(kind, table, key, self._get(table, key)) for kind, table, key in targets])

    def after(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        pending = getattr(_local, "pending", None)
        if model.name not in _WRITES or pending is None or pending[0] != model.name:
            return
        _local.pending = None
        if isinstance(parsed, dict) and parsed.get("Error"):
            return  # a cancelled transaction or failed condition: billed too, but not part of a delivery
        factor = 2 if model.name == "TransactWriteItems" else 1
        targets = pending[1]
        if model.name == "BatchExecuteStatement":  # each statement is its own write: bill those that applied
            responses = parsed.get("Responses", []) if isinstance(parsed, dict) else []
            targets = [t for t, r in zip(targets, responses, strict=False) if not r.get("Error")]
        bill: Counter[str] = Counter()
        for kind, table, key, old in targets:
            new = None if kind == "Delete" else self._get(table, key)
            if TRACE:
                sk = next(iter(key.values()), {}) if len(key) < 2 else key[self.schema.keys[1]]
                print(f"    [units] {model.name} {kind} {sk} {item_size(old)} -> {item_size(new)} bytes")
            if kind == "ConditionCheck":
                bill["table"] += factor * kb(item_size(old))
                continue
            bill["table"] += factor * kb(max(item_size(old), item_size(new)))
            for name in self.schema.indexes:
                before, after = self.schema.entry(name, old), self.schema.entry(name, new)
                if before == after:
                    continue
                keys = self.schema.indexes[name][0]
                moved = before is not None and after is not None and any(before[k] != after[k] for k in keys)
                # a moved entry is a delete and a put; one updated in place bills the larger of its two sizes
                sizes = [item_size(before), item_size(after)] if moved else [max(item_size(before), item_size(after))]
                for size in sizes:
                    bill[name] += factor * kb(size + 100)
        with _lock:
            for target, n in bill.items():
                billed[f"{model.name} {target}"] += n


def reset() -> None:
    with _lock:
        billed.clear()


def snapshot() -> dict[str, float]:
    with _lock:
        return dict(billed)
