"""How long a one-shot's uuid registry entry lives (docs/decisions.md, 47).

The entry makes a task uuid unique across the deployment. A delivered one-shot used to delete it after the task
(one write per message); now a one-shot's entry carries a TTL and a delivered one-shot leaves it to expire: a
create of the uuid takes over an entry whose task is gone, so an entry that outlives its task is harmless. What
must never happen is the reverse, an entry expiring while its task lives. So the TTL starts a month after the
task's occurrence, and whatever keeps a one-shot alive longer (retries, deferrals, a later occurrence set by an
update) passes through a claim or an update, which extends the entry once less than half of that month is left.
"""

from __future__ import annotations

REGISTRY_TTL_S = 30 * 86_400  # past the occurrence (or the last extension)
EXTEND_BELOW_S = 15 * 86_400  # a claim or an update extends an entry with less than this left


def registry_expiry_s(occurrence_ms: int, now_ms: int) -> int:
    """The TTL (epoch seconds) of the entry of a one-shot due at ``occurrence_ms``."""
    return max(occurrence_ms, now_ms) // 1000 + REGISTRY_TTL_S


def extension_s(expires_s: int | None, alive_until_ms: int) -> int | None:
    """The entry's new TTL when a task known to be alive until ``alive_until_ms`` (now for a claim, the new
    occurrence for an update) could outlive it; None when it needs none (or expires with no TTL at all)."""
    if expires_s is None or expires_s - alive_until_ms // 1000 >= EXTEND_BELOW_S:
        return None
    return registry_expiry_s(alive_until_ms, alive_until_ms)
