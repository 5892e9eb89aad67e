"""Make moto refuse what DynamoDB refuses: key attributes over their byte limits and numbers out of range.

moto stores a 1,100-byte sort key (or a string with a lone surrogate) happily; DynamoDB answers
``ValidationException``. Tests that prove "no input
reaches a 500" must see DynamoDB's behaviour, so :func:`enforce_dynamodb_limits` hooks a botocore client and
checks every request before it is sent (after boto3 has turned Python values into ``{"S": ...}``).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from botocore.exceptions import ClientError

MAX_PARTITION_KEY_BYTES = 2048
MAX_SORT_KEY_BYTES = 1024
# key attributes of the table and its indexes (template.yaml): hash keys first
HASH_KEYS = {"PK", "due_pk", "ret_pk", "work_pk"}
RANGE_KEYS = {"SK", "due_sk", "ret_sk", "work_sk", "oid", "task_sk", "unacked_sk"}
MAX_NUMBER = Decimal("9.9999999999999999999999999999999999999E+125")
MIN_POSITIVE = Decimal("1E-130")


def _fail(operation: str, message: str) -> None:
    raise ClientError({"Error": {"Code": "ValidationException", "Message": message}}, operation)


def _check_value(operation: str, value: Any) -> None:
    if not isinstance(value, dict):
        return
    if isinstance(value.get("S"), str) and not _well_formed(value["S"]):
        _fail(operation, "string is not valid Unicode (lone surrogate)")
    if "N" in value:
        _check_number(operation, value["N"])
    for items in (value.get("L") or [], (value.get("M") or {}).values()):
        for item in items:
            _check_value(operation, item)
    for number in value.get("NS") or []:
        _check_number(operation, number)


def _well_formed(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_number(operation: str, text: str) -> None:
    try:
        number = abs(Decimal(text))
    except InvalidOperation:
        _fail(operation, "invalid number")
        return
    digits = len(number.normalize().as_tuple().digits) if number else 0
    if digits > 38 or number > MAX_NUMBER or (number and number < MIN_POSITIVE):
        _fail(operation, "Number overflow/underflow or more than 38 significant digits")


def _check_item(operation: str, item: dict[str, Any] | None) -> None:
    for name, value in (item or {}).items():
        _check_value(operation, value)
        if name in HASH_KEYS | RANGE_KEYS and isinstance(value, dict) and "S" in value:
            size = len(value["S"].encode("utf-8"))
            limit = MAX_PARTITION_KEY_BYTES if name in HASH_KEYS else MAX_SORT_KEY_BYTES
            if size > limit:
                _fail(operation, f"key attribute {name} exceeds {limit} bytes")


def _check_request(operation: str, params: dict[str, Any]) -> None:
    _check_item(operation, params.get("Key"))
    _check_item(operation, params.get("Item"))
    for value in (params.get("ExpressionAttributeValues") or {}).values():
        _check_value(operation, value)
    condition = params.get("KeyConditionExpression") or ""
    for placeholder in re.findall(r":[A-Za-z0-9_]+", condition):  # values already checked above
        value = (params.get("ExpressionAttributeValues") or {}).get(placeholder) or {}
        if "S" in value and len(value["S"].encode("utf-8")) > MAX_SORT_KEY_BYTES:
            _fail(operation, "key condition value exceeds the key size limit")
    for action in params.get("TransactItems") or []:
        for inner in action.values():
            _check_request(operation, inner)
    for requests in (params.get("RequestItems") or {}).values():
        if isinstance(requests, dict):  # BatchGetItem
            for key in requests.get("Keys") or []:
                _check_item(operation, key)
        else:  # BatchWriteItem
            for request in requests:
                _check_item(operation, (request.get("PutRequest") or {}).get("Item"))
                _check_item(operation, (request.get("DeleteRequest") or {}).get("Key"))


def table_clients(table: Any) -> list[Any]:
    """The botocore clients a ``DynamoTable`` sends through (its resource-style table's and its wire client),
    each once: a hook meant to see every request goes on each, and they are one client today."""
    clients = [table.resource.meta.client, table.wire]
    return [client for index, client in enumerate(clients) if all(client is not c for c in clients[:index])]


def enforce_dynamodb_limits(table: Any) -> None:
    """Hook ``table``'s clients so that out-of-limit requests fail like on DynamoDB."""

    def check(params: dict[str, Any], model: Any, **_: Any) -> None:
        _check_request(model.name, params)

    # registered after boto3's own handler, so the values are already in wire form ({"S": ...}, {"N": ...})
    for client in table_clients(table):
        client.meta.events.register("before-parameter-build.dynamodb", check)
