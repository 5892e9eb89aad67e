"""Rows a task names instead of the by-task index (docs/decisions.md, 45), through the real handlers: the API's
cancel and supersede still discard every row nobody received, a recurring task stops naming its rows once they
are delivered, and a row whose push is unconfirmed stays named until the task goes."""

from __future__ import annotations

import pytest

from tests.conftest import T0_MS
from tests.support import scenario

pytestmark = pytest.mark.memory_store

DAY_MS = 86_400_000


def due(env, ms: int = 61_000) -> None:
    env.ctx.clock.current_ms = T0_MS + ms


def outbox_ids(env) -> list[str]:
    return [entry["messageId"] for entry in env.api.get_encrypted("/outbox").data["entries"]]


def named(env, uuid: str) -> tuple[str, ...]:
    task = env.ctx.tasks.get_task(env.api.user_id, uuid)
    return () if task is None else task.outbox_message_ids


def test_a_cancel_after_a_failed_push_discards_both_rows_nobody_received(engine):
    engine.push.set_status(engine.subscription.endpoint_id, 500)
    created = scenario.schedule(engine, message="第一句。第二句！")
    due(engine)
    engine.harness.tick_and_drain()  # appended, first push refused: a retry waits
    assert len(outbox_ids(engine)) == 2 and len(named(engine, created["uuid"])) == 2
    assert engine.api.cancel(created["uuid"]).status == 200
    assert outbox_ids(engine) == []


def test_a_supersede_after_a_failed_push_discards_the_old_tasks_rows(engine):
    engine.push.set_status(engine.subscription.endpoint_id, 500)
    old = scenario.schedule(engine, message="旧的。")
    due(engine)
    engine.harness.tick_and_drain()
    assert len(outbox_ids(engine)) == 1
    scenario.schedule(engine, message="新的。", supersedesUuid=old["uuid"], firstSendTime="2029-12-31T01:00:00.000Z")
    assert outbox_ids(engine) == []


def test_a_recurring_task_stops_naming_its_rows_once_they_are_delivered(engine):
    created = scenario.schedule(engine, message="早安。", recurrenceType="daily")
    due(engine)
    engine.harness.tick_and_drain()
    assert len(engine.push.payloads()) == 1
    assert named(engine, created["uuid"]) == ()  # delivered: nothing left for a discard to find
    due(engine, 61_000 + DAY_MS)
    engine.harness.tick_and_drain()
    assert len(engine.push.payloads()) == 2 and named(engine, created["uuid"]) == ()


def test_an_unconfirmed_push_keeps_its_row_named_and_a_cancel_still_finds_it(engine):
    created = scenario.schedule(engine, message="第一句。第二句！", recurrenceType="daily")
    engine.push.set_delay(engine.subscription.endpoint_id, 0.6)
    engine.ctx.delivery.push_sender._timeout_s = 0.2  # the sandbox's sender, as AMSG_PUSH_TIMEOUT_MS=200 builds it
    due(engine)
    engine.harness.tick_and_drain()
    rows = named(engine, created["uuid"])
    assert len(rows) == 2  # the first push's outcome is unknown, the second waits for the pull
    assert sorted(outbox_ids(engine)) == sorted(rows)
    assert engine.api.cancel(created["uuid"]).status == 200
    assert outbox_ids(engine) == []
