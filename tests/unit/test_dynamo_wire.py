"""The table's wire path (transactions and batch reads through a plain botocore client, values converted field by
field) and its resource-compatible table (plain_table.py, every other call of the adapters) must store and read
every value exactly as boto3's resource layer does."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import boto3
import pytest
from amsg.adapters.dynamo import plain_table
from amsg.adapters.dynamo.plain_table import BatchWriter, wire_request
from amsg.adapters.dynamo.table import DynamoTable, TransactionCancelled
from boto3.dynamodb.conditions import Attr, Key
from boto3.dynamodb.types import Binary
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tests.support.ddb_limits import table_clients
from tests.support.ddb_local import (  # noqa: F401 (fixtures)
    ddb_local_client,
    ddb_local_endpoint,
    ddb_local_server,
    ddb_local_table,
)

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

    @settings(max_examples=examples(80), deadline=None)
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


# ---- the resource-compatible table (plain_table.py) against boto3's resource layer --------------------------
# Each operation runs twice on the same table: through boto3's own resource ``Table`` under one partition key and
# through ``DynamoTable.table`` / ``.resource`` under another; the answers must be the same once the keys are
# swapped back. On moto (fast) and on DynamoDB Local (what DynamoDB answers).


@dataclass
class Pair:
    reference: Any  # boto3's resource Table
    ours: DynamoTable

    def both(self, operation: Callable[[Any, Any, str], Any]) -> tuple[Any, Any]:
        """``operation(table, resource, pk)`` through each; the results with our partition key renamed."""
        tag = uuid.uuid4().hex[:10]
        ref_pk, our_pk = f"REF#{tag}", f"OURS#{tag}"
        expected = _outcome(lambda: operation(self.reference, self.reference_resource, ref_pk))
        got = _outcome(lambda: operation(self.ours.table, self.ours.resource, our_pk))
        return _data(expected), _rename(_data(got), our_pk, ref_pk)

    @property
    def reference_resource(self) -> Any:
        return self.reference._amsg_resource  # set where the reference table is built


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ClientError as exc:
        return ("error", exc.response["Error"]["Code"])


def _data(result: Any) -> Any:
    """A response without its metadata (request ids, retry counts, consumed capacity)."""
    if isinstance(result, dict):
        return {k: v for k, v in result.items() if k not in {"ResponseMetadata", "ConsumedCapacity"}}
    if isinstance(result, list):
        return [_data(item) for item in result]
    return result


def _rename(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {_rename(k, old, new): _rename(v, old, new) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_rename(v, old, new) for v in value)
    return value


def _pair(name: str, endpoint_url: str | None) -> Pair:
    resource = boto3.resource("dynamodb", region_name="us-east-1", endpoint_url=endpoint_url)
    reference = resource.Table(name)
    reference._amsg_resource = resource
    return Pair(reference, DynamoTable(name, endpoint_url=endpoint_url, region="us-east-1"))


@pytest.fixture
def moto_pair(moto_table: str) -> Pair:
    return _pair(moto_table, None)


@pytest.fixture
def ddb_local_pair(request: pytest.FixtureRequest) -> Pair:
    return _pair(request.getfixturevalue("ddb_local_table"), request.getfixturevalue("ddb_local_endpoint"))


BACKENDS = ["moto_pair", pytest.param("ddb_local_pair", marks=pytest.mark.ddb_local)]


@pytest.fixture(params=BACKENDS)
def pair(request: pytest.FixtureRequest) -> Pair:
    return request.getfixturevalue(request.param)


def test_items_are_written_updated_and_deleted_as_the_resource_layer_does(pair: Pair) -> None:
    @settings(max_examples=25, deadline=None)
    @given(first=st.dictionaries(names, values, max_size=4), second=st.dictionaries(names, values, max_size=4))
    def check(first: dict, second: dict) -> None:
        def operation(table: Any, _: Any, pk: str) -> list[Any]:
            key = {"PK": pk, "SK": "item"}
            return [
                table.put_item(Item={**key, **first}),
                table.put_item(Item={**key, **second}, ReturnValues="ALL_OLD"),
                table.get_item(Key=key, ConsistentRead=True),
                table.update_item(
                    Key=key,
                    UpdateExpression="SET #a = :a, #b = :b",
                    ExpressionAttributeNames={"#a": "added", "#b": "other"},
                    ExpressionAttributeValues={":a": first or {"k": ""}, ":b": second or ""},
                    ReturnValues="ALL_NEW",
                ),
                table.update_item(Key=key, UpdateExpression="REMOVE added", ReturnValues="UPDATED_OLD"),
                table.get_item(Key=key, ProjectionExpression="PK, other"),
                table.delete_item(Key=key, ReturnValues="ALL_OLD"),
                table.get_item(Key=key, ConsistentRead=True),
            ]

        expected, got = pair.both(operation)
        assert got == expected

    check()


def test_condition_objects_become_the_same_expressions_and_failures(pair: Pair) -> None:
    def operation(table: Any, _: Any, pk: str) -> list[Any]:
        key = {"PK": pk, "SK": "c"}
        new = Attr("PK").not_exists()
        results = [
            table.put_item(
                Item={**key, "n": 1, "tags": {"x", "y"}, "blob": Binary(b"\x00\x01")}, ConditionExpression=new
            ),
            _outcome(lambda: table.put_item(Item={**key, "n": 9}, ConditionExpression=new)),
        ]
        for n in (1, 1):  # the second time n is 2: the condition fails and nothing is written
            results.append(
                _outcome(
                    lambda n=n: table.update_item(
                        Key=key,
                        UpdateExpression="SET #n = #n + :one, note = :empty",
                        ConditionExpression=Attr("n").eq(n) & Attr("tags").contains("x") & Attr("gone").not_exists(),
                        ExpressionAttributeNames={"#n": "n"},
                        ExpressionAttributeValues={":one": 1, ":empty": ""},
                        ReturnValues="UPDATED_NEW",
                    )
                )
            )
        results.append(
            _outcome(
                lambda: table.delete_item(Key=key, ConditionExpression="n = :n", ExpressionAttributeValues={":n": 5})
            )
        )
        results.append(
            table.delete_item(Key=key, ConditionExpression=Attr("n").between(Decimal("1.5"), 3), ReturnValues="ALL_OLD")
        )
        return results

    expected, got = pair.both(operation)
    assert got == expected
    assert got[1] == ("error", "ConditionalCheckFailedException")
    assert got[3] == ("error", "ConditionalCheckFailedException")
    assert got[5]["Attributes"]["n"] == Decimal(2) and got[5]["Attributes"]["blob"] == Binary(b"\x00\x01")


def test_queries_page_and_filter_as_the_resource_layer_does(pair: Pair) -> None:
    def operation(table: Any, _: Any, pk: str) -> list[Any]:
        with table.batch_writer() as writer:
            for i in range(12):
                writer.put_item(Item={"PK": pk, "SK": f"i#{i:02d}", "n": i, "m": {}, "l": [], "s": ""})
            writer.put_item(Item={"PK": pk, "SK": "other", "n": 100})
        pages, kwargs = (
            [],
            {
                "KeyConditionExpression": Key("PK").eq(pk) & Key("SK").begins_with("i#"),
                "FilterExpression": Attr("n").gt(2) & ~Attr("n").eq(7),
                "ConsistentRead": True,
                "Limit": 5,
            },
        )
        while True:
            page = table.query(**kwargs)
            pages.append(page)
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        pages.append(
            table.query(
                KeyConditionExpression="PK = :pk AND SK BETWEEN :lo AND :hi",
                ExpressionAttributeValues={":pk": pk, ":lo": "i#03", ":hi": "i#05"},
                ProjectionExpression="SK, n",
                ScanIndexForward=False,
                ConsistentRead=True,
            )
        )
        pages.append(table.query(KeyConditionExpression=Key("PK").eq(pk) & Key("SK").lt("i#02"), Select="COUNT"))
        return pages

    expected, got = pair.both(operation)
    assert got == expected
    assert [item["n"] for page in got[:-2] for item in page["Items"]] == [3, 4, 5, 6, 8, 9, 10, 11]
    assert len(got) == 5  # Limit 5 over 12 items: three pages, then the two other queries


def test_filtered_scans_page_as_the_resource_layer_does(pair: Pair) -> None:
    """A tenant's deletion walks the table with filtered scan pages (adapters/dynamo/tenant_purge.py)."""

    def operation(table: Any, _: Any, pk: str) -> list[Any]:
        with table.batch_writer() as writer:
            for i in range(7):
                writer.put_item(Item={"PK": f"{pk}#{i}", "SK": "x", "n": i})
        pages, kwargs = [], {"FilterExpression": Attr("PK").begins_with(f"{pk}#"), "Limit": 50, "ConsistentRead": True}
        while True:
            page = table.scan(**kwargs)
            pages.append(sorted((item["PK"], item["n"]) for item in page["Items"]))
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return sorted(item for page in pages for item in page)

    expected, got = pair.both(operation)
    assert got == expected
    assert [n for _, n in got] == list(range(7))


