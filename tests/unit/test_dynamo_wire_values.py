"""Attribute values to and from DynamoDB's wire form (plain_table.py's ``to_wire`` / ``from_wire``): the common
kinds converted without boto3's type dispatch must give exactly what ``TypeSerializer`` / ``TypeDeserializer``
give, value or error, for anything a caller may pass (tests/unit/test_dynamo_wire.py stores and reads them back
against the resource layer)."""

from __future__ import annotations

import enum
from decimal import Decimal
from typing import Any

import pytest
from amsg.adapters.dynamo import plain_table
from amsg.adapters.dynamo.plain_table import from_wire, to_wire
from boto3.dynamodb.types import Binary, TypeDeserializer, TypeSerializer
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples


class _Word(str):
    pass


class _Level(enum.IntEnum):
    LOW = 1


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.sampled_from([10**38 - 1, -(10**38) + 1, 10**38, -(10**38), 0, _Level.LOW]),
    st.floats(),
    st.decimals(),
    st.text(max_size=6),
    st.builds(_Word, st.text(max_size=3)),
    st.binary(max_size=6),
    st.builds(bytearray, st.binary(max_size=3)),
    st.builds(Binary, st.binary(max_size=3)),
    st.sets(st.integers(-5, 5), max_size=3),
    st.frozensets(st.text(max_size=2), max_size=3),
    st.sets(st.binary(max_size=2), max_size=3),
    st.sets(st.one_of(st.integers(0, 3), st.text(max_size=1)), max_size=3),
    st.just(object()),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
    ),
    max_leaves=10,
)


def _outcome(convert: Any, value: Any) -> tuple[str, str]:
    """What a conversion gives, as text (a NaN equals itself there), or the error it raises."""
    try:
        return "value", repr(convert(value))
    except Exception as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=examples(500), deadline=None)
@given(value=_VALUES)
def test_values_go_to_the_wire_as_the_serializer_sends_them(value: Any) -> None:
    expected = _outcome(lambda v: {"v": TypeSerializer().serialize(v)}, value)
    assert _outcome(lambda v: to_wire({"v": v}), value) == expected


_WIRE_MALFORMED = st.sampled_from(
    [
        {},
        {"X": 1},
        {"s": "lower case"},
        {"S": "a", "N": "1"},
        {"N": "abc"},
        {"N": "1e500"},
        {"N": "1.000000000000000000000000000000000000001"},
        {"N": "NaN"},
        {"B": "not bytes"},
        {"NULL": False},
        {"M": {"a": {}}},
        {"L": [{"Q": 1}]},
        [],
        "S",
    ]
)


def _serialized(value: Any) -> Any:
    """The serializer's wire form of ``value``; None for a value it refuses."""
    try:
        return TypeSerializer().serialize(value)
    except (TypeError, ArithmeticError):
        return None


@settings(max_examples=examples(500), deadline=None)
@given(wire=st.one_of(_VALUES.map(_serialized).filter(lambda w: w is not None), _WIRE_MALFORMED))
def test_values_come_from_the_wire_as_the_deserializer_reads_them(wire: Any) -> None:
    expected = _outcome(lambda w: {"v": TypeDeserializer().deserialize(w)}, wire)
    assert _outcome(lambda w: from_wire({"v": w}), wire) == expected


def test_the_common_kinds_skip_the_type_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's item (strings, integers, bytes, a map, a list, booleans, null) converts without boto3's converters,
    whose per-value type dispatch cost run_task several µs per item."""

    class Refused:
        def serialize(self, value: Any) -> Any:
            raise AssertionError(f"serializer used for {value!r}")

        def deserialize(self, value: Any) -> Any:
            raise AssertionError(f"deserializer used for {value!r}")

    monkeypatch.setattr(plain_table, "_TO_WIRE", Refused())
    monkeypatch.setattr(plain_table, "_FROM_WIRE", Refused())
    item = {"PK": "U#x", "n": 3, "payload": b"\x00", "meta": {"a": [1, "b", None, True]}}
    wire = to_wire(item)
    assert wire["n"] == {"N": "3"} and wire["payload"] == {"B": b"\x00"}
    assert from_wire(wire) == {
        "PK": "U#x",
        "n": Decimal(3),
        "payload": Binary(b"\x00"),
        "meta": {"a": [1, "b", None, True]},
    }
