"""The built-in before-fire policy: the user's quiet hours and frequency caps (see docs/delivery-policy.md).

It runs before anything else of a scheduled fire (before the host's ``on_before_fire``, before any LLM call)
and answers through the same defer path a hook uses: the occurrence keeps its identity (push ids,
``occurrenceMs``), no retry is consumed, and the task is due again when the quiet window ends or a full cap
window closes. ``instant`` messages (the user is in the app) are exempt.

Caps are checked twice: a cheap read before generation (so a capped fire spends no LLM call), and exactly in
the send-claim transaction of the occurrence's first push, where the counter is conditionally incremented
together with the outbox row claim and the task-claim fence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import DecryptError, UserCodec
from amsg.domain.delivery_policy import DeliveryPolicy, policy_from_stored, quiet_hours_end, window_bounds
from amsg.observability import logger
from amsg.ports import CapCharge, TaskRow
from amsg.task_payload import StoredPayload


@dataclass
class PolicyDecision:
    """``defer_until_ms`` when the fire must wait; else the caps to charge with the first push."""

    defer_until_ms: int | None = None
    charges: list[CapCharge] = field(default_factory=list)


def is_exempt(payload: StoredPayload) -> bool:
    return payload.get("messageType") == "instant"


def load_policy(
    ctx: AppContext, user_id: str, codec: UserCodec, prefetched: tuple[Any, ...] | None = None
) -> DeliveryPolicy | None:
    """The user's policy, or None (none set, no store, or unreadable under this master key). ``prefetched``
    is ``(row,)`` when run_task already read the policy item together with the task."""
    if ctx.policies is None:
        return None
    row = prefetched[0] if prefetched is not None else ctx.policies.get_policy(user_id)
    if row is None:
        return None
    try:
        return policy_from_stored(jsonio.loads(codec.decrypt(row.encrypted_policy)))
    except (DecryptError, ValueError):
        logger.warning("stored delivery policy cannot be decrypted; it is not applied")
        return None


def character_of(payload: StoredPayload) -> str | None:
    metadata = payload.get("metadata")
    value = metadata.get("charId") if isinstance(metadata, dict) else None
    if not isinstance(value, str) or not value:
        value = payload.get("charId")
    return value if isinstance(value, str) and value else None


def cap_charges(
    policy: DeliveryPolicy, row: TaskRow, payload: StoredPayload, codec: UserCodec, now_ms: int
) -> list[CapCharge]:
    """The counters this occurrence is charged to at ``now_ms`` (character caps only for tasks with a charId;
    the character id is stored as an HMAC under the user key, never in clear)."""
    occurrence = f"{row.uuid}@{row.next_send_at_ms or None}"
    character = character_of(payload)
    charges: list[CapCharge] = []
    for cap in policy.caps:
        start, end = window_bounds(cap, now_ms)
        if cap.scope == "user":
            counter = f"u#{cap.window_minutes}#{start}"
        elif character is not None:
            counter = f"c#{codec.group_value('charId:' + character)}#{cap.window_minutes}#{start}"
        else:
            continue
        charges.append(CapCharge(counter=counter, max=cap.max, window_end_ms=end, occurrence=occurrence))
    return charges


def before_fire(
    ctx: AppContext,
    row: TaskRow,
    payload: StoredPayload,
    codec: UserCodec,
    *,
    check_caps: bool,
    prefetched: tuple[Any, ...] | None = None,
) -> PolicyDecision:
    """Whether this fire waits (quiet hours, a full cap) and, if not, which caps its first push charges.

    ``check_caps`` is False when pushes of this occurrence already went out (a redelivery): the occurrence
    was counted then."""
    if is_exempt(payload):
        return PolicyDecision()
    policy = load_policy(ctx, row.user_id, codec, prefetched)
    if policy is None:
        return PolicyDecision()
    now = ctx.now_ms()
    if policy.quiet_hours is not None:
        ends = quiet_hours_end(policy.quiet_hours, now)
        if ends is not None:
            return PolicyDecision(defer_until_ms=ends)
    if not check_caps or not policy.caps:
        return PolicyDecision()
    charges = cap_charges(policy, row, payload, codec, now)
    assert ctx.policies is not None
    full_until = ctx.policies.cap_room(row.user_id, charges) if charges else None
    if full_until is not None:
        return PolicyDecision(defer_until_ms=full_until)
    return PolicyDecision(charges=charges)
