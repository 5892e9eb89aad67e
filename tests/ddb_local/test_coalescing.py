"""Shared round trips for a batch's concurrent records (adapters/dynamo/coalescing.py), on DynamoDB Local:
merged calls go out as one request, and every caller gets exactly the outcome it would have had alone."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from amsg.adapters.dynamo import pending
from amsg.adapters.dynamo.coalescing import DynamoCoalescer
from amsg.adapters.dynamo.table import DynamoTable, TransactionCancelled
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.aws_calls import record_aws_calls
from tests.support.coalescing import CounterSpace, counter_key, run_together

pytestmark = pytest.mark.ddb_local


@pytest.fixture
def table(ddb_local_endpoint, ddb_local_table) -> DynamoTable:
    return DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1")


def _bump(name: str, expect: int) -> dict[str, Any]:
    """Compare-and-set ``n`` from ``expect`` to ``expect + 1`` (fails when ``n`` is anything else)."""
    return {
        "Update": {
            "Key": counter_key(name),
            "UpdateExpression": "SET n = :new",
            "ConditionExpression": "attribute_not_exists(n) OR n = :cur",
            "ExpressionAttributeValues": {":new": expect + 1, ":cur": expect},
        }
    }


def _n(table: DynamoTable, name: str) -> int | None:
    item = table.get(counter_key(name))
    return None if item is None else int(item["n"])


def _operations(recorder) -> Counter[str]:
    return Counter(call.operation for call in recorder.calls if call.service == "dynamodb")


def test_disjoint_transactions_of_the_participants_travel_as_one_request(table):
    names = [str(uuid.uuid4()) for _ in range(5)]
    with record_aws_calls() as recorder:
        results = run_together(
            table, [lambda name=name: table.transact([_bump(name, 0), _bump(name + "b", 0)]) for name in names]
        )
    assert results == [None] * 5
    assert _operations(recorder) == {"TransactWriteItems": 1}
    assert all(_n(table, name) == 1 and _n(table, name + "b") == 1 for name in names)


def test_a_failed_part_gets_its_own_reasons_without_a_request_and_the_others_commit_in_one_more(table):
    names = [str(uuid.uuid4()) for _ in range(4)]
    table.transact([_bump(names[2] + "b", 0)])  # n = 1 already: names[2]'s second action expects 0 and fails

    def bump_returning_old(name: str) -> dict[str, Any]:
        action = _bump(name, 0)
        action["Update"]["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return action

    with record_aws_calls() as recorder:
        results = run_together(
            table,
            [lambda name=name: table.transact([_bump(name, 0), bump_returning_old(name + "b")]) for name in names],
        )
    failed = results[2]
    assert isinstance(failed, TransactionCancelled)
    assert failed.reasons == ["None", "ConditionalCheckFailed"]  # indexes of its own actions, not the merged ones
    assert failed.items[0] is None and failed.items[1] is not None and int(failed.items[1]["n"]) == 1
    assert [r for i, r in enumerate(results) if i != 2] == [None] * 3
    assert [_n(table, name) for name in names] == [1, 1, None, 1]  # nothing of the failed part was written
    # the merged attempt, then the three parts whose actions held, merged again; the failed part sends nothing
    assert _operations(recorder) == {"TransactWriteItems": 2}


def _cancelled_once(table: DynamoTable, monkeypatch, reasons: Callable[[int], list[dict[str, Any]]] | None) -> None:
    """The table's next merged attempt is cancelled without being sent: with ``reasons(actions)`` as its
    cancellation reasons, or refused (too large: no reasons) when None. Later attempts go through."""
    send = table.transact_once
    first = [True]

    def once(actions):
        if first[0]:
            first[0] = False
            if reasons is None:
                error = {"Error": {"Code": "ValidationException", "Message": "Transaction request too large"}}
            else:
                error = {
                    "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
                    "CancellationReasons": reasons(len(actions)),
                }
            raise ClientError(error, "TransactWriteItems")
        return send(actions)

    monkeypatch.setattr(table, "transact_once", once)


def test_a_part_that_met_a_conflict_runs_on_its_own_and_the_parts_that_held_merge_again(table, monkeypatch):
    """A conflict (or a throttle) is no answer about the part's conditions: that part goes again on its own,
    with the table's retries; the others, whose actions held, commit in one more merged request."""
    names = [str(uuid.uuid4()) for _ in range(4)]

    def conflict_on_third(count: int) -> list[dict[str, Any]]:
        return [{"Code": "TransactionConflict"} if i == 4 else {"Code": "None"} for i in range(count)]

    _cancelled_once(table, monkeypatch, conflict_on_third)
    alone: list[list[dict[str, Any]]] = []
    send_alone = table.transact_now
    monkeypatch.setattr(table, "transact_now", lambda actions: (alone.append(actions), send_alone(actions))[1])
    with record_aws_calls() as recorder:
        results = run_together(
            table, [lambda name=name: table.transact([_bump(name, 0), _bump(name + "b", 0)]) for name in names]
        )
    assert results == [None] * 4
    assert [_n(table, name) for name in names] == [1, 1, 1, 1]
    assert len(alone) == 1 and alone[0][0]["Update"]["Key"] == counter_key(names[2])
    assert _operations(recorder) == {"TransactWriteItems": 2}  # the merge again, and the third part alone