def test_batch_writes_and_batch_reads_match_the_resource_layer(pair: Pair) -> None:
    def operation(table: Any, resource: Any, pk: str) -> list[Any]:
        with table.batch_writer() as writer:
            for i in range(60):
                writer.put_item(Item={"PK": pk, "SK": f"b#{i:03d}", "v": "x" * i, "set": {i, i + 1}})
        with table.batch_writer() as writer:
            for i in range(0, 60, 2):
                writer.delete_item(Key={"PK": pk, "SK": f"b#{i:03d}"})
        keys = [{"PK": pk, "SK": f"b#{i:03d}"} for i in range(0, 10)]
        read = resource.batch_get_item(
            RequestItems={table.name: {"Keys": keys, "ConsistentRead": True, "ProjectionExpression": "SK, #s",
                                       "ExpressionAttributeNames": {"#s": "set"}}}
        )  # fmt: skip
        found = sorted(read["Responses"][table.name], key=lambda item: item["SK"])
        left = table.query(KeyConditionExpression=Key("PK").eq(pk), ConsistentRead=True)
        return [found, read.get("UnprocessedKeys") or {}, left["Items"], left["Count"]]

    expected, got = pair.both(operation)
    assert got == expected
    assert [item["SK"][-3:] for item in got[0]] == ["001", "003", "005", "007", "009"]
    assert got[3] == 30


