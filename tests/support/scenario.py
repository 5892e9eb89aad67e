"""Small helpers the handler tests share: schedule a task through the wire client, move the fixed clock."""

from __future__ import annotations

from typing import Any

# 2029-12-31T00:00:00Z is T0 (tests/conftest.py); the first fire one minute later
FIRST = "2029-12-31T00:01:00.000Z"
FIRST_MS = 1_893_369_600_000 + 60_000


def schedule(env: Any, *, message: str = "hi", **fields: Any) -> dict[str, Any]:
    """POST /schedule-message a fixed message due at :data:`FIRST` (``fields`` override) through
    ``env.api`` (the ``engine`` fixture's namespace) or ``env`` itself (a wire client); asserts the 201 and
    returns its data."""
    api = getattr(env, "api", env)
    payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": message, "firstSendTime": FIRST}
    resp = api.schedule({**payload, **fields})
    assert resp.status == 201, resp.text
    return resp.data


def at(env: Any, ms: int) -> None:
    """Move the fixed clock of the ``engine`` fixture's context to ``ms``."""
    env.ctx.clock.current_ms = ms
