"""A write's PartiQL statement text is worked out once per shape (adapters/dynamo/statements.py, ``_Plan``): the
writes the hot path repeats are not parsed again, and every write still gets the statement, and the parameters,
its own translation gives (tests/ddb_local/test_statements_contract.py runs the statements on DynamoDB Local)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from amsg.adapters.dynamo import statements
from amsg.adapters.dynamo.single_writes import SingleWrite
from amsg.adapters.dynamo.statements import Statement, Untranslatable
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples

KEY = {"PK": "U#x", "SK": "T#y"}
MARK: dict[str, Any] = {
    "Key": KEY,
    "UpdateExpression": "SET delivered_at = :t",
    "ConditionExpression": "attribute_exists(SK)",
    "ExpressionAttributeValues": {":t": 1},
}
SETTLE: dict[str, Any] = {
    "Key": KEY,
    "UpdateExpression": "SET #st = :s, n = n + :one REMOVE lease_until ADD claim_version :one",
    "ConditionExpression": "claim_version = :cv AND n >= :cv AND (attribute_not_exists(x) OR x < :s)",
    "ExpressionAttributeNames": {"#st": "status"},
    "ExpressionAttributeValues": {":s": "sent", ":one": 1, ":cv": 2},
}
DELETE: dict[str, Any] = {
    "Key": KEY,
    "ConditionExpression": "claim_version = :cv AND rev = :rev",
    "ExpressionAttributeValues": {},
}


@pytest.fixture(autouse=True)
def no_plans() -> Iterator[None]:
    statements._PLANS.clear()
    yield
    statements._PLANS.clear()


def _statement(kind: str, params: dict[str, Any], *, absent_ok: bool = False) -> Statement:
    return SingleWrite(kind, params, absent_ok=absent_ok).statement("amsg")  # type: ignore[arg-type]


def _fresh(kind: str, params: dict[str, Any], *, absent_ok: bool = False) -> Statement:
    """The statement as the first write of its shape gets it (nothing remembered)."""
    statements._PLANS.clear()
    return _statement(kind, params, absent_ok=absent_ok)


def test_a_shape_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[object] = []
    parse = statements._parsed_condition

    def counted(params: Any) -> Any:
        parsed.append(params.get("ConditionExpression"))
        return parse(params)

    monkeypatch.setattr(statements, "_parsed_condition", counted)
    first = _statement("update", {**MARK, "ExpressionAttributeValues": {":t": 1}})
    second = _statement("update", {**MARK, "Key": {"PK": "U#z", "SK": "O#1"}, "ExpressionAttributeValues": {":t": 7}})
    assert parsed == ["attribute_exists(SK)"]
    assert (
        first.text
        == second.text
        == 'UPDATE "amsg" SET "delivered_at" = ? WHERE "PK" = ? AND "SK" = ? AND "SK" IS NOT MISSING'
    )
    assert first.parameters == [{"N": "1"}, {"S": "U#x"}, {"S": "T#y"}]
    assert second.parameters == [{"N": "7"}, {"S": "U#z"}, {"S": "O#1"}]


def test_the_plan_follows_the_shape() -> None:
    """Names, the table, the key's attributes and their order, the placeholders present: each is its own shape."""
    base = _statement("update", SETTLE)
    renamed = _statement("update", {**SETTLE, "ExpressionAttributeNames": {"#st": "state"}})
    assert '"status"' in base.text and '"state"' in renamed.text
    assert SingleWrite("update", SETTLE).statement("other").text.startswith('UPDATE "other"')
    reordered = _statement("update", {**SETTLE, "Key": {"SK": "T#y", "PK": "U#x"}})
    assert 'WHERE "SK" = ? AND "PK" = ?' in reordered.text
    assert reordered.parameters[3:5] == [{"S": "T#y"}, {"S": "U#x"}]
    with pytest.raises(Untranslatable, match="not used"):  # an extra placeholder, after its shape without it
        _statement("update", {**SETTLE, "ExpressionAttributeValues": {**SETTLE["ExpressionAttributeValues"], ":w": 1}})
    absent_ok = {**DELETE, "ExpressionAttributeValues": {":cv": 1, ":rev": 2}}
    assert _statement("delete", absent_ok, absent_ok=True).text.startswith('DELETE FROM "amsg"')
    with pytest.raises(Untranslatable, match="caller that must know"):  # the same shape, for a caller that must know
        _statement("delete", absent_ok, absent_ok=False)


def test_an_add_of_a_non_number_is_refused_on_a_known_shape() -> None:
    assert _statement("update", SETTLE).parameters[1] == {"N": "1"}
    for value in ("1", True, None):
        with pytest.raises(Untranslatable, match="ADD of something other than a number"):
            _statement(
                "update",
                {**SETTLE, "ExpressionAttributeValues": {**SETTLE["ExpressionAttributeValues"], ":one": value}},
            )


def test_a_refused_shape_is_refused_every_time() -> None:
    refused = {"Key": KEY, "UpdateExpression": "SET a = :v", "ExpressionAttributeValues": {":v": 1}}
    for _ in range(2):
        with pytest.raises(Untranslatable, match="absent item"):
            _statement("update", refused)
    assert not statements._PLANS


_VALUES = st.one_of(
    st.integers(-(10**37), 10**37),
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-(10**9), max_value=10**9),
    st.text(max_size=20),
    st.binary(max_size=8),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.sampled_from("ab"), st.text(max_size=3), max_size=2),
)
_NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6),
    st.decimals(allow_nan=False, allow_infinity=False, places=2, min_value=-(10**6), max_value=10**6),
)


@settings(max_examples=examples(200), deadline=None)
@given(
    earlier=st.tuples(_VALUES, _NUMBERS, _VALUES, st.text(max_size=5), st.text(max_size=5)),
    values=st.tuples(_VALUES, _NUMBERS, _VALUES, st.text(max_size=5), st.text(max_size=5)),
)
def test_a_known_shape_gives_each_write_its_own_translation(
    earlier: tuple[Any, Decimal | int, Any, str, str], values: tuple[Any, Decimal | int, Any, str, str]
) -> None:
    """A write of a shape already planned with other values gets what its translation alone gives."""

    def write(s: Any, one: Decimal | int, cv: Any, pk: str, sk: str) -> dict[str, Any]:
        return {**SETTLE, "Key": {"PK": pk, "SK": sk}, "ExpressionAttributeValues": {":s": s, ":one": one, ":cv": cv}}

    def delete(s: Any, one: Decimal | int, cv: Any, pk: str, sk: str) -> dict[str, Any]:
        return {**DELETE, "Key": {"PK": pk, "SK": sk}, "ExpressionAttributeValues": {":cv": cv, ":rev": s}}

    for kind, build in (("update", write), ("delete", delete)):
        alone = _fresh(kind, build(*values), absent_ok=True)
        _fresh(kind, build(*earlier), absent_ok=True)
        assert _statement(kind, build(*values), absent_ok=True) == alone
