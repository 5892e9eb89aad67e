"""How a batch of claims (up to 25, of one key space or of a round's tenants) is written: the claims' conditional
updates in one request, then the claimed rows read back in one consistent ``BatchGetItem``.

``ClaimWrites=single`` (the default) sends them through the table's ``write_singles``: one
``BatchExecuteStatement`` of conditional ``UPDATE`` statements, each billed as the single write it is (3 units a
claim) and each with its own outcome. ``ClaimWrites=transaction`` sends them as one ``TransactWriteItems``
(6 units a claim; a failed condition cancels the whole transaction, so it is retried without the claims that
failed). Either way a claim that could not be written (throttled past the retries, refused) is left for the
caller to claim alone (``CLAIM_ALONE``), so one faulty task never holds back the others.

Reading back is exact: only a claim increments ``claim_version``, and nobody else can claim while our lease
holds, so the row read carries our claim (checked by lease owner and expiry). If the read fails after the claims
were written, the exception propagates; those tasks come back when their lease expires (later, never lost or
doubled).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from amsg.adapters.dynamo.single_writes import SingleWrite, WriteOutcome
from amsg.adapters.dynamo.table import DynamoTable, TransactionCancelled
from amsg.ports import CLAIM_ALONE, ClaimAlone

VERSIONED = "attribute_exists(claim_version)"
"""Added to a claim's condition when it travels as a statement: PartiQL has no ``ADD``, so the statement sets
``claim_version = claim_version + 1``, which needs the attribute. Every task is created with it; an item without
it fails this condition, and :func:`by_statements` leaves it to be claimed alone (``UpdateItem``'s ``ADD``)."""

Written = tuple[list[ClaimAlone | None], list[int]]
"""Per claim CLAIM_ALONE or None (not claimed), and the indexes of the claims written (to read back)."""


def by_statements(db: DynamoTable, updates: Sequence[Mapping[str, Any]]) -> Written:
    """The claims as conditional single writes in one request (statements; one ``UpdateItem`` each where the
    table sends no statements). A failed condition returns the item as it was, so that a task without a
    ``claim_version`` is told from a task claimed by someone else."""
    writes = [
        SingleWrite(
            "update",
            {**update, "ConditionExpression": f"{update['ConditionExpression']} AND {VERSIONED}"},
            old_on_failure=True,
        )
        for update in updates
    ]
    results: list[ClaimAlone | None] = [None] * len(writes)
    written: list[int] = []
    for index, outcome in enumerate(db.write_singles(writes)):
        if outcome.applied:
            written.append(index)
        elif _claim_alone(outcome):
            results[index] = CLAIM_ALONE
    return results, written


def _claim_alone(outcome: WriteOutcome) -> bool:
    """The write could not run (an error), or its condition failed on a task that has no ``claim_version``."""
    return outcome.error is not None or (outcome.old is not None and "claim_version" not in outcome.old)


def by_transaction(db: DynamoTable, updates: Sequence[Mapping[str, Any]]) -> Written:
    """The claims as one ``TransactWriteItems``: a claim whose condition fails is dropped and the rest retried;
    a transaction that cannot run at all (throttled past the SDK's retries, cancelled for another reason than
    a condition) leaves each claim to be claimed alone."""
    results: list[ClaimAlone | None] = [None] * len(updates)
    trying = list(range(len(updates)))
    while trying:
        try:
            db.transact([{"Update": dict(updates[i])} for i in trying])
        except TransactionCancelled as cancelled:
            lost = {i for k, i in enumerate(trying) if cancelled.failed(k)}
            if lost:
                trying = [i for i in trying if i not in lost]  # those stay None
                continue
        except ClientError:
            pass
        else:
            return results, trying
        for i in trying:  # the transaction could not run: each left to be claimed alone
            results[i] = CLAIM_ALONE
        return results, []
    return results, []


def read_back(
    db: DynamoTable, keys: Mapping[int, dict[str, str]], owner: str, lease_until: str
) -> dict[int, dict[str, Any]]:
    """The items of the written claims (by index), in one consistent ``BatchGetItem``: those still pending under
    our lease (a task settled or deleted since has nothing to enqueue)."""
    found = db.batch_get_now(list(keys.values()))
    rows: dict[int, dict[str, Any]] = {}
    for i, key in keys.items():
        item = found.get((key["PK"], key["SK"]))
        if (
            item is not None
            and item.get("status", "pending") == "pending"
            and item.get("lease_owner") == owner
            and item.get("lease_until") == lease_until
        ):
            rows[i] = item
    return rows
