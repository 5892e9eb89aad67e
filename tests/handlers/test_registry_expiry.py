"""A one-shot's uuid registry entry expires instead of being deleted when the one-shot is delivered
(docs/decisions.md, 47), driven through the routes, the tick and run_task on moto: the entry carries a TTL a
month past the occurrence, a delivered one-shot leaves it, a create of the uuid by anyone takes it over, and a
task that lives on (an update to a later occurrence, a claim close to the expiry) extends it first. Recurring
tasks' entries never expire."""

from __future__ import annotations

import uuid
from typing import Any

from amsg.domain.registry_life import (
    EXTEND_BELOW_S,
    REGISTRY_TTL_S,
    expiry_after_update,
    extension_s,
    registry_expiry_s,
)
from amsg.timeutil import parse_iso_ms

from tests.conftest import T0_MS
from tests.support.scenario import FIRST, schedule
from tests.support.wire_client import WireClient

DAY_S = 86_400
FIRST_MS = parse_iso_ms(FIRST)
LATER = "2030-01-05T00:00:00.000Z"


def _entry(engine: Any, task_uuid: str) -> dict[str, Any] | None:
    return engine.ctx.tasks.db.get(engine.ctx.tasks.space.uuid_registry_key(task_uuid))


def _task_item(engine: Any, task_uuid: str) -> dict[str, Any] | None:
    return engine.ctx.tasks.db.get(engine.ctx.tasks.space.task_key(engine.api.user_id, task_uuid))


def _other_user(engine: Any) -> WireClient:
    other = WireClient(engine.api.transport, str(uuid.uuid4()))
    other.init()
    assert other.put_subscription(engine.push.subscribe().to_json()).status == 200
    return other


def test_a_one_shot_entry_expires_a_month_after_its_occurrence_and_a_recurring_one_never(engine):
    one_shot = schedule(engine)
    recurring = schedule(engine, recurrenceType="daily")
    entry, item = _entry(engine, one_shot["uuid"]), _task_item(engine, one_shot["uuid"])
    assert entry is not None and item is not None and item["rx"] is True
    assert int(entry["ttl"]) == FIRST_MS // 1000 + REGISTRY_TTL_S
    row = engine.ctx.tasks.get_task(engine.api.user_id, one_shot["uuid"])
    assert row is not None and row.registry_expires_s == int(entry["ttl"])
    entry = _entry(engine, recurring["uuid"])
    assert entry is not None and "ttl" not in entry
    assert "rx" not in (_task_item(engine, recurring["uuid"]) or {})
    assert engine.ctx.tasks.get_task(engine.api.user_id, recurring["uuid"]).registry_expires_s is None


def test_an_owned_one_shot_entry_expires_too_and_is_left_when_it_is_delivered(engine):
    """A cloud-data owner's one-shot: a retired owner's task is failed at its next run and kept a week for
    retention, well inside the entry's life, so its entry may expire like any one-shot's."""
    task = schedule(engine, owner={"type": "character", "id": "rei", "label": "Rei"})
    item = _task_item(engine, task["uuid"])
    assert item is not None and item.get("owner_ref") and item["rx"] is True
    assert int((_entry(engine, task["uuid"]) or {})["ttl"]) == FIRST_MS // 1000 + REGISTRY_TTL_S
    engine.ctx.clock.current_ms = FIRST_MS + 1_000
    engine.harness.tick_and_drain()
    assert len(engine.push.payloads()) == 1 and _task_item(engine, task["uuid"]) is None
    assert int((_entry(engine, task["uuid"]) or {})["ttl"]) == FIRST_MS // 1000 + REGISTRY_TTL_S


def test_a_delivered_one_shot_leaves_its_entry_to_expire_and_anyone_may_take_the_uuid_over(engine):
    task = schedule(engine)
    engine.ctx.clock.current_ms = FIRST_MS + 1_000
    engine.harness.tick_and_drain()
    assert len(engine.push.payloads()) == 1
    assert _task_item(engine, task["uuid"]) is None
    left = _entry(engine, task["uuid"])
    assert left is not None and int(left["ttl"]) == FIRST_MS // 1000 + REGISTRY_TTL_S
    assert engine.api.get_message(task["uuid"]).code == "TASK_NOT_FOUND"
    assert engine.ctx.tasks.find_task(task["uuid"]) is None

    other = _other_user(engine)
    taken = schedule(other, uuid=task["uuid"], recurrenceType="weekly", firstSendTime=LATER)
    entry = _entry(engine, task["uuid"])
    assert entry is not None and entry["user_id"] == other.user_id and "ttl" not in entry
    assert int(entry["id"]) == taken["id"]
    # the uuid is the other user's task now: unique again
    resp = engine.api.schedule({"contactName": "Rei", "messageType": "fixed", "userMessage": "x",
                                "firstSendTime": LATER, "uuid": task["uuid"]})  # fmt: skip
    assert (resp.status, resp.code) == (409, "TASK_UUID_CONFLICT")
    assert other.cancel(task["uuid"]).status == 200
    assert _entry(engine, task["uuid"]) is None  # a cancel deletes the entry, as before


