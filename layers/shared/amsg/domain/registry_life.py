"""How long a one-shot's uuid registry entry lives (docs/decisions.md, 47).

The entry makes a task uuid unique across the deployment. A delivered one-shot used to delete it after the task
(one write per message); now a one-shot's entry carries a TTL and a delivered one-shot leaves it to expire: a
create of the uuid takes over an entry whose task is gone, so an entry that outlives its task is harmless. What
must never happen is the reverse, an entry expiring while its task lives. So the TTL starts a month after the
task's occurrence, and whatever keeps a one-shot alive longer passes through a claim or an update: a claim (of a
task retried or deferred) extends the entry once less than half of that month is left, and an update moves the
expiry with a later occurrence, or takes it away when the task becomes recurring.
"""

from __future__ import annotations

REGISTRY_TTL_S = 30 * 86_400  # past the occurrence (or the last extension)
EXTEND_BELOW_S = 15 * 86_400  # a claim extends an entry with less than this left


def registry_expiry_s(occurrence_ms: int, now_ms: int) -> int:
    """The TTL (epoch seconds) of the entry of a one-shot due at ``occurrence_ms``."""
    return max(occurrence_ms, now_ms) // 1000 + REGISTRY_TTL_S


def extension_s(expires_s: int | None, now_ms: int) -> int | None:
    """The entry's new TTL when a task claimed at ``now_ms`` could outlive it; None when it needs none (or has
    no TTL at all)."""
    if expires_s is None or expires_s - now_ms // 1000 >= EXTEND_BELOW_S:
        return None
    return registry_expiry_s(now_ms, now_ms)


def expiry_after_update(
    expires_s: int | None, old_occurrence_ms: int, new_occurrence_ms: int, recurring: bool, now_ms: int
) -> tuple[bool, int | None]:
    """Whether an update must change the entry's expiry first, and to what (None: it never expires). A task whose
    entry expires derives the expiry from its occurrence, so that derived value must never pass the entry's own:
    an update to a later occurrence sets the entry to the new one's; one that makes the task recurring (its
    occurrence then moves on with every delivery) takes the expiry away."""
    if expires_s is None:
        return False, None
    if recurring:
        return True, None
    if new_occurrence_ms > old_occurrence_ms:
        return True, registry_expiry_s(new_occurrence_ms, now_ms)
    return False, None