def test_when_the_second_merge_is_cancelled_too_its_parts_run_on_their_own(table, monkeypatch):
    names = [str(uuid.uuid4()) for _ in range(4)]
    table.transact([_bump(names[2] + "b", 0)])  # names[2] fails the first merge
    send = table.transact_once
    attempts = [0]

    def interfere(actions):
        attempts[0] += 1
        if attempts[0] == 2:  # another writer takes names[0] between the two merges
            taken = _bump(names[0] + "b", 0)
            taken["Update"]["TableName"] = table.name
            table.transact_now([taken])  # (this thread is a participant: sent directly)
        return send(actions)

    monkeypatch.setattr(table, "transact_once", interfere)
    with record_aws_calls() as recorder:
        results = run_together(
            table, [lambda name=name: table.transact([_bump(name, 0), _bump(name + "b", 0)]) for name in names]
        )
    assert isinstance(results[0], TransactionCancelled) and results[0].reasons == ["None", "ConditionalCheckFailed"]
    assert isinstance(results[2], TransactionCancelled) and results[2].reasons == ["None", "ConditionalCheckFailed"]
    assert results[1] is None and results[3] is None
    assert [_n(table, name) for name in names] == [None, 1, None, 1]
    # two merges, the interfering write, then names[0], names[1] and names[3] alone
    assert _operations(recorder) == {"TransactWriteItems": 2 + 1 + 3}


def test_the_parts_of_a_merge_that_failed_run_side_by_side_each_from_its_own_caller(table, monkeypatch):
    """When a cancelled merge's reasons cannot be matched to its parts (here: refused as too large), every part
    is sent from its caller's thread, all at the same time: a batch pays one more round trip, not one per part.
    Each part's send waits until all four are in flight (a barrier that parts sent one after another could
    never pass)."""
    names = [str(uuid.uuid4()) for _ in range(4)]
    table.transact([_bump(names[1] + "b", 0)])  # names[1]'s part fails on its own
    _cancelled_once(table, monkeypatch, None)
    in_flight = threading.Barrier(len(names), timeout=10)
    senders: list[int] = []
    send_alone = table.transact_now

    def alone(actions):
        senders.append(threading.get_ident())
        in_flight.wait()
        return send_alone(actions)

    monkeypatch.setattr(table, "transact_now", alone)
    callers: list[int] = []

    def job(name):
        callers.append(threading.get_ident())
        return table.transact([_bump(name, 0), _bump(name + "b", 0)])

    results = run_together(table, [lambda name=name: job(name) for name in names])
    assert isinstance(results[1], TransactionCancelled) and results[1].reasons == ["None", "ConditionalCheckFailed"]
    assert [r for i, r in enumerate(results) if i != 1] == [None] * 3
    assert sorted(senders) == sorted(callers)  # every part from its own caller's thread
    assert [_n(table, name) for name in names] == [1, None, 1, 1]


