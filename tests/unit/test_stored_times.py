"""The storage edge of the task's times: a stored ``toISOString`` value read as ms and written back is the same
text, and text order is time order (the due and retention index keys sort by it), so moving the engine to
epoch ms leaves stored items and index order unchanged."""

from __future__ import annotations

from amsg.adapters.dynamo.tasks import stored_ms
from amsg.timeutil import iso_from_ms
from hypothesis import given, settings
from hypothesis import strategies as st

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
