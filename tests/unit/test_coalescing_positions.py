"""A cancelled merged transaction's reasons are matched back to its parts' actions through the folding of pending
decrements and the sharing of identical checks (adapters/dynamo/coalescing.py): every action must map to the one
action of the merged transaction that stands for it."""

from __future__ import annotations

from typing import Any

from amsg.adapters.dynamo import pending
from amsg.adapters.dynamo.coalescing import _item_of, _positions, _shared_checks
from hypothesis import given
from hypothesis import strategies as st

from tests.support.coalescing import CounterSpace


def _action(kind: str, n: int) -> dict[str, Any]:
    key = {"PK": f"U#{n}", "SK": "C#n"}
    if kind == "decrement":
        return {"Update": {**pending.decrement(CounterSpace(key))["Update"], "TableName": "t"}}
    if kind == "check":
        body = {"Key": key, "ConditionExpression": "n = :v", "ExpressionAttributeValues": {":v": 1}}
        return {"ConditionCheck": {**body, "TableName": "t"}}
    body = {"Key": key, "UpdateExpression": "SET n = :v", "ExpressionAttributeValues": {":v": 2}}
    return {"Update": {**body, "TableName": "t"}}


@given(st.lists(st.tuples(st.sampled_from(["decrement", "check", "write"]), st.integers(0, 4)), max_size=30))
def test_every_action_maps_to_the_merged_action_that_stands_for_it(plan):
    actions = [_action(kind, n) for kind, n in plan]
    merged = _shared_checks(pending.fold(actions))
    where = _positions(actions)
    assert len(where) == len(actions)
    assert sorted(set(where)) == list(range(len(merged)))  # every merged action stands for at least one
    for action, position in zip(actions, where, strict=True):
        stands_for = merged[position]
        if pending.is_decrement(action):  # the counter's total, at the place of its first decrement
            assert pending.is_decrement(stands_for) and _item_of(stands_for) == _item_of(action)
        else:  # itself, or the first identical check
            assert stands_for == action
