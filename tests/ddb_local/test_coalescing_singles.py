"""Single conditional writes of a batch's concurrent records (adapters/dynamo/coalescing.py, the third kind), on
DynamoDB Local: the participants' writes travel merged as ``BatchExecuteStatement`` requests, and every thread gets
exactly the outcome it would have had alone."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest
from amsg.adapters.dynamo.single_writes import SingleWrite, WriteOutcome
from amsg.adapters.dynamo.table import DynamoTable
from botocore.exceptions import ClientError

from tests.support.aws_calls import record_aws_calls
from tests.support.coalescing import counter_key, run_together

pytestmark = pytest.mark.ddb_local


@pytest.fixture
def table(ddb_local_endpoint, ddb_local_table) -> DynamoTable:
    return DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1")


def _bump(name: str, expect: int) -> SingleWrite:
    """Compare-and-set ``n`` of an existing item from ``expect`` to ``expect + 1``."""
    return SingleWrite(
        "update",
        {
            "Key": counter_key(name),
            "UpdateExpression": "SET n = :new",
            "ConditionExpression": "n = :cur",
            "ExpressionAttributeValues": {":new": expect + 1, ":cur": expect},
        },
        old_on_failure=True,
    )


def _seed(table: DynamoTable, *names: str, n: int = 0) -> None:
    for name in names:
        table.table.put_item(Item={**counter_key(name), "n": n})


def _n(table: DynamoTable, name: str) -> int:
    return int(table.get(counter_key(name))["n"])


def _operations(recorder: Any) -> Counter[str]:
    return Counter(call.operation for call in recorder.calls if call.service == "dynamodb")


def _applied(table: DynamoTable, *writes: SingleWrite) -> list[bool]:
    return [outcome.checked().applied for outcome in table.write_singles(list(writes))]


def test_the_participants_writes_travel_as_one_request_and_each_gets_its_own_outcome(table):
    names = [str(uuid.uuid4()) for _ in range(5)]
    _seed(table, *names)
    _seed(table, names[3], n=7)  # names[3]'s condition fails: the others still apply
    with record_aws_calls() as recorder:
        results = run_together(table, [lambda name=name: table.write_singles([_bump(name, 0)]) for name in names])
    assert _operations(recorder) == {"BatchExecuteStatement": 1}
    assert [[o.applied for o in r] for r in results] == [[True], [True], [True], [False], [True]]
    (failed,) = results[3]
    assert failed.old is not None and failed.old["n"] == 7  # its own old item, asked for
    assert [_n(table, name) for name in names] == [1, 1, 1, 7, 1]


def test_several_writes_per_participant_keep_their_order_in_the_results(table):
    names = [str(uuid.uuid4()) for _ in range(6)]
    _seed(table, *names)
    with record_aws_calls() as recorder:
        results = run_together(
            table,
            [
                lambda: _applied(table, _bump(names[0], 0), _bump(names[1], 5), _bump(names[2], 0)),
                lambda: _applied(table, _bump(names[3], 5), _bump(names[4], 0), _bump(names[5], 0)),
            ],
        )
    assert results == [[True, False, True], [False, True, True]]
    assert _operations(recorder) == {"BatchExecuteStatement": 1}


def test_writes_of_one_item_go_in_successive_requests_so_a_compare_and_set_still_excludes(table):
    name = str(uuid.uuid4())
    _seed(table, name)
    with record_aws_calls() as recorder:
        results = run_together(table, [lambda: _applied(table, _bump(name, 0)) for _ in range(3)])
    assert sorted(r[0] for r in results) == [False, False, True]
    assert _n(table, name) == 1
    assert _operations(recorder) == {"BatchExecuteStatement": 3}


def test_a_refused_part_raises_in_its_own_thread_only(table, monkeypatch):
    """Injected: DynamoDB answers one statement of the merged request with ``ValidationError``; that thread's
    write raises the single call's ``ValidationException``, the others apply."""
    names = [str(uuid.uuid4()) for _ in range(3)]
    _seed(table, *names)
    real = table._send_statements

    def refuse_second(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        doomed = [i for i, r in enumerate(requests) if r["Parameters"][1]["S"] == f"U#{names[1]}"]
        kept = [r for i, r in enumerate(requests) if i not in doomed]
        answers = iter(real(kept))
        return [
            {"Error": {"Code": "ValidationError", "Message": "no"}} if i in doomed else next(answers)
            for i in range(len(requests))
        ]

    monkeypatch.setattr(table, "_send_statements", refuse_second)
    results = run_together(table, [lambda name=name: _applied(table, _bump(name, 0)) for name in names])
    assert results[0] == [True] and results[2] == [True]
    assert isinstance(results[1], ClientError) and results[1].response["Error"]["Code"] == "ValidationException"
    assert [_n(table, name) for name in names] == [1, 0, 1]


def test_throttled_statements_of_a_merged_request_are_sent_again_alone(table, monkeypatch):
    """Injected: the first merged request throttles two statements (DynamoDB did not run them); only those two are
    sent again, after a pause, and every thread ends with the outcome it would have had alone."""
    names = [str(uuid.uuid4()) for _ in range(4)]
    _seed(table, *names)
    _seed(table, names[2], n=3)
    real, sent = table._send_statements, []

    def throttle_first(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        sent.append(sorted(r["Parameters"][1]["S"] for r in requests))
        if len(sent) > 1:
            return real(requests)
        throttled = {f"U#{names[1]}", f"U#{names[2]}"}
        kept = [r for r in requests if r["Parameters"][1]["S"] not in throttled]
        answers = iter(real(kept))
        return [
            {"Error": {"Code": "ThrottlingError", "Message": "slow"}}
            if r["Parameters"][1]["S"] in throttled
            else next(answers)
            for r in requests
        ]

    monkeypatch.setattr(table, "_send_statements", throttle_first)
    pauses: list[int] = []
    monkeypatch.setattr("amsg.adapters.dynamo.table._statement_pause", pauses.append)
    jobs = [lambda name=name: table.write_singles([_bump(name, 0)]) for name in names]
    results: list[Any] = run_together(table, jobs)
    assert [[o.applied for o in r] for r in results] == [[True], [True], [False], [True]]
    assert sent[1] == sorted([f"U#{names[1]}", f"U#{names[2]}"]) and len(sent) == 2 and pauses == [1]
    assert [_n(table, name) for name in names] == [1, 1, 3, 1]
    assert all(isinstance(o, WriteOutcome) for r in results for o in r)


def test_with_statements_off_the_writes_go_one_request_each_without_waiting(ddb_local_endpoint, ddb_local_table):
    table = DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1", statements=False)
    names = [str(uuid.uuid4()) for _ in range(3)]
    _seed(table, *names)
    with record_aws_calls() as recorder:
        results = run_together(table, [lambda name=name: _applied(table, _bump(name, 0)) for name in names])
    assert results == [[True]] * 3
    assert _operations(recorder) == {"UpdateItem": 3}
