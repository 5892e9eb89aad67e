"""Times are epoch ms inside the engine and its ports and ISO text only at the edges (see docs/architecture.md,
"Times and the user codec"): the stored task item keeps its ISO attributes exactly, and a run_task trip
converts a bounded, small number of times."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import pytest

from tests.conftest import T0_MS, moto_table_resource
from tests.handlers.test_delivery import FIRST, FIRST_MS, due, schedule

pytestmark = pytest.mark.memory_store  # the engine on the in-memory fakes under `make unit`

CONVERSIONS = ("iso_from_ms", "parse_iso_ms", "normalize_iso")
EDGES = {
    "amsg.adapters.dynamo.tasks",
    "amsg.adapters.dynamo.claims",
    "amsg.adapters.dynamo.outbox",
    "amsg.adapters.dynamo.outbox_sending",  # the push claim's fence (the send-claim side of the outbox rows)
    "amsg.adapters.dynamo.settlements",
    "amsg.engine.messages",
    "amsg.engine.pushes",
    "amsg.engine.summary",
}


def raw_task(table: str, user_id: str, task_uuid: str) -> dict[str, Any]:
    item = moto_table_resource(table).get_item(Key={"PK": f"U#{user_id}", "SK": f"T#{task_uuid}"}, ConsistentRead=True)
    return item["Item"]


def count_conversions(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Wrap every binding of the timeutil conversions in the loaded ``amsg`` modules with a counter of the
    calling modules."""
    import amsg.timeutil as timeutil

    callers: Counter[str] = Counter()
    for name in CONVERSIONS:
        original = getattr(timeutil, name)

        def counted(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            callers[sys._getframe(1).f_globals["__name__"]] += 1
            return _original(*args, **kwargs)

        for module_name, module in list(sys.modules.items()):
            if (module_name == "amsg" or module_name.startswith("amsg.")) and getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counted)
    return callers


@pytest.mark.dynamo_store
def test_the_stored_task_item_keeps_its_iso_attributes(engine, moto_table):
    created = schedule(engine, recurrenceType="daily")
    item = raw_task(moto_table, engine.api.user_id, created["uuid"])
    created_iso = "2029-12-31T00:00:00.000Z"  # T0
    assert (item["next_send_at"], item["created_at"], item["updated_at"]) == (FIRST, created_iso, created_iso)
    assert item["due_sk"] == f"{FIRST}#{created['uuid']}"
    due(engine)
    assert engine.harness.tick()["claimedTasks"] == 1
    claimed = raw_task(moto_table, engine.api.user_id, created["uuid"])
    lease = claimed["lease_until"]
    assert lease == "2029-12-31T00:06:01.000Z" and claimed["due_sk"] == f"{lease}#{created['uuid']}"
    assert claimed["updated_at"] == "2029-12-31T00:01:01.000Z"
    engine.harness.drain()
    settled = raw_task(moto_table, engine.api.user_id, created["uuid"])
    assert settled["next_send_at"] == "2030-01-01T00:01:00.000Z"  # the next daily occurrence, as ISO text
    assert settled["due_sk"] == f"2030-01-01T00:01:00.000Z#{created['uuid']}"
    assert settled["ob_occ"] == FIRST and "lease_until" not in settled
    task = engine.api.get_message(created["uuid"]).data["task"]
    assert task["nextSendAt"] == "2030-01-01T00:01:00.000Z" and task["createdAt"] == created_iso
    assert engine.ctx.now_ms() == T0_MS + 61_000 and FIRST_MS == T0_MS + 60_000


def test_a_run_task_trip_converts_times_only_at_its_edges(engine, monkeypatch):
    """One scheduled one-shot delivered by run_task: the queue message's occurrence is parsed once, the stored
    item's times are read and written at the adapter, the push and the summary carry their ISO text; the
    engine in between computes in ms (before, the ports took ISO and the engine converted back and forth)."""
    created = schedule(engine)
    due(engine)
    assert engine.harness.tick()["enqueuedTasks"] == 1
    messages = engine.harness.receive()
    callers = count_conversions(monkeypatch)
    engine.harness.run(messages)
    assert [p["taskUuid"] for p in engine.push.payloads()][:1] == [created["uuid"]]
    assert engine.api.get_message(created["uuid"]).code == "TASK_NOT_FOUND"  # delivered and deleted
    # the storage edge (the task's stored times read once, the append's condition and lease, the push claim's
    # fence) and the wire edges (the queue message, the pushes' timestamp, the summary); nothing in between
    assert set(callers) <= EDGES, callers
    assert sum(callers.values()) <= 11, callers
    assert callers["amsg.engine.pushes"] == 1  # one timestamp per batch, not per push
