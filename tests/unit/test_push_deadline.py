"""Before every instant push the time left must cover it and the pacing before the pushes still to come."""

from __future__ import annotations

import pytest
from amsg.engine.env import DeliveryEnv
from amsg.engine.sending import DeadlineExceeded, time_to_push
from hypothesis import given
from hypothesis import strategies as st


def test_without_a_deadline_there_is_no_limit():
    assert time_to_push(DeliveryEnv(push_sender=None, llm=None), pushes_after=1_000) is None


@given(
    left=st.integers(-60_000, 60_000),
    pacing=st.integers(0, 5_000),
    after=st.integers(0, 20),
)
def test_a_push_goes_out_only_when_the_whole_rest_still_fits(left, pacing, after):
    env = DeliveryEnv(push_sender=None, llm=None, pacing_ms=pacing, time_left_ms=lambda: left)
    spare = left - after * pacing
    if spare <= 0:
        with pytest.raises(DeadlineExceeded) as raised:
            time_to_push(env, after)
        assert raised.value.code == "INSTANT_DEADLINE_EXCEEDED" and raised.value.permanent is False
    else:
        assert time_to_push(env, after) == spare / 1000
