"""A tenant's count of pending tasks, kept exact by the writes that create or end a pending task
(docs/tenancy.md, limits).

Every write that makes a task pending adds one to ``N#<tenantId>#PENDING`` in the same transaction, under the
tenant's limit; every write that ends a pending task (settled, cancelled, deleted, removed by a cleanup)
subtracts one in the same transaction, conditioned on the task still being pending. The count is therefore
exact whatever runs concurrently, and the limit check costs no read: the counter item carries a per-tenant
override (``mx``; 0 = no limit) next to the count, and the deployment's default is in the condition.

The single line keeps no counter: :func:`counted` is False and callers add nothing to their writes.
"""

from __future__ import annotations

from typing import Any

from amsg.adapters.dynamo.keys import KeySpace

COUNT = "n"
OVERRIDE = "mx"


def counted(space: KeySpace) -> bool:
    """Whether writes in this space keep the pending count (a tenant's space only)."""
    return space.tenant_id is not None


def increment(space: KeySpace, default_limit: int) -> dict[str, Any]:
    """The transaction action that counts one more pending task, refused (ConditionalCheckFailed) at the limit:
    the override when the counter carries one (0: none), else ``default_limit`` (0: none)."""
    condition = f"attribute_not_exists({COUNT}) OR {OVERRIDE} = :zero OR {COUNT} < {OVERRIDE}"
    values: dict[str, Any] = {":one": 1, ":zero": 0}
    if default_limit > 0:
        condition += f" OR (attribute_not_exists({OVERRIDE}) AND {COUNT} < :dflt)"
        values[":dflt"] = default_limit
    else:
        condition += f" OR attribute_not_exists({OVERRIDE})"
    return {
        "Update": {
            "Key": space.pending_counter_key(),
            "UpdateExpression": f"SET {COUNT} = if_not_exists({COUNT}, :zero) + :one",
            "ConditionExpression": condition,
            "ExpressionAttributeValues": values,
        }
    }


def adjust(space: KeySpace, by: int) -> dict[str, Any]:
    """The transaction action that adds ``by`` (either sign) to the count without the limit check: an import
    carries in pending tasks the tenant already had, which no limit may refuse (docs/import.md)."""
    return {
        "Update": {
            "Key": space.pending_counter_key(),
            "UpdateExpression": f"SET {COUNT} = if_not_exists({COUNT}, :zero) + :by",
            "ExpressionAttributeValues": {":by": by, ":zero": 0},
        }
    }


DECREMENT = f"SET {COUNT} = if_not_exists({COUNT}, :zero) - :by"


def decrement(space: KeySpace, by: int = 1) -> dict[str, Any]:
    """The transaction action that counts ``by`` pending tasks less (its caller conditions each task on being
    pending, so a task is never subtracted twice)."""
    return {"Update": _decrement_body(space.pending_counter_key(), by)}


def _decrement_body(key: dict[str, str], by: int) -> dict[str, Any]:
    return {"Key": key, "UpdateExpression": DECREMENT, "ExpressionAttributeValues": {":by": by, ":zero": 0}}


def is_decrement(action: dict[str, Any]) -> bool:
    """An unconditional decrement of a pending counter: several of them on one counter fold into one action
    when the coalescer merges a batch's settlements into one transaction (coalescing.py)."""
    body = action.get("Update")
    return isinstance(body, dict) and body.get("UpdateExpression") == DECREMENT and "ConditionExpression" not in body


def fold(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``actions`` with the decrements of each counter summed into one (at the place of the first)."""
    totals: dict[tuple[str, str, str], int] = {}
    out: list[dict[str, Any]] = []
    for action in actions:
        if not is_decrement(action):
            out.append(action)
            continue
        body = action["Update"]
        item = (str(body.get("TableName")), body["Key"]["PK"], body["Key"]["SK"])
        if item not in totals:
            out.append(action)  # replaced below by the total
        totals[item] = totals.get(item, 0) + int(body["ExpressionAttributeValues"][":by"])
    for index, action in enumerate(out):
        if is_decrement(action):
            body = action["Update"]
            item = (str(body.get("TableName")), body["Key"]["PK"], body["Key"]["SK"])
            merged = _decrement_body(body["Key"], totals[item])
            if "TableName" in body:
                merged["TableName"] = body["TableName"]
            out[index] = {"Update": merged}
    return out


def and_pending(action: dict[str, Any]) -> dict[str, Any]:
    """``action`` (a Delete or Update body of a task) additionally conditioned on the task being pending."""
    body = dict(action)
    condition = body.get("ConditionExpression")
    body["ConditionExpression"] = f"({condition}) AND #st = :pst" if condition else "#st = :pst"
    body["ExpressionAttributeNames"] = {**body.get("ExpressionAttributeNames", {}), "#st": "status"}
    body["ExpressionAttributeValues"] = {**body.get("ExpressionAttributeValues", {}), ":pst": "pending"}
    return body


def with_status(action: dict[str, Any], status: str) -> dict[str, Any]:
    """A task's Delete body additionally conditioned on the status it was read with."""
    body = dict(action)
    condition = body.get("ConditionExpression")
    body["ConditionExpression"] = f"({condition}) AND #st = :rst" if condition else "#st = :rst"
    body["ExpressionAttributeNames"] = {**body.get("ExpressionAttributeNames", {}), "#st": "status"}
    body["ExpressionAttributeValues"] = {**body.get("ExpressionAttributeValues", {}), ":rst": status}
    return body


def read(table: Any, space: KeySpace) -> tuple[int, int | None]:
    """(pending count, per-tenant override or None) of a space (0, None for the single line)."""
    if not counted(space):
        return 0, None
    item = table.get(space.pending_counter_key(), consistent=True) or {}
    override = item.get(OVERRIDE)
    return int(item.get(COUNT, 0)), None if override is None else int(override)


def set_override(table: Any, space: KeySpace, limit: int | None) -> None:
    """A tenant's own pending-task limit (0: none), or None to follow the deployment's default."""
    if not counted(space):
        raise ValueError("the single line has no per-tenant limit")
    if limit is None:
        table.table.update_item(Key=space.pending_counter_key(), UpdateExpression=f"REMOVE {OVERRIDE}")
        return
    if limit < 0:
        raise ValueError("a limit is 0 (none) or positive")
    table.table.update_item(
        Key=space.pending_counter_key(),
        UpdateExpression=f"SET {OVERRIDE} = :mx",
        ExpressionAttributeValues={":mx": limit},
    )