def test_every_call_is_seen_once_by_a_hook_on_the_table_clients(moto_pair: Pair) -> None:
    """Test hooks (tests/support/ddb_limits) and the call-count benches register on the table's clients: every
    request of the resource-style table and of the wire path passes one of them, once, in wire form."""
    table = moto_pair.ours
    seen: list[tuple[str, Any]] = []
    for client in table_clients(table):
        client.meta.events.register(
            "before-parameter-build.dynamodb", lambda params, model, **_: seen.append((model.name, params.get("Key")))
        )
    key = {"PK": "HOOK#1", "SK": "a"}
    table.table.put_item(Item={**key, "n": 1})
    table.table.get_item(Key=key)
    table.table.update_item(Key=key, UpdateExpression="SET n = :n", ExpressionAttributeValues={":n": 2})
    table.transact([{"ConditionCheck": {"Key": key, "ConditionExpression": "attribute_exists(PK)"}}])
    list(table.query_prefix("HOOK#1", "a"))
    table.batch_get([key])
    table.table.delete_item(Key=key)
    wire_key = {"PK": {"S": "HOOK#1"}, "SK": {"S": "a"}}
    assert seen == [
        ("PutItem", None),
        ("GetItem", wire_key),
        ("UpdateItem", wire_key),
        ("TransactWriteItems", None),
        ("Query", None),
        ("BatchGetItem", None),
        ("DeleteItem", wire_key),
    ]


