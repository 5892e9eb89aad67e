"""A resource-compatible table over one plain botocore client.

The adapters call ``get_item`` / ``put_item`` / ``update_item`` / ``delete_item`` / ``query`` / ``batch_writer``
(and ``batch_get_item`` on the resource) with plain Python values and ``boto3.dynamodb.conditions`` objects, as
boto3's resource layer accepts them. Building that layer on a cold start (its resource model, a second client,
the generated classes) and running its request/response model walk on every call cost more than the request
itself (docs/cold-start.md), so these objects do what it does, directly:

* condition objects become expressions through boto3's own ``ConditionExpressionBuilder``, one builder per
  request so the placeholders (``#n0``, ``:v0``) of its condition, filter and key condition never collide,
  merged into copies of the caller's ``ExpressionAttributeNames`` / ``ExpressionAttributeValues``;
* attribute values go through boto3's ``TypeSerializer`` / ``TypeDeserializer``, the converters the resource
  layer uses, so an item reads back exactly as before (tests/unit/test_dynamo_wire.py proves it); the kinds
  nearly every value is (strings, integers, maps, lists, bytes, booleans, null) are converted here first, to
  exactly what those converters give (tests/unit/test_dynamo_wire_values.py compares them), without their
  type dispatch per value;
* ``batch_writer`` sends groups of 25 and resends what DynamoDB leaves unprocessed.

Only the request fields that carry attribute values in the calls we make are converted; the legacy
parameters (``Expected``, ``AttributeUpdates``, ``KeyConditions``, ...) are refused rather than sent raw.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from boto3.dynamodb.conditions import ConditionBase, ConditionExpressionBuilder
from boto3.dynamodb.types import DYNAMODB_CONTEXT, Binary, TypeDeserializer, TypeSerializer

_TO_WIRE = TypeSerializer()
_FROM_WIRE = TypeDeserializer()
_DECIMAL = DYNAMODB_CONTEXT.create_decimal
# integers DynamoDB's 38 digits hold exactly: the serializer writes them as their digits, refuses the others
_NUMBER_LIMIT = 10**38
BATCH_WRITE_SIZE = 25
# consecutive batch writes that leave items unprocessed before giving up (each after a growing pause)
BATCH_WRITE_ROUNDS = 12
_CONDITIONS = (("ConditionExpression", False), ("FilterExpression", False), ("KeyConditionExpression", True))
_ITEM_FIELDS = ("Key", "Item", "ExclusiveStartKey")
_LEGACY = frozenset(
    {"Expected", "AttributeUpdates", "KeyConditions", "QueryFilter", "ScanFilter", "ConditionalOperator"}
)


def to_wire(values: dict[str, Any]) -> dict[str, Any]:
    return {name: _wire_value(value) for name, value in values.items()}


def from_wire(values: dict[str, Any]) -> dict[str, Any]:
    return {name: _plain_value(value) for name, value in values.items()}


def _wire_value(value: Any) -> dict[str, Any]:
    """``TypeSerializer().serialize(value)``; the exact built-in types here, every other value (floats and their
    error, ``Decimal``, sets, subclasses, ...) through it."""
    kind = type(value)
    if kind is str:
        return {"S": value}
    if kind is int and -_NUMBER_LIMIT < value < _NUMBER_LIMIT:
        return {"N": str(value)}
    if kind is dict:
        return {"M": {name: _wire_value(item) for name, item in value.items()}}
    if kind is list:
        return {"L": [_wire_value(item) for item in value]}
    if kind is bytes:
        return {"B": value}
    if value is None:
        return {"NULL": True}
    if kind is bool:
        return {"BOOL": value}
    wire: dict[str, Any] = _TO_WIRE.serialize(value)
    return wire


def _plain_value(wire: Any) -> Any:
    """``TypeDeserializer().deserialize(wire)``; a value of one of the common types here, anything else (sets,
    malformed values and their errors) through it."""
    if type(wire) is dict and len(wire) == 1:
        for kind, inner in wire.items():
            if kind == "S":
                return inner
            if kind == "N":
                return _DECIMAL(inner)
            if kind == "M":
                return {name: _plain_value(item) for name, item in inner.items()}
            if kind == "L":
                return [_plain_value(item) for item in inner]
            if kind == "B":
                return Binary(inner)
            if kind == "BOOL":
                return inner
            if kind == "NULL":
                return None
    return _FROM_WIRE.deserialize(wire)


def wire_request(params: dict[str, Any]) -> dict[str, Any]:
    """A table call's parameters as the low-level client takes them (the caller's dicts are left as they are)."""
    legacy = _LEGACY.intersection(params)
    if legacy:
        raise TypeError(f"legacy parameters are not supported: {sorted(legacy)}")
    request = dict(params)
    names = dict(request.get("ExpressionAttributeNames") or {})
    values = dict(request.get("ExpressionAttributeValues") or {})
    builder = ConditionExpressionBuilder()
    for field, is_key in _CONDITIONS:
        condition = request.get(field)
        if isinstance(condition, ConditionBase):
            built = builder.build_expression(condition, is_key_condition=is_key)
            request[field] = built.condition_expression
            names.update(built.attribute_name_placeholders)
            values.update(built.attribute_value_placeholders)
    if names:
        request["ExpressionAttributeNames"] = names
    if values:
        request["ExpressionAttributeValues"] = to_wire(values)
    for field in _ITEM_FIELDS:
        if field in request:
            request[field] = to_wire(request[field])
    return request


def plain_response(response: dict[str, Any]) -> dict[str, Any]:
    """A table call's response with its items as plain Python values (``Decimal`` numbers, ``Binary``)."""
    plain = dict(response)
    for field in ("Item", "Attributes", "LastEvaluatedKey"):
        if field in plain:
            plain[field] = from_wire(plain[field])
    if "Items" in plain:
        plain["Items"] = [from_wire(item) for item in plain["Items"]]
    return plain