def test_an_update_to_a_later_occurrence_moves_the_expiry_with_it_first(engine):
    task = schedule(engine)
    # a day later: the expiry the task derives from its occurrence must never pass the entry's own
    for later in ("2030-01-01T00:01:00.000Z", "2030-06-01T00:00:00.000Z"):
        assert engine.api.update(task["uuid"], {"nextSendAt": later}).status == 200
        entry = _entry(engine, task["uuid"])
        assert entry is not None and int(entry["ttl"]) == parse_iso_ms(later) // 1000 + REGISTRY_TTL_S
        row = engine.ctx.tasks.get_task(engine.api.user_id, task["uuid"])
        assert row is not None and row.registry_expires_s == int(entry["ttl"])
    # an earlier occurrence leaves the entry as it is (the derived expiry falls below it: safe)
    assert engine.api.update(task["uuid"], {"nextSendAt": FIRST}).status == 200
    assert int((_entry(engine, task["uuid"]) or {})["ttl"]) == parse_iso_ms(later) // 1000 + REGISTRY_TTL_S


def test_an_update_that_makes_a_one_shot_recurring_takes_the_expiry_away(engine):
    task = schedule(engine)
    assert engine.api.update(task["uuid"], {"recurrenceType": "daily"}).status == 200
    entry, item = _entry(engine, task["uuid"]), _task_item(engine, task["uuid"])
    assert entry is not None and "ttl" not in entry
    assert item is not None and "rx" not in item
    engine.ctx.clock.current_ms = FIRST_MS + 1_000
    engine.harness.tick_and_drain()
    assert len(engine.push.payloads()) == 1
    entry = _entry(engine, task["uuid"])  # the task lives on (tomorrow's occurrence): so does its entry
    assert entry is not None and "ttl" not in entry and _task_item(engine, task["uuid"]) is not None


def test_a_claim_close_to_the_expiry_extends_the_entry_or_puts_it_back(engine):
    kept, lost = schedule(engine), schedule(engine)
    db, space = engine.ctx.tasks.db, engine.ctx.tasks.space
    db.table.delete_item(Key=space.uuid_registry_key(lost["uuid"]))  # as if DynamoDB had removed it already
    # still pending more than two weeks after the occurrence (a chain of deferrals, the tick stopped): the
    # claim extends the entry first (this one is then expired as stale, and kept a week for retention)
    late_ms = FIRST_MS + (REGISTRY_TTL_S - EXTEND_BELOW_S + 60) * 1000
    engine.ctx.clock.current_ms = late_ms
    summary = engine.harness.tick()
    assert summary["claimedTasks"] == 2, summary
    for task in (kept, lost):
        entry = _entry(engine, task["uuid"])
        assert entry is not None, task
        assert int(entry["ttl"]) == late_ms // 1000 + REGISTRY_TTL_S
        assert (entry["user_id"], int(entry["id"])) == (engine.api.user_id, task["id"])
    # a claim with more than half a month left writes nothing to the entry
    fresh = schedule(engine, firstSendTime="2031-01-01T00:00:00.000Z")
    engine.ctx.clock.current_ms = parse_iso_ms("2031-01-01T00:00:01.000Z")
    engine.push.set_status(engine.subscription.endpoint_id, 500)  # stays pending, to be retried
    engine.harness.tick_and_drain()
    assert (
        int((_entry(engine, fresh["uuid"]) or {})["ttl"])
        == parse_iso_ms("2031-01-01T00:00:00.000Z") // 1000 + REGISTRY_TTL_S
    )


def test_the_expiry_rule():
    assert registry_expiry_s(T0_MS, T0_MS + 5_000) == (T0_MS + 5_000) // 1000 + REGISTRY_TTL_S
    assert extension_s(None, T0_MS) is None  # an entry that never expires
    expires = registry_expiry_s(T0_MS, T0_MS)
    assert extension_s(expires, T0_MS) is None
    assert extension_s(expires, T0_MS + (REGISTRY_TTL_S - EXTEND_BELOW_S) * 1000) is None
    late = T0_MS + (REGISTRY_TTL_S - EXTEND_BELOW_S + 1) * 1000
    assert extension_s(expires, late) == late // 1000 + REGISTRY_TTL_S
    assert REGISTRY_TTL_S - EXTEND_BELOW_S > 7 * DAY_S  # a deferral (a cap's week at most) wakes before it
    # an update: a later occurrence sets the entry to its expiry; recurring takes it away; else nothing
    assert expiry_after_update(None, T0_MS, T0_MS + 1, True, T0_MS) == (False, None)
    assert expiry_after_update(expires, T0_MS, T0_MS + 60_000, False, T0_MS) == (
        True,
        (T0_MS + 60_000) // 1000 + REGISTRY_TTL_S,
    )
    assert expiry_after_update(expires, T0_MS, T0_MS - 60_000, False, T0_MS) == (False, None)
    assert expiry_after_update(expires, T0_MS, T0_MS, True, T0_MS) == (True, None)
