"""The storage edge of the task's times: a stored ``toISOString`` value read as ms and written back is the same
text, and text order is time order (the due and retention index keys sort by it), so moving the engine to
epoch ms leaves stored items and index order unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from amsg import timeutil
from amsg.adapters.dynamo.tasks import stored_ms
from amsg.timeutil import iso_from_ms
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples

LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the last toISOString with a 4-digit year
times = st.integers(min_value=0, max_value=LAST_MS)


@settings(deadline=None)  # a shared CI machine: the time per example is not what is tested
@given(times)
def test_a_stored_time_survives_the_round_trip(ms: int):
    text = iso_from_ms(ms)
    assert stored_ms(text) == ms
    assert iso_from_ms(stored_ms(text) or 0) == text


@settings(deadline=None)
@given(times, times)
def test_text_order_is_time_order(a: int, b: int):
    assert (iso_from_ms(a) < iso_from_ms(b)) == (a < b)


def test_absent_times_read_as_none():
    assert stored_ms(None) is None and stored_ms("") is None


def _formatted_alone(ms: object) -> tuple[str, str]:
    """What ``iso_from_ms`` printed before it remembered the last second (or the error it raised)."""
    try:
        dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=int(ms))  # type: ignore[call-overload]
        return "text", dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
    except (OverflowError, ValueError) as exc:
        return "error", type(exc).__name__


def _formatted(ms: object) -> tuple[str, str]:
    try:
        return "text", iso_from_ms(ms)  # type: ignore[arg-type]
    except (OverflowError, ValueError) as exc:
        return "error", type(exc).__name__


_NEAR = st.integers(min_value=-3_000, max_value=3_000)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.one_of(
            times,
            st.integers(min_value=-62_135_596_800_000, max_value=LAST_MS + 10_000),  # from year 1 on
            st.integers(),
            st.sampled_from([True, 1.9, -0.5, float("nan"), float("inf")]),
        ),
        min_size=1,
        max_size=6,
    ),
    st.lists(_NEAR, max_size=6),
)
def test_each_time_is_formatted_as_alone(spread: list[object], near: list[int]) -> None:
    """In any order of calls (the same second again, another, back): each text as its own formatting gives."""
    for ms in [*spread, *(int(spread[0]) + offset for offset in near if isinstance(spread[0], int))]:
        assert _formatted(ms) == _formatted_alone(ms), ms


def test_a_second_is_formatted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A delivery formats its second several times: the date is formatted once for them."""
    formatted: list[object] = []

    def counted(*args: object, **kwargs: object) -> timedelta:
        formatted.append(kwargs or args)
        return timedelta(*args, **kwargs)  # type: ignore[arg-type]

    iso_from_ms(0)
    monkeypatch.setattr(timeutil, "timedelta", counted)
    assert [iso_from_ms(1_790_000_000_000 + ms) for ms in (40, 41, 999)] == [
        "2026-09-21T14:13:20.040Z",
        "2026-09-21T14:13:20.041Z",
        "2026-09-21T14:13:20.999Z",
    ]
    assert len(formatted) == 1