def test_calls_on_one_item_are_never_merged_so_a_compare_and_set_still_excludes(table):
    name = str(uuid.uuid4())
    with record_aws_calls() as recorder:
        results = run_together(table, [lambda: table.transact([_bump(name, 0)]) for _ in range(3)])
    assert sum(r is None for r in results) == 1
    assert all(isinstance(r, TransactionCancelled) and r.failed(0) for r in results if r is not None)
    assert _n(table, name) == 1
    assert _operations(recorder) == {"TransactWriteItems": 3}  # three groups of one, sent one after the other


def _check(name: str, value: int) -> dict[str, Any]:
    """Holds while ``n`` of ``name`` is ``value`` (the shape of a push claim's tenant-active check)."""
    return {
        "ConditionCheck": {
            "Key": counter_key(name),
            "ConditionExpression": "n = :v",
            "ExpressionAttributeValues": {":v": value},
        }
    }


def test_identical_checks_are_shared_and_a_failing_one_fails_every_part_that_carries_it(table):
    gate, other = str(uuid.uuid4()), str(uuid.uuid4())
    table.transact([_bump(gate, 0), _bump(other, 0)])  # both gates hold n = 1
    names = [str(uuid.uuid4()) for _ in range(4)]
    with record_aws_calls() as recorder:  # two parts check `gate`, two check `other`: one request
        results = run_together(
            table,
            [
                lambda name=name, g=g: table.transact([_bump(name, 0), _check(g, 1)])
                for name, g in zip(names, [gate, gate, other, other], strict=True)
            ],
        )
    assert results == [None] * 4 and [_n(table, name) for name in names] == [1] * 4
    assert _operations(recorder) == {"TransactWriteItems": 1}

    table.transact([_bump(gate, 1)])  # `gate` no longer holds
    names = [str(uuid.uuid4()) for _ in range(3)]
    with record_aws_calls() as recorder:
        results = run_together(
            table,
            [
                lambda name=name, g=g: table.transact([_bump(name, 0), _check(g, 1)])
                for name, g in zip(names, [gate, other, gate], strict=True)
            ],
        )
    assert isinstance(results[0], TransactionCancelled) and results[0].reasons == ["None", "ConditionalCheckFailed"]
    assert isinstance(results[2], TransactionCancelled) and results[2].reasons == ["None", "ConditionalCheckFailed"]
    assert results[1] is None
    assert [_n(table, name) for name in names] == [None, 1, None]
    # the shared check's reason answers for both parts that carry it; the part that held goes again, alone
    assert _operations(recorder) == {"TransactWriteItems": 2}


def test_folded_decrements_answer_for_every_part_and_the_parts_that_held_merge_again(table):
    """Settlements of one tenant fold their pending-count decrements into one action; when the merge is
    cancelled by another part's condition, the folded action's reason counts for each part that carried one."""
    space = CounterSpace(counter_key(f"pending-{uuid.uuid4()}"))
    names = [str(uuid.uuid4()) for _ in range(4)]
    table.transact([_bump(names[1], 0)])  # names[1]'s part fails
    table.transact(
        [
            {
                "Update": {
                    "Key": space.pending_counter_key(),
                    "UpdateExpression": "SET #c = :n",
                    "ExpressionAttributeNames": {"#c": pending.COUNT},
                    "ExpressionAttributeValues": {":n": 10},
                }
            }
        ]
    )
    with record_aws_calls() as recorder:
        results = run_together(
            table, [lambda name=name: table.transact([_bump(name, 0), pending.decrement(space)]) for name in names]
        )
    assert isinstance(results[1], TransactionCancelled) and results[1].reasons == ["ConditionalCheckFailed", "None"]
    assert [r for i, r in enumerate(results) if i != 1] == [None] * 3
    assert [_n(table, name) for name in names] == [1, 1, 1, 1]  # names[1] was 1 before and stays
    counter = table.get(space.pending_counter_key())
    assert counter is not None and int(counter[pending.COUNT]) == 10 - 3  # the three that committed, once each
    assert _operations(recorder) == {"TransactWriteItems": 2}  # the merge, and the three again as one