def test_the_callers_arguments_are_left_as_they_were(moto_pair: Pair) -> None:
    names, values = {"#n": "n"}, {":n": 1}
    item = {"PK": "ARGS#1", "SK": "a", "n": 1}
    moto_pair.ours.table.put_item(Item=item)
    moto_pair.ours.table.update_item(
        Key={"PK": "ARGS#1", "SK": "a"},
        UpdateExpression="SET #n = :n",
        ConditionExpression=Attr("n").exists(),
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )
    assert names == {"#n": "n"} and values == {":n": 1} and item == {"PK": "ARGS#1", "SK": "a", "n": 1}


def test_legacy_parameters_are_refused_rather_than_sent_untyped() -> None:
    with pytest.raises(TypeError, match="Expected"):
        wire_request({"TableName": "t", "Item": {"PK": "x"}, "Expected": {"PK": {"Exists": False}}})


class _Unprocessing:
    """A client whose BatchWriteItem leaves the last item of each request unprocessed ``times`` times."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.sent: list[int] = []

    def batch_write_item(self, RequestItems: dict[str, list[dict]]) -> dict:
        ((table, requests),) = RequestItems.items()
        self.sent.append(len(requests))
        if self.times > 0:
            self.times -= 1
            return {"UnprocessedItems": {table: requests[-1:]}}
        return {"UnprocessedItems": {}}


def test_the_batch_writer_resends_unprocessed_items(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain_table, "_pause", lambda attempt: None)
    client = _Unprocessing(times=2)
    with BatchWriter(client, "t") as writer:
        for i in range(30):
            writer.put_item(Item={"PK": "x", "SK": str(i)})
    assert client.sent == [25, 6, 1] and sum(client.sent) - 2 == 30


def test_a_batch_writer_that_makes_no_progress_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plain_table, "_pause", lambda attempt: None)
    client = _Unprocessing(times=10**6)
    with pytest.raises(RuntimeError, match="unprocessed"), BatchWriter(client, "t") as writer:
        writer.delete_item(Key={"PK": "x", "SK": "1"})
    assert len(client.sent) == plain_table.BATCH_WRITE_ROUNDS


def test_the_table_client_is_built_without_scanning_every_service(moto_table: str, monkeypatch) -> None:
    """session.py: botocore's loader lists every service directory twice per client; ours lists none of them,
    and the client still loads DynamoDB's model from botocore's data and works."""
    import botocore.loaders

    listed: list[str] = []
    real_listdir = os.listdir
    monkeypatch.setattr(botocore.loaders.os, "listdir", lambda path: listed.append(str(path)) or real_listdir(path))
    table = DynamoTable(moto_table, region="us-east-1")
    table.table.put_item(Item={"PK": "SESSION#1", "SK": "a"})
    assert table.get({"PK": "SESSION#1", "SK": "a"}) == {"PK": "SESSION#1", "SK": "a"}
    data_root = os.path.dirname(botocore.loaders.__file__) + "/data"
    assert data_root not in {os.path.normpath(p) for p in listed}, listed
    assert all("dynamodb" in p for p in listed), listed  # only the service's own versions
    assert isinstance(table.wire.meta.events, object) and table.wire.meta.service_model.service_name == "dynamodb"


def test_the_request_count_benches_still_count_every_call(moto_table: str, monkeypatch) -> None:
    """bench/counting.py hooks boto3 sessions as they are created; the table's session is one."""
    from bench import counting

    monkeypatch.setattr(boto3.session.Session, "__init__", boto3.session.Session.__init__)  # restored afterwards
    monkeypatch.setattr(counting, "_installed", False)
    counting.install()
    counting.reset()
    table = DynamoTable(moto_table, region="us-east-1")
    key = {"PK": "COUNT#1", "SK": "a"}
    table.table.put_item(Item=key)
    table.get(key)
    table.transact([{"ConditionCheck": {"Key": key, "ConditionExpression": "attribute_exists(PK)"}}])
    table.batch_delete([key])
    assert dict(counting.calls) == {
        "dynamodb.PutItem": 1,
        "dynamodb.GetItem": 1,
        "dynamodb.TransactWriteItems": 1,
        "dynamodb.BatchWriteItem": 1,
    }
    counting.reset()
