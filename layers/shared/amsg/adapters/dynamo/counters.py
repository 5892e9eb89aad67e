"""The per-user id counters (``U#<uid> / SEQ#<name>``, attribute ``n``): the one compare-and-set of the table.

A writer reads the counter, takes the next ids and commits a transaction whose first condition is that the
counter still holds what it read (:func:`set_counter`); when another writer moved it first, the transaction
fails and the writer reads again, after a jittered back-off (:func:`cas_attempts`). Tasks, the run's batch
append and the outbox's general append allocate ids this way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from amsg.adapters.dynamo.table import DynamoTable, backoff, item_int


def read_counter(table: DynamoTable, key: dict[str, str]) -> int:
    """The counter's value (consistent read); 0 before its first id."""
    item = table.get(key)
    return item_int(item.get("n")) if item else 0


def set_counter(key: dict[str, str], current: int, new: int) -> dict[str, Any]:
    """The transaction action that moves the counter to ``new`` iff it still holds ``current``."""
    return {
        "Update": {
            "Key": key,
            "UpdateExpression": "SET n = :new",
            "ConditionExpression": "attribute_not_exists(n) OR n = :cur",
            "ExpressionAttributeValues": {":new": new, ":cur": current},
        }
    }


def cas_attempts(attempts: int) -> Iterator[int]:
    """The attempt numbers of a compare-and-set loop, backing off (full jitter) before each retry."""
    for attempt in range(attempts):
        if attempt:
            backoff(attempt)
        yield attempt