def test_a_check_is_never_shared_with_a_part_that_writes_its_item(table):
    gate = str(uuid.uuid4())
    table.transact([_bump(gate, 0)])
    with record_aws_calls() as recorder:
        results = run_together(
            table,
            [
                lambda: table.transact([_check(gate, 1), _bump(str(uuid.uuid4()), 0)]),
                lambda: table.transact([_bump(gate, 1)]),
            ],
        )
    assert results.count(None) >= 1
    assert _operations(recorder) == {"TransactWriteItems": 2}  # two groups: the check and the write of one item


def test_batch_reads_are_merged_and_each_caller_gets_exactly_its_keys(table):
    names = [str(uuid.uuid4()) for _ in range(4)]
    for name in names:
        table.transact([_bump(name, 0)])
    wanted = [
        [counter_key(names[i]), counter_key(names[(i + 1) % 4]), counter_key("absent-" + names[i])] for i in range(4)
    ]
    with record_aws_calls() as recorder:
        results = run_together(table, [lambda keys=keys: table.batch_get(keys) for keys in wanted])
    assert _operations(recorder) == {"BatchGetItem": 1}
    for keys, found in zip(wanted, results, strict=True):
        assert set(found) == {(k["PK"], k["SK"]) for k in keys[:2]}


def test_a_busy_participant_holds_the_others_at_most_max_wait(table):
    names = [str(uuid.uuid4()) for _ in range(3)]
    release = threading.Event()
    took: list[float] = []

    def quick(name: str) -> None:
        started = time.monotonic()
        table.transact([_bump(name, 0)])
        took.append(time.monotonic() - started)

    def busy() -> None:
        release.wait(5)  # e.g. waiting on an LLM: it makes no storage call for a while

    jobs: list[Callable[[], Any]] = [lambda n=n: quick(n) for n in names]
    timer = threading.Timer(3, release.set)
    timer.start()
    try:
        results = run_together(table, [*jobs, busy], wait_s=0.2)
    finally:
        timer.cancel()
    assert results == [None] * 4
    assert len(took) == 3 and max(took) < 2.0  # held for the 0.2 s window, never until the busy one is done
    assert all(_n(table, name) == 1 for name in names)


def test_threads_outside_a_session_are_never_held(table):
    session = DynamoCoalescer(table, max_wait_s=5).session(2)  # a second participant that never arrives
    name = str(uuid.uuid4())
    with session.participant():
        outside = threading.Thread(target=lambda: table.transact([_bump(name + "o", 0)]))
        started = time.monotonic()
        outside.start()
        outside.join(10)
        assert time.monotonic() - started < 2
        assert _n(table, name + "o") == 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plans=st.lists(
        st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=3, unique_by=lambda a: a[0]),
        min_size=2,
        max_size=6,
    )
)
def test_every_part_gets_the_outcome_it_would_have_had_alone(table, plans):
    """Each participant owns its items; an action holds or fails by its plan. The merged outcome per part must
    be what it would get alone: committed iff all its conditions hold, else cancelled at exactly those indexes."""
    run = uuid.uuid4().hex[:8]
    for p, plan in enumerate(plans):
        for item, holds in plan:
            if not holds:
                table.transact([_bump(f"{run}-{p}-{item}", 0)])  # n = 1: the plan's "expect 0" fails

    def job(p: int, plan: list[tuple[int, bool]]) -> None:
        table.transact([_bump(f"{run}-{p}-{item}", 0) for item, _ in plan])

    results = run_together(table, [lambda p=p, plan=plan: job(p, plan) for p, plan in enumerate(plans)], wait_s=0.3)
    for p, (plan, result) in enumerate(zip(plans, results, strict=True)):
        if all(holds for _, holds in plan):
            assert result is None
            assert all(_n(table, f"{run}-{p}-{item}") == 1 for item, _ in plan)
        else:
            assert isinstance(result, TransactionCancelled)
            assert [result.failed(i) for i in range(len(plan))] == [not holds for _, holds in plan]
            assert all(_n(table, f"{run}-{p}-{item}") == (None if holds else 1) for item, holds in plan)