class PlainTable:
    """The table methods the adapters use, with the resource's ``Table`` signatures and return values."""

    def __init__(self, client: Any, name: str) -> None:
        self.name = name
        self.table_name = name
        self.meta = SimpleNamespace(client=client)
        self._client = client

    def _call(self, method: Callable[..., dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        return plain_response(method(**wire_request({"TableName": self.name, **params})))

    def get_item(self, **params: Any) -> dict[str, Any]:
        return self._call(self._client.get_item, params)

    def put_item(self, **params: Any) -> dict[str, Any]:
        return self._call(self._client.put_item, params)

    def update_item(self, **params: Any) -> dict[str, Any]:
        return self._call(self._client.update_item, params)

    def delete_item(self, **params: Any) -> dict[str, Any]:
        return self._call(self._client.delete_item, params)

    def query(self, **params: Any) -> dict[str, Any]:
        return self._call(self._client.query, params)

    def scan(self, **params: Any) -> dict[str, Any]:
        return self._call(self._client.scan, params)

    def batch_writer(self) -> BatchWriter:
        return BatchWriter(self._client, self.name)


class PlainResource:
    """What the adapters use of the DynamoDB service resource: ``batch_get_item``, ``Table`` and ``meta.client``."""

    def __init__(self, client: Any) -> None:
        self.meta = SimpleNamespace(client=client)
        self._client = client

    def Table(self, name: str) -> PlainTable:
        return PlainTable(self._client, name)

    def batch_get_item(self, *, RequestItems: dict[str, Any], **params: Any) -> dict[str, Any]:
        request = {
            table: {**spec, "Keys": [to_wire(key) for key in spec["Keys"]]} for table, spec in RequestItems.items()
        }
        response = dict(self._client.batch_get_item(RequestItems=request, **params))
        response["Responses"] = {
            table: [from_wire(item) for item in items] for table, items in (response.get("Responses") or {}).items()
        }
        response["UnprocessedKeys"] = {
            table: {**spec, "Keys": [from_wire(key) for key in spec["Keys"]]}
            for table, spec in (response.get("UnprocessedKeys") or {}).items()
        }
        return response


class BatchWriter:
    """``Table.batch_writer()``: puts and deletes buffered into BatchWriteItem requests of 25, sent when the
    buffer is full and on leaving the ``with`` block; what DynamoDB leaves unprocessed is sent again after a
    pause (boto3's writer resends at once), and a writer that makes no progress for ``BATCH_WRITE_ROUNDS``
    rounds raises rather than spin until the Lambda times out."""

    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self._table_name = table_name
        self._buffer: list[dict[str, Any]] = []
        self._stalled = 0

    def put_item(self, Item: dict[str, Any]) -> None:
        self._add({"PutRequest": {"Item": to_wire(Item)}})

    def delete_item(self, Key: dict[str, Any]) -> None:
        self._add({"DeleteRequest": {"Key": to_wire(Key)}})

    def _add(self, request: dict[str, Any]) -> None:
        self._buffer.append(request)
        if len(self._buffer) >= BATCH_WRITE_SIZE:
            self._flush()

    def _flush(self) -> None:
        sending, self._buffer = self._buffer[:BATCH_WRITE_SIZE], self._buffer[BATCH_WRITE_SIZE:]
        response = self._client.batch_write_item(RequestItems={self._table_name: sending})
        unprocessed = (response.get("UnprocessedItems") or {}).get(self._table_name) or []
        if not unprocessed:
            self._stalled = 0
            return
        self._buffer.extend(unprocessed)
        self._stalled += 1
        if self._stalled >= BATCH_WRITE_ROUNDS:
            raise RuntimeError(f"BatchWriteItem left {len(unprocessed)} items unprocessed {self._stalled} times")
        _pause(self._stalled)

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(self, *_: object) -> None:
        while self._buffer:
            self._flush()


def _pause(attempt: int) -> None:
    """Full-jitter exponential pause before resending unprocessed items (they mean throttling)."""
    time.sleep(secrets.randbelow(1000) / 1000 * min(1.0, 0.02 * 2**attempt))
