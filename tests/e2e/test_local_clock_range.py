"""The local clock's range on the real engine: at its very end a tick still claims, sends and reschedules a
recurring task (no ``OverflowError``), and a time past the range is refused without moving the clock."""

from __future__ import annotations

import json
import urllib.error
import uuid

import pytest
from amsg.timeutil import iso_from_ms

from tests.support.e2e_stack import stack_with_push
from tests.support.wire_client import WireClient, http_transport

pytestmark = pytest.mark.e2e
CLOCK_MAX_MS = 221_845_392_000_000  # 9000-01-01T00:00:00Z, the documented end of the range (exclusive)
YEAR_9999_MS = 253_402_214_400_000  # 9999-12-31T00:00:00Z: the reproducer
DAY = 86_400_000


def test_a_tick_at_the_end_of_the_clock_range_works() -> None:
    with stack_with_push() as (stack, push):
        user = WireClient(http_transport(stack.base_url), str(uuid.uuid4()))
        user.init()
        assert user.put_subscription(push.subscribe().to_json()).status == 200
        start = CLOCK_MAX_MS - 3 * DAY
        first = start + 60_000
        assert stack.post_local("/_local/clock", {"nowMs": start})["nowMs"] >= start
        body = {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": "the last days",
            "recurrenceType": "daily",
            "firstSendTime": iso_from_ms(first),
        }
        created = user.schedule(body)
        assert created.status == 201, created.text
        received = 0
        for day in range(3):  # each day's occurrence, on time; the last one's next falls in year 9000
            stack.post_local("/_local/clock", {"nowMs": first + day * DAY + 30_000})
            summary = stack.post_local("/_local/tick")
            assert summary["success"] is True and summary["tick"]["ok"] is True, summary
            assert summary["runTask"]["errors"] == [], summary
            received += summary["runTask"]["received"]
        assert received == 3
        assert user.get_message(created.data["uuid"]).data["task"]["nextSendAt"] == "9000-01-01T00:01:00.000Z"
        with pytest.raises(urllib.error.HTTPError) as refused:
            stack.post_local("/_local/clock", {"nowMs": YEAR_9999_MS})
        assert refused.value.code == 400
        assert "clock must stay within" in json.loads(refused.value.read())["error"]["message"]
        assert stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"] < CLOCK_MAX_MS
        assert stack.post_local("/_local/tick")["success"] is True
