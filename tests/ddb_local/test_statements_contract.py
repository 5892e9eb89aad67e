"""The hot path's conditional single writes as PartiQL statements (adapters/dynamo/statements.py) against the same
writes as ``UpdateItem`` / ``DeleteItem``, on DynamoDB Local: over the same item states (hypothesis), both forms
give the same outcome (applied or not, the old item on a failed condition when asked) and leave the same item."""

from __future__ import annotations

from typing import Any

import pytest
from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.claims import DynamoClaimStore
from amsg.adapters.dynamo.outbox_sending import delivered_update
from amsg.adapters.dynamo.settlements import DynamoSettlements
from amsg.adapters.dynamo.single_writes import SingleWrite, WriteOutcome
from amsg.adapters.dynamo.statements import Untranslatable, update_statement
from amsg.adapters.dynamo.table import DynamoTable
from amsg.adapters.dynamo.tasks import registry_delete_of
from amsg.ports import KEEP, Settlement
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.ddb_local

USER, UUID = "u1", "task-1"
ISO = st.sampled_from(["2030-01-01T00:00:00.000Z", "2030-01-01T00:01:00.000Z", "2030-01-01T00:02:00.000Z"])
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def pair(ddb_local_endpoint: str, ddb_local_table: str) -> tuple[DynamoTable, DynamoTable]:
    def table(statements: bool) -> DynamoTable:
        return DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1", statements=statements)

    return table(True), table(False)


def _both(
    pair: tuple[DynamoTable, DynamoTable], state: dict[str, Any] | None, write: SingleWrite
) -> list[tuple[WriteOutcome, dict[str, Any] | None]]:
    """The write from ``state`` (None: no item) once per form: (outcome, the item afterwards) each."""
    results = []
    key = dict(write.params["Key"])
    for table in pair:
        table.table.delete_item(Key=key)
        if state is not None:
            table.table.put_item(Item={**state, **key})
        (outcome,) = table.write_singles([write])
        after = table.get(key)
        results.append((outcome, after))
    return results


def _assert_same(pair: tuple[DynamoTable, DynamoTable], state: dict[str, Any] | None, write: SingleWrite) -> None:
    (by_statement, after_statement), (by_item, after_item) = _both(pair, state, write)
    assert by_statement.error is None and by_item.error is None, (by_statement, by_item)
    assert (by_statement.applied, by_statement.old) == (by_item.applied, by_item.old), (state, write)
    assert after_statement == after_item, (state, write)
    event(f"applied={by_item.applied} absent={state is None}")


