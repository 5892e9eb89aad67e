"""The table's wire path (transactions and batch reads through a plain botocore client, values converted field by
field) must store and read every value exactly as boto3's resource layer does: the rest of the code reads with the
resource and writes with both."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from amsg.adapters.dynamo.table import DynamoTable, TransactionCancelled
from boto3.dynamodb.types import Binary
from hypothesis import given, settings
from hypothesis import strategies as st

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).filter(lambda n: n not in {"PK", "SK"})
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=20),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.decimals(min_value=-(10**6), max_value=10**6, places=4, allow_nan=False, allow_infinity=False),
    st.binary(max_size=12).map(Binary),
    st.frozensets(st.text(max_size=6), min_size=1, max_size=4),
    st.frozensets(st.integers(min_value=-1000, max_value=1000), min_size=1, max_size=4),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(names, inner, max_size=4)),
    max_leaves=12,
)


def test_the_wire_path_writes_and_reads_values_as_the_resource_layer_does(moto_table: str) -> None:
    table = DynamoTable(moto_table, region="us-east-1")

    @settings(max_examples=80, deadline=None)
    @given(attributes=st.dictionaries(names, values, max_size=5))
    def check(attributes: dict) -> None:
        pk = f"WIRE#{uuid.uuid4()}"
        by_resource = {"PK": pk, "SK": "resource", **attributes}
        by_wire = {"PK": pk, "SK": "wire", **attributes}
        table.table.put_item(Item=by_resource)
        table.transact([{"Put": {"Item": by_wire}}])

        expected = table.get({"PK": pk, "SK": "resource"})  # what the resource layer reads back
        assert expected is not None
        assert table.get({"PK": pk, "SK": "wire"}) == {**expected, "SK": "wire"}
        found = table.batch_get_now([{"PK": pk, "SK": "resource"}, {"PK": pk, "SK": "wire"}])
        assert found[(pk, "resource")] == expected
        assert found[(pk, "wire")] == {**expected, "SK": "wire"}

    check()


def test_the_wire_path_sends_expression_values_and_reports_each_failed_condition(moto_table: str) -> None:
    table = DynamoTable(moto_table, region="us-east-1")
    pk = f"WIRE#{uuid.uuid4()}"
    table.transact(
        [
            {"Put": {"Item": {"PK": pk, "SK": "a", "n": 1}}},
            {"Put": {"Item": {"PK": pk, "SK": "b", "n": 1}}},
        ]
    )
    bump = {
        "Key": {"PK": pk, "SK": "a"},
        "UpdateExpression": "SET n = n + :one, tags = :tags",
        "ConditionExpression": "n = :n",
        "ExpressionAttributeValues": {":one": 1, ":n": 1, ":tags": {"x", "y"}},
    }
    table.transact([{"Update": bump}])
    assert table.get({"PK": pk, "SK": "a"}) == {"PK": pk, "SK": "a", "n": Decimal(2), "tags": {"x", "y"}}

    with pytest.raises(TransactionCancelled) as cancelled:
        table.transact(
            [
                {
                    "ConditionCheck": {
                        "Key": {"PK": pk, "SK": "b"},
                        "ConditionExpression": "n = :n",
                        "ExpressionAttributeValues": {":n": 1},
                    }
                },
                {"Update": bump},  # n is 2 now: this condition fails, and nothing is written
            ]
        )
    assert not cancelled.value.failed(0) and cancelled.value.failed(1)
    assert table.get({"PK": pk, "SK": "a"})["n"] == Decimal(2)


def test_an_action_without_its_table_is_refused_before_it_is_sent(moto_table: str) -> None:
    table = DynamoTable(moto_table, region="us-east-1")
    with pytest.raises(ValueError, match="TableName"):
        table.transact_now([{"Put": {"Item": {"PK": "WIRE#x", "SK": "a"}}}])
