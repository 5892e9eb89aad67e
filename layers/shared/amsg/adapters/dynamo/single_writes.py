"""Conditional single-item writes, several per request: the table's ``write_singles`` (table.py).

A write is an ``UpdateItem`` or ``DeleteItem`` as the adapters build it (:class:`SingleWrite`). With statements on
(the default), up to 25 writes of distinct items travel as one ``BatchExecuteStatement`` (statements.py
translates them): DynamoDB bills each statement as the single write it is (no transaction's doubling), and the
request's signing, sending and parsing is paid once. Each write gets its own :class:`WriteOutcome`, the one the
single call would have had: applied, or its condition failed (with the item as it was, when asked), or the
``ClientError`` the single call would have raised. Statements that failed for a passing reason (throttling, an
internal error, a conflict with a transaction, the request limit) are sent again, only they, after a pause.

With statements off each write is its own ``UpdateItem`` / ``DeleteItem`` (moto, which the unit tests use, does not
run conditional PartiQL).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import ClientError

from amsg.adapters.dynamo.plain_table import PlainTable, from_wire
from amsg.adapters.dynamo.statements import Statement, Untranslatable, delete_statement, update_statement

STATEMENT_BATCH = 25  # DynamoDB's limit per BatchExecuteStatement
STATEMENT_RETRIES = 8
RETRYABLE_STATEMENT_ERRORS = frozenset(
    {
        "ThrottlingError",
        "InternalServerError",
        "TransactionConflict",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceeded",
    }
)
# a statement's error code -> the code the single call raises
_SINGLE_CALL_CODES = {
    "ValidationError": "ValidationException",
    "ResourceNotFound": "ResourceNotFoundException",
    "AccessDenied": "AccessDeniedException",
    "ItemCollectionSizeLimitExceeded": "ItemCollectionSizeLimitExceededException",
    "ProvisionedThroughputExceeded": "ProvisionedThroughputExceededException",
    "ThrottlingError": "ThrottlingException",
    "TransactionConflict": "TransactionConflictException",
    "DuplicateItem": "DuplicateItemException",
}
_CONDITION_FAILED = "ConditionalCheckFailed"


@dataclass(frozen=True)
class SingleWrite:
    """One conditional single-item write.

    ``params``: the ``UpdateItem`` (``kind="update"``) or ``DeleteItem`` (``kind="delete"``) parameters as the
    adapters build them: ``Key``, expressions as strings, ``ExpressionAttributeNames`` / ``Values`` with plain
    values; no ``ReturnValues`` (a statement in a batch returns none). ``old_on_failure``: a failed condition
    returns the item as it was. ``absent_ok`` (deletes): an absent item counts as deleted, as a ``DELETE``
    statement reports it."""

    kind: Literal["update", "delete"]
    params: Mapping[str, Any]
    old_on_failure: bool = False
    absent_ok: bool = False

    def statement(self, table: str) -> Statement:
        if self.kind == "update":
            return update_statement(table, self.params)
        return delete_statement(table, self.params, absent_ok=self.absent_ok)

    def item(self) -> tuple[tuple[str, str], ...]:
        """The written item's identity (its key)."""
        return tuple(sorted((name, repr(value)) for name, value in dict(self.params.get("Key") or {}).items()))


@dataclass(frozen=True)
class WriteOutcome:
    """What one write did: ``applied``, or not (its condition failed; ``old`` is the item then, when asked and
    present), or ``error``, raised by :meth:`checked` as the single call would have raised it."""

    applied: bool
    old: dict[str, Any] | None = None
    error: Exception | None = None

    def checked(self) -> WriteOutcome:
        if self.error is not None:
            raise self.error
        return self


def distinct_batches(writes: Sequence[SingleWrite]) -> list[list[int]]:
    """Indexes of ``writes`` in batches of at most STATEMENT_BATCH distinct items, in order: a batch may not name
    an item twice, so a later write of the same item goes into a later batch (sent after)."""
    batches: list[tuple[list[int], set[tuple[tuple[str, str], ...]]]] = []
    last_batch: dict[tuple[tuple[str, str], ...], int] = {}
    for index, write in enumerate(writes):
        item = write.item()
        start = last_batch.get(item, -1) + 1
        for number in range(start, len(batches)):
            members, items = batches[number]
            if len(members) < STATEMENT_BATCH:
                break
        else:
            number = len(batches)
            batches.append(([], set()))
        members, items = batches[number]
        members.append(index)
        items.add(item)
        last_batch[item] = number
    return [members for members, _ in batches]


