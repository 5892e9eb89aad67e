"""The table client's lean transport (amsg.adapters.dynamo.transport) on DynamoDB Local: DynamoDB's answers,
errors and cancellations come back parsed as before, hooks injecting faults before the send still take effect,
and threads share one keep-alive pool."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from amsg.adapters.dynamo.table import DynamoTable, TransactionCancelled
from amsg.adapters.dynamo.transport import LeanSession
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

pytestmark = pytest.mark.ddb_local


@pytest.fixture
def table(ddb_local_endpoint: str, ddb_local_table: str, monkeypatch: pytest.MonkeyPatch) -> DynamoTable:
    monkeypatch.delenv("AMSG_DYNAMO_TRANSPORT", raising=False)
    built = DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1")
    assert isinstance(built.wire._endpoint.http_session, LeanSession)
    return built


def test_a_failed_condition_comes_back_as_dynamodbs_error(table: DynamoTable) -> None:
    table.table.put_item(Item={"PK": "t#1", "SK": "x", "v": 1})
    with pytest.raises(ClientError) as failed:
        table.table.put_item(Item={"PK": "t#1", "SK": "x", "v": 2}, ConditionExpression="attribute_not_exists(PK)")
    assert failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert table.get({"PK": "t#1", "SK": "x"}) == {"PK": "t#1", "SK": "x", "v": 1}


def test_a_cancelled_transaction_reports_each_actions_reason(table: DynamoTable) -> None:
    table.table.put_item(Item={"PK": "t#2", "SK": "x", "v": 1})
    actions = [
        {"Put": {"Item": {"PK": "t#2", "SK": "y", "v": 1}}},
        {
            "Update": {
                "Key": {"PK": "t#2", "SK": "x"},
                "UpdateExpression": "SET v = :two",
                "ConditionExpression": "v = :zero",
                "ExpressionAttributeValues": {":two": 2, ":zero": 0},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
    ]
    with pytest.raises(TransactionCancelled) as cancelled:
        table.transact(actions)
    assert cancelled.value.reasons == ["None", "ConditionalCheckFailed"]
    assert cancelled.value.items[1] == {"PK": "t#2", "SK": "x", "v": 1}
    assert table.get({"PK": "t#2", "SK": "y"}) is None


def test_a_before_send_fault_is_answered_by_the_hook_and_retried_by_botocore(table: DynamoTable) -> None:
    """A hook answering the first two sends with a throttling error: botocore retries, the third send goes over
    the transport, and the write lands once."""
    sent: list[str] = []

    def throttle(request: Any, **_: Any) -> AWSResponse | None:
        sent.append(request.url)
        if len(sent) > 2:
            return None
        body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException", "message": "slow"})

        class Raw:
            def stream(self, **__: Any) -> Any:
                yield body.encode()

        return AWSResponse(request.url, 400, {"x-amzn-requestid": "t"}, Raw())

    table.wire.meta.events.register("before-send.dynamodb.PutItem", throttle)
    answer = table.wire.put_item(TableName=table.name, Item={"PK": {"S": "t#3"}, "SK": {"S": "x"}})
    assert answer["ResponseMetadata"]["RetryAttempts"] == 2 and len(sent) == 3
    assert table.get({"PK": "t#3", "SK": "x"}) == {"PK": "t#3", "SK": "x"}


def test_a_large_batch_read_and_concurrent_writers_share_the_pool(table: DynamoTable) -> None:
    value = "v" * 350_000  # 12 such items: a ~4 MB BatchGetItem answer, read to its length
    keys = [{"PK": "t#4", "SK": f"{i:03d}"} for i in range(12)]
    table.batch_put({**key, "v": value} for key in keys)
    found = table.batch_get(keys)
    assert len(found) == 12 and all(item["v"] == value for item in found.values())
    session = table.wire._endpoint.http_session
    errors: list[BaseException] = []

    def bump(_: int) -> None:
        try:
            table.table.update_item(
                Key={"PK": "t#4", "SK": "n"}, UpdateExpression="ADD n :one", ExpressionAttributeValues={":one": 1}
            )
        except BaseException as exc:
            errors.append(exc)

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(bump, range(300)))
    assert errors == []
    assert table.get({"PK": "t#4", "SK": "n"}) == {"PK": "t#4", "SK": "n", "n": 300}
    assert 1 <= session.idle_connections() <= 6