def _optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Items whose attributes are each present or absent."""
    return st.fixed_dictionaries({}, optional=fields)


# ---- the delivered mark of an outbox row --------------------------------------------------------------------


@SETTINGS
@given(state=st.none() | _optional(delivered_at=st.integers(0, 3), sending_at=st.integers(0, 3)), old=st.booleans())
def test_delivered_mark(pair: tuple[DynamoTable, DynamoTable], state: dict[str, Any] | None, old: bool) -> None:
    mark = delivered_update(keys.SINGLE, USER, "m1", 2)
    _assert_same(pair, state, SingleWrite("update", mark, old_on_failure=old))


# ---- the settlement of a task that stays (a recurring task delivered, a retry) -------------------------------

TASK_STATE = _optional(
    claim_version=st.integers(0, 2),
    status=st.sampled_from(["pending", "sent"]),
    lease_until=ISO,
    lease_owner=st.just("run-1"),
    retry_after=ISO,
    deferred_until=ISO,
    last_error=st.just('{"e":1}'),
    retry_count=st.integers(0, 2),
    due_sk=st.just("2030#x"),
    due_pk=st.just("D#0"),
    next_send_at=ISO,
)
SETTLEMENT = st.builds(
    Settlement,
    next_send_at_ms=st.sampled_from([1_893_456_000_000, 1_893_456_060_000]),
    status=st.sampled_from([None, "failed", "sent"]),
    retry_after_ms=st.sampled_from([None, 1_893_456_120_000]),
    retry_count=st.sampled_from([KEEP, 0, 3]),
    last_error=st.sampled_from([KEEP, None, '{"code":"X"}']),
    policy_deferred=st.booleans(),
    keep_deferral=st.booleans(),
)


@SETTINGS
@given(state=st.none() | TASK_STATE, settlement=SETTLEMENT, claim_version=st.integers(0, 2))
def test_settlement_update(
    pair: tuple[DynamoTable, DynamoTable], state: dict[str, Any] | None, settlement: Settlement, claim_version: int
) -> None:
    store = DynamoSettlements(pair[0], due_shards=4)
    update = store._settle_update_kwargs(USER, UUID, claim_version, settlement, 1_893_456_000_000)
    _assert_same(pair, state, SingleWrite("update", update))


# ---- the uuid registry entry's delete after a one-shot's delete ---------------------------------------------


@SETTINGS
@given(state=st.none() | _optional(user_id=st.sampled_from([USER, "u2"]), id=st.integers(1, 2)), old=st.booleans())
def test_registry_delete(pair: tuple[DynamoTable, DynamoTable], state: dict[str, Any] | None, old: bool) -> None:
    delete = registry_delete_of(keys.SINGLE, UUID, USER, 1)
    _assert_same(pair, state, SingleWrite("delete", delete, absent_ok=True, old_on_failure=old))


# ---- a claim (the claimer's write), with the presence of the counter it increments proven --------------------


@SETTINGS
@given(state=st.none() | TASK_STATE, now=ISO, expected=ISO)
def test_claim_update(
    pair: tuple[DynamoTable, DynamoTable], state: dict[str, Any] | None, now: str, expected: str
) -> None:
    claim = DynamoClaimStore(pair[0])._claim_update(USER, UUID, expected, now, "2030-01-01T00:05:00.000Z", "run-1")
    claim["ConditionExpression"] = f"attribute_exists(claim_version) AND {claim['ConditionExpression']}"
    _assert_same(pair, state, SingleWrite("update", claim, old_on_failure=True))


def test_a_claim_without_the_proof_is_refused(pair: tuple[DynamoTable, DynamoTable]) -> None:
    """``ADD claim_version`` of an absent counter starts from 0; ``claim_version + ?`` is undefined there."""
    claim = DynamoClaimStore(pair[0])._claim_update(USER, UUID, "x", "y", "z", "run-1")
    with pytest.raises(Untranslatable):
        update_statement(pair[0].name, claim)
    (outcome,) = pair[0].write_singles([SingleWrite("update", claim)])
    assert isinstance(outcome.error, Untranslatable)


# ---- what is refused rather than mistranslated --------------------------------------------------------------

KEY = {"PK": "U#x", "SK": "T#y"}


@pytest.mark.parametrize(
    ("update", "condition"),
    [
        ("SET a = :v", None),  # would create the item
        ("SET a = :v", "attribute_not_exists(PK) OR a = :v"),  # would create it too
        ("SET a = :v", "NOT a = :v"),  # NOT of a comparison
        ("SET a = :v", "a <> :v"),
        ("SET a = :v", "a IN (:v)"),
        ("SET a = :v", "a BETWEEN :v AND :v"),
        ("SET a = :v", "begins_with(a, :v)"),
        ("SET a = :v", "size(a) > :v"),
        ("SET a.b = :v", "a = :v"),
        ("SET a[0] = :v", "a = :v"),
        ("SET a = b + :v", "a = :v"),  # b not proven present
        ("SET a = if_not_exists(a, :v)", "a = :v"),
        ("SET a = list_append(a, :v)", "a = :v"),
        ("ADD n :v", "a = :v"),  # n not proven present
        ("DELETE s :v", "a = :v"),
        ("SET PK = :v", "a = :v"),  # a key attribute
        ("SET a = :v REMOVE a", "a = :v"),
    ],
)
def test_refused(update: str, condition: str | None) -> None:
    params: dict[str, Any] = {"Key": KEY, "UpdateExpression": update, "ExpressionAttributeValues": {":v": 1}}
    if condition is not None:
        params["ConditionExpression"] = condition
    with pytest.raises(Untranslatable):
        update_statement("t", params)


def test_unused_placeholders_and_return_values_are_refused() -> None:
    base = {"Key": KEY, "UpdateExpression": "SET a = :v", "ConditionExpression": "a = :v"}
    with pytest.raises(Untranslatable):
        update_statement("t", {**base, "ExpressionAttributeValues": {":v": 1, ":w": 2}})
    with pytest.raises(Untranslatable):
        update_statement("t", {**base, "ExpressionAttributeValues": {":v": 1}, "ReturnValues": "ALL_NEW"})


def test_the_statement_text() -> None:
    statement = update_statement(
        "amsg",
        {
            "Key": {"PK": "U#x", "SK": "T#y"},
            "UpdateExpression": "SET #st = :s, n = n + :one REMOVE lease_until ADD claim_version :one",
            "ConditionExpression": "claim_version = :cv AND n >= :cv AND (attribute_not_exists(x) OR x < :s)",
            "ExpressionAttributeNames": {"#st": "status"},
            "ExpressionAttributeValues": {":s": "sent", ":one": 1, ":cv": 2},
        },
    )
    assert statement.text == (
        'UPDATE "amsg" SET "status" = ? SET "n" = "n" + ? REMOVE "lease_until" '
        'SET "claim_version" = "claim_version" + ? '
        'WHERE "PK" = ? AND "SK" = ? AND ("claim_version" = ? AND "n" >= ? AND ("x" IS MISSING OR "x" < ?))'
    )
    assert statement.parameters == [
        {"S": "sent"},
        {"N": "1"},
        {"N": "1"},
        {"S": "U#x"},
        {"S": "T#y"},
        {"N": "2"},
        {"N": "2"},
        {"S": "sent"},
    ]


# ---- the table's entry point --------------------------------------------------------------------------------


def test_writes_of_one_item_go_in_order(pair: tuple[DynamoTable, DynamoTable]) -> None:
    """Two writes of one item in one call: the second is sent in a later batch, after the first applied."""
    statements = pair[0]
    key = {"PK": "U#order", "SK": "C#n"}
    statements.table.put_item(Item={**key, "n": 0})

    def bump(expect: int) -> SingleWrite:
        return SingleWrite(
            "update",
            {
                "Key": key,
                "UpdateExpression": "SET n = :new",
                "ConditionExpression": "n = :cur",
                "ExpressionAttributeValues": {":new": expect + 1, ":cur": expect},
            },
        )

    outcomes = statements.write_singles([bump(0), bump(1), bump(5)])
    assert [o.applied for o in outcomes] == [True, True, False]
    assert statements.get(key)["n"] == 2


def test_thirty_writes_in_two_requests(pair: tuple[DynamoTable, DynamoTable]) -> None:
    from tests.support.aws_calls import record_aws_calls

    statements = pair[0]
    writes = []
    for n in range(30):
        key = {"PK": f"U#many{n}", "SK": "C#n"}
        statements.table.put_item(Item={**key, "n": n})
        writes.append(
            SingleWrite(
                "update",
                {
                    "Key": key,
                    "UpdateExpression": "SET m = :m",
                    "ConditionExpression": "n = :even",
                    "ExpressionAttributeValues": {":m": 1, ":even": n if n % 2 == 0 else -1},
                },
                old_on_failure=True,
            )
        )
    with record_aws_calls() as calls:
        outcomes = statements.write_singles(writes)
    assert [c.operation for c in calls.calls] == ["BatchExecuteStatement"] * 2
    assert [o.applied for o in outcomes] == [n % 2 == 0 for n in range(30)]
    assert all(o.old is not None and o.old["n"] == n for n, o in enumerate(outcomes) if not o.applied)


def test_passing_errors_are_sent_again_alone_and_others_reach_their_caller(
    pair: tuple[DynamoTable, DynamoTable], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Injected: the first answer throttles one statement and refuses another (``ValidationError``); the throttled
    one is sent again on its own and applies, the refused one gets the single call's ``ValidationException``."""
    from botocore.exceptions import ClientError

    statements = pair[0]
    keys_ = [{"PK": f"U#err{n}", "SK": "C#n"} for n in range(3)]
    for key in keys_:
        statements.table.put_item(Item={**key, "n": 0})
    sent: list[list[str]] = []
    real = statements._send_statements

    def flaky(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        sent.append([r["Parameters"][1]["S"] for r in requests])  # the PK parameter
        if len(sent) > 1:
            return real(requests)
        # DynamoDB ran the first statement only
        return [
            *real(requests[:1]),
            {"Error": {"Code": "ThrottlingError", "Message": "slow down"}},
            {"Error": {"Code": "ValidationError", "Message": "no"}},
        ]

    monkeypatch.setattr(statements, "_send_statements", flaky)
    monkeypatch.setattr("amsg.adapters.dynamo.table._statement_pause", lambda attempt: None)
    writes = [
        SingleWrite(
            "update",
            {
                "Key": key,
                "UpdateExpression": "SET n = :one",
                "ConditionExpression": "n = :zero",
                "ExpressionAttributeValues": {":one": 1, ":zero": 0},
            },
        )
        for key in keys_
    ]
    first, second, third = statements.write_singles(writes)
    assert sent == [["U#err0", "U#err1", "U#err2"], ["U#err1"]]
    assert first.applied and second.applied and not third.applied
    assert isinstance(third.error, ClientError)
    assert third.error.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(ClientError):
        third.checked()


def test_presence_is_proven_through_placeholders() -> None:
    """``ADD n`` is translated when the condition compares ``#n`` (the same attribute), refused when the proof is of
    another attribute or only on one side of an ``OR``."""
    params: dict[str, Any] = {
        "Key": KEY,
        "UpdateExpression": "ADD n :one",
        "ConditionExpression": "#n >= :zero",
        "ExpressionAttributeNames": {"#n": "n"},
        "ExpressionAttributeValues": {":one": 1, ":zero": 0},
    }
    assert update_statement("t", params).text.startswith('UPDATE "t" SET "n" = "n" + ?')
    for condition in ("#n >= :zero OR m >= :zero", "#n >= :zero AND m >= :zero"):
        refused = {**params, "ConditionExpression": condition, "ExpressionAttributeNames": {"#n": "nn"}}
        if "OR" in condition:
            refused["ExpressionAttributeNames"] = {"#n": "n"}
        with pytest.raises(Untranslatable, match="does not prove"):
            update_statement("t", refused)