def one_by_one(table: PlainTable, writes: Sequence[SingleWrite]) -> list[WriteOutcome]:
    """Each write as its own ``UpdateItem`` / ``DeleteItem``."""
    return [_single(table, write) for write in writes]


def _single(table: PlainTable, write: SingleWrite) -> WriteOutcome:
    kwargs = dict(write.params)
    kwargs.pop("TableName", None)
    absent_ok = write.kind == "delete" and write.absent_ok
    if write.old_on_failure or absent_ok:
        kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    call = table.update_item if write.kind == "update" else table.delete_item
    try:
        call(**kwargs)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            return WriteOutcome(False, error=exc)
        item = exc.response.get("Item")
        if absent_ok and not item:
            return WriteOutcome(True)
        return WriteOutcome(False, old=from_wire(item) if item and write.old_on_failure else None)
    except Exception as exc:
        return WriteOutcome(False, error=exc)
    return WriteOutcome(True)


def by_statements(
    send: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    table: PlainTable,
    writes: Sequence[SingleWrite],
    pause: Callable[[int], None],
) -> list[WriteOutcome | None]:
    """At most STATEMENT_BATCH writes of distinct items as one ``BatchExecuteStatement`` (``send`` takes the
    statements and returns the responses); retryable statement errors resent alone, after ``pause(attempt)``.
    A request refused as a whole for its content (``ValidationException``) runs each write on its own."""
    if len(writes) > STATEMENT_BATCH or len({w.item() for w in writes}) != len(writes):
        raise ValueError(f"at most {STATEMENT_BATCH} writes of distinct items per batch")
    outcomes: list[WriteOutcome | None] = [None] * len(writes)
    requests: dict[int, dict[str, Any]] = {}
    for index, write in enumerate(writes):
        try:
            requests[index] = _request(write, write.statement(table.name))
        except Untranslatable as exc:  # that write's caller learns it; the others go
            outcomes[index] = WriteOutcome(False, error=exc)
    pending, attempt = list(requests), 0
    while pending:
        attempt += 1
        pending = _send_round(send, table, writes, [(i, requests[i]) for i in pending], outcomes, attempt)
        if pending:
            pause(attempt)
    return outcomes


def _send_round(
    send: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    table: PlainTable,
    writes: Sequence[SingleWrite],
    sending: list[tuple[int, dict[str, Any]]],
    outcomes: list[WriteOutcome | None],
    attempt: int,
) -> list[int]:
    """One request; the outcomes it settled are set, and the indexes to send again returned."""
    try:
        responses = send([request for _, request in sending])
    except ClientError as exc:
        refused = exc.response.get("Error", {}).get("Code") == "ValidationException"
        for i, _ in sending:
            outcomes[i] = _single(table, writes[i]) if refused else WriteOutcome(False, error=exc)
        return []
    except Exception as exc:
        for i, _ in sending:
            outcomes[i] = WriteOutcome(False, error=exc)
        return []
    retry = []
    for (i, _), response in zip(sending, responses, strict=True):
        outcomes[i] = _outcome(writes[i], response, retry_allowed=attempt < STATEMENT_RETRIES)
        if outcomes[i] is None:
            retry.append(i)
    return retry


def _request(write: SingleWrite, statement: Statement) -> dict[str, Any]:
    request: dict[str, Any] = {"Statement": statement.text, "Parameters": statement.parameters}
    if write.old_on_failure:
        request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    return request


def _outcome(write: SingleWrite, response: Mapping[str, Any], *, retry_allowed: bool) -> WriteOutcome | None:
    """One statement's outcome; None when it is to be sent again."""
    error = response.get("Error")
    if not error:
        return WriteOutcome(True)
    code = str(error.get("Code", ""))
    if code == _CONDITION_FAILED:
        item = error.get("Item")
        return WriteOutcome(False, old=from_wire(item) if item and write.old_on_failure else None)
    if code in RETRYABLE_STATEMENT_ERRORS and retry_allowed:
        return None
    operation = "UpdateItem" if write.kind == "update" else "DeleteItem"
    single = {"Error": {"Code": _SINGLE_CALL_CODES.get(code, code), "Message": str(error.get("Message", ""))}}
    return WriteOutcome(False, error=ClientError(single, operation))
