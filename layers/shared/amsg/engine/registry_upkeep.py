"""Keeping a task's uuid registry entry alive as long as the task (docs/decisions.md, 47): a one-shot's entry
expires by itself a month after its occurrence, so a claim of a task that lives on, and an update that moves
its occurrence later or makes it recurring, move the entry's expiry first. The rules are in
:mod:`amsg.domain.registry_life`."""

from __future__ import annotations

from amsg.context import AppContext
from amsg.domain.registry_life import expiry_after_update, extension_s
from amsg.engine.outcomes import recurrence_of
from amsg.observability import logger
from amsg.ports import TaskRow
from amsg.task_payload import StoredPayload


def keep_on_claim(ctx: AppContext, row: TaskRow, now_ms: int) -> None:
    """A claimed task that could outlive its entry (a one-shot retried or deferred for weeks) extends it; if that
    fails, the next claim, days before the entry expires, does."""
    until = extension_s(row.registry_expires_s, now_ms)
    if until is None:
        return
    try:
        ctx.tasks.set_registry_expiry(row, until)
    except Exception as exc:
        logger.warning("uuid registry entry not extended", extra={"taskUuid": row.uuid, "error": type(exc).__name__})


def prepare_update(ctx: AppContext, row: TaskRow, occurrence_ms: int, payload: StoredPayload, now_ms: int) -> bool:
    """Before an update of ``row`` to ``occurrence_ms`` and ``payload``: the entry's expiry moved so that it
    outlives the updated task; True when it no longer expires (the update then drops the task's flag). Raises
    when the entry cannot be written: the update must not happen then."""
    recurring = recurrence_of(payload) != "none"
    change, until = expiry_after_update(row.registry_expires_s, row.next_send_at_ms, occurrence_ms, recurring, now_ms)
    if change:
        ctx.tasks.set_registry_expiry(row, until)
    return change and until is None
