"""Cloud-data owners in DynamoDB: one owner item per (user, owner) and the guard every owned write carries.

Owner item ``U#<uid> / W#<ref>`` (``ref`` = sha256 of the compact JSON ``[type, id]``): ``owner_type``,
``owner_id``, ``active``, ``generation``, ``updated_at`` (ms). A missing item means active at generation 0; every
retire or restore adds one to the generation (a new item starts at 1).

A guarded write is a transaction holding its data actions **and** one ``ConditionCheck`` per distinct owner on
that owner's item (generation 0: the item must not exist; g > 0: active and generation g). A retirement updates
the same item, so DynamoDB orders the two: either the retirement commits first and the write fails its check
(``CLOUD_OWNER_RETIRED``), or the write commits first and is an ordinary pre-retirement write that the cleanup,
which takes its inventory only after the retirement, sees and deletes.

Owned resource items carry ``owner_ref`` (the owner item's ref; plain, so conditions and cleanup can use it),
``owner_gen`` (the generation the write asserted) and ``cloud_meta`` (the encrypted ``{owner, kind, generation}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.table import DynamoTable, TransactionCancelled, is_conditional_failure
from amsg.errors import CloudGuardError, OwnerChanged
from amsg.ports import OwnerClaim, OwnerState, guard_holds_for, owners_in_order

OWNER_PREFIX = "W#"
RETIRED_MESSAGE = "该归属者已停用，写入被拒绝"
IMMUTABLE_MESSAGE = "已有归属的资源不能通过普通写入改成其他归属者"


def owner_key(space: keys.KeySpace, user_id: str, ref: str) -> dict[str, str]:
    return {"PK": space.user_pk(user_id), "SK": OWNER_PREFIX + ref}


class GuardSet:
    """The distinct owner checks one transaction carries (two generations of one owner can never both hold)."""

    def __init__(self, space: keys.KeySpace) -> None:
        self.space = space
        self.generations: dict[str, int] = {}

    def add(self, ref: str, generation: int) -> None:
        if self.generations.get(ref, generation) != generation:
            raise CloudGuardError("CLOUD_OWNER_RETIRED", RETIRED_MESSAGE)
        self.generations[ref] = generation

    def __len__(self) -> int:
        return len(self.generations)

    def actions(self, user_id: str) -> list[dict[str, Any]]:
        return [guard_check(self.space, user_id, ref, generation) for ref, generation in self.generations.items()]


def guard_check(space: keys.KeySpace, user_id: str, ref: str, generation: int) -> dict[str, Any]:
    """The ``ConditionCheck`` that holds iff the owner is active at ``generation``."""
    check: dict[str, Any] = {"Key": owner_key(space, user_id, ref)}
    if generation == 0:
        check["ConditionExpression"] = "attribute_not_exists(PK)"
    else:
        check["ConditionExpression"] = "active = :true AND generation = :g"
        check["ExpressionAttributeValues"] = {":true": True, ":g": generation}
    return {"ConditionCheck": check}


def raise_if_guard_failed(cancelled: TransactionCancelled, first_check: int, count: int) -> None:
    """Map a failed owner check (actions ``first_check .. first_check+count``) to ``CLOUD_OWNER_RETIRED``."""
    if any(cancelled.failed(i) for i in range(first_check, first_check + count)):
        raise CloudGuardError("CLOUD_OWNER_RETIRED", RETIRED_MESSAGE) from None


def effective_owner(claim: OwnerClaim | None, generation: int, stored_ref: str | None) -> OwnerClaim | None:
    """The owner a write is guarded by, given what the item already records.

    Ownership is immutable through ordinary writes: naming another owner is ``CLOUD_OWNER_IMMUTABLE``; naming
    none inherits the recorded owner (checked at the generation the entry asserts, its record left as it is).
    """
    if claim is not None:
        if stored_ref is not None and stored_ref != claim.ref:
            raise CloudGuardError("CLOUD_OWNER_IMMUTABLE", IMMUTABLE_MESSAGE)
        return claim
    if stored_ref is not None:
        return OwnerClaim(ref=stored_ref, generation=generation, meta=None)
    return None


def owner_condition(stored_ref: str | None) -> tuple[str, dict[str, Any]]:
    """Condition (and values) that the item's recorded owner is still the one read."""
    if stored_ref is None:
        return "attribute_not_exists(owner_ref)", {}
    return "owner_ref = :oref", {":oref": stored_ref}


def owner_sets(claim: OwnerClaim | None) -> dict[str, Any]:
    """Attributes an owned write sets on its item (``cloud_meta`` only when the claim brings a new record)."""
    if claim is None:
        return {}
    sets: dict[str, Any] = {"owner_ref": claim.ref, "owner_gen": claim.generation}
    if claim.meta is not None:
        sets["cloud_meta"] = claim.meta
    return sets


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, Decimal)) else 0


def _state(item: Mapping[str, Any]) -> OwnerState:
    updated = item.get("updated_at")
    return OwnerState(
        owner_type=str(item.get("owner_type", "")),
        owner_id=str(item.get("owner_id", "")),
        active=bool(item.get("active", True)),
        generation=_int(item.get("generation")),
        updated_at=_int(updated) if isinstance(updated, (int, Decimal)) else None,
    )


class DynamoOwnerStore:
    def __init__(self, table: DynamoTable, *, space: keys.KeySpace = keys.SINGLE) -> None:
        self.db = table
        self.space = space

    def get(self, user_id: str, ref: str) -> OwnerState | None:
        """The owner item (consistent read), or None when the owner was never retired."""
        item = self.db.get(owner_key(self.space, user_id, ref))
        return _state(item) if item else None

    def list(self, user_id: str) -> list[OwnerState]:
        """Every owner item of the user, ordered by (type, id)."""
        return owners_in_order(
            [_state(item) for item in self.db.query_prefix(self.space.user_pk(user_id), OWNER_PREFIX)]
        )

    def guard_holds(self, user_id: str, ref: str, generation: int) -> bool:
        """The read-only form of the guard (used right before a push, which cannot be part of a transaction). A
        consistent ``BatchGetItem`` of the one item: the records of an SQS batch check their owners at the same
        point, and their reads then travel as one request (docs/delivery.md, "A batch shares its round trips")."""
        key = owner_key(self.space, user_id, ref)
        item = self.db.batch_get([key]).get((key["PK"], key["SK"]))
        return guard_holds_for(_state(item) if item else None, generation)

    def set_active(
        self, user_id: str, ref: str, owner_type: str, owner_id: str, *, active: bool, expected: int, now_ms: int
    ) -> OwnerState:
        """Retire (``active=False``) or restore, adding one to the generation, iff it is still ``expected``."""
        condition = "attribute_not_exists(PK)" if expected == 0 else "generation = :exp"
        values: dict[str, Any] = {":a": active, ":now": now_ms, ":t": owner_type, ":i": owner_id, ":one": 1}
        if expected:
            values[":exp"] = expected
        try:
            result = self.db.table.update_item(
                Key=owner_key(self.space, user_id, ref),
                UpdateExpression="SET active = :a, updated_at = :now, owner_type = if_not_exists(owner_type, :t), "
                "owner_id = if_not_exists(owner_id, :i) ADD generation :one",
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                raise OwnerChanged(ref) from None
            raise
        return _state(result["Attributes"])
