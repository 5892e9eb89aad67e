"""The embedded moto server's memory stays bounded under writes (it used to grow by a table copy per transaction)."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from amsg_local.embedded import EmbeddedMoto, stop_instance_tracking

TABLE = "amsg-moto-memory"
PREFILLED = 150
WRITES = 40


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedMoto]:
    moto = EmbeddedMoto().start()
    _ddb(moto).create_table(  # here, not in a test: xdist may run this module's tests on different workers
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    yield moto
    moto.stop()


def _fill(client: Any, prefix: str, count: int) -> None:
    """``count`` rows of ~200 bytes, 25 per BatchWriteItem: the rows are the point, not the requests."""
    rows = [{"pk": {"S": f"{prefix}#{index}"}, "sk": {"S": "x"}, "v": {"S": "y" * 200}} for index in range(count)]
    for start in range(0, count, 25):
        batch = [{"PutRequest": {"Item": row}} for row in rows[start : start + 25]]
        assert not client.batch_write_item(RequestItems={TABLE: batch}).get("UnprocessedItems")


def _ddb(server: EmbeddedMoto) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=server.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def _transaction(client: Any, index: int) -> None:
    """The shape of a schedule-message write: a conditional put of a new row and a counter update."""
    client.transact_write_items(
        TransactItems=[
            {
                "Put": {
                    "TableName": TABLE,
                    "Item": {"pk": {"S": f"USER#u{index}"}, "sk": {"S": "TASK#1"}, "body": {"S": "x" * 200}},
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": {"pk": {"S": "COUNTER"}, "sk": {"S": "C"}},
                    "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
        ]
    )


def _live_items() -> int:
    """moto's stored-item objects alive in this process (a table copy is one per item of the table)."""
    from moto.dynamodb.models.dynamo_type import Item

    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is Item)


def test_transactions_do_not_keep_table_copies(server: EmbeddedMoto) -> None:
    client = _ddb(server)
    _fill(client, "FILL", PREFILLED)
    _transaction(client, -1)  # warm every code path once
    before = _live_items()
    for index in range(WRITES):
        _transaction(client, index)
    grown = _live_items() - before
    # Each transaction deep-copied the table (moto's rollback copy) and kept it: ~150 items per write. What a
    # write legitimately adds is its own row. Counted as objects, not bytes, so that other threads of the test
    # process (a stack an earlier test left winding down) cannot blur the figure.
    assert grown <= WRITES * 2, f"{grown / WRITES:.1f} stored items retained per write"


def test_models_are_not_tracked(server: EmbeddedMoto) -> None:
    from moto.dynamodb.models.dynamo_type import Item

    client = _ddb(server)
    client.put_item(TableName=TABLE, Item={"pk": {"S": "TRACK"}, "sk": {"S": "x"}})
    assert Item.instances_tracked == []
    stop_instance_tracking()  # idempotent
    client.put_item(TableName=TABLE, Item={"pk": {"S": "TRACK"}, "sk": {"S": "y"}})
    assert Item.instances_tracked == []
    assert client.get_item(TableName=TABLE, Key={"pk": {"S": "TRACK"}, "sk": {"S": "y"}})["Item"]["sk"] == {"S": "y"}


def _key(pk: str, sk: str = "x") -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def test_a_cancelled_transaction_leaves_every_item_as_it_was(server: EmbeddedMoto) -> None:
    client = _ddb(server)
    client.put_item(TableName=TABLE, Item={**_key("RB#counter"), "n": {"N": "1"}, "tags": {"SS": ["a"]}})
    client.put_item(TableName=TABLE, Item={**_key("RB#gone"), "v": {"S": "keep me"}})
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": _key("RB#counter"),
                        "UpdateExpression": "ADD n :one, tags :t",
                        "ExpressionAttributeValues": {":one": {"N": "1"}, ":t": {"SS": ["b"]}},
                    }
                },
                {"Put": {"TableName": TABLE, "Item": {**_key("RB#new"), "v": {"S": "new"}}}},
                {"Delete": {"TableName": TABLE, "Key": _key("RB#gone")}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": _key("RB#missing"),
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    counter = client.get_item(TableName=TABLE, Key=_key("RB#counter"))["Item"]
    assert counter["n"] == {"N": "1"} and counter["tags"] == {"SS": ["a"]}
    assert "Item" not in client.get_item(TableName=TABLE, Key=_key("RB#new"))
    assert client.get_item(TableName=TABLE, Key=_key("RB#gone"))["Item"]["v"] == {"S": "keep me"}
    # and a transaction that succeeds applies everything
    client.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": _key("RB#counter"),
                    "UpdateExpression": "ADD n :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
            {"Delete": {"TableName": TABLE, "Key": _key("RB#gone")}},
        ]
    )
    assert client.get_item(TableName=TABLE, Key=_key("RB#counter"))["Item"]["n"] == {"N": "2"}
    assert "Item" not in client.get_item(TableName=TABLE, Key=_key("RB#gone"))


def _fastest_transaction_s(client: Any, first: int, count: int = 5) -> float:
    """The fastest of ``count`` transactions: a copy of the table slows every one of them, a busy machine only
    some."""
    times = []
    for index in range(first, first + count):
        started = time.perf_counter()
        _transaction(client, index)
        times.append(time.perf_counter() - started)
    return min(times)


def test_transaction_time_does_not_grow_with_the_table(server: EmbeddedMoto) -> None:
    client = _ddb(server)
    small = _fastest_transaction_s(client, 10_000)
    _fill(client, "BIG", 1_500)
    large = _fastest_transaction_s(client, 20_000)
    # moto deep-copied the whole table per transaction: ~1,700 items made each one take hundreds of ms more
    assert large < small * 3 + 0.05, f"{small * 1000:.1f} ms -> {large * 1000:.1f} ms"
