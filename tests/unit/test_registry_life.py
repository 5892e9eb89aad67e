"""The uuid registry entry's expiry rules (docs/decisions.md, 47), attacked as a model: a one-shot (or a task an
update made recurring) lives through random claims, deferrals of up to a week, updates to later or earlier
occurrences and recurring deliveries, each step applying the rules the claim and update paths apply
(engine/registry_upkeep.py). The entry must never expire while the task lives, and the expiry the task derives
from its occurrence must never pass the entry's own (a claim decides on the derived one)."""

from __future__ import annotations

from amsg.domain.registry_life import expiry_after_update, extension_s, registry_expiry_s
from hypothesis import given, settings
from hypothesis import strategies as st

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS
T0_MS = 1_893_369_600_000

steps = st.lists(
    st.one_of(
        st.tuples(st.just("defer"), st.integers(1, WEEK_MS)),  # claimed, deferred or retried: claimed again then
        st.tuples(st.just("update"), st.integers(-30 * DAY_MS, 400 * DAY_MS)),  # a new occurrence, from now
        st.tuples(st.just("recurring"), st.sampled_from([DAY_MS, WEEK_MS])),  # an update makes it recurring
        st.tuples(st.just("deliver"), st.just(0)),  # a recurring task's occurrence delivered: the next one
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(lead=st.integers(0, 400 * DAY_MS), steps=steps)
def test_the_entry_outlives_its_task_whatever_the_task_goes_through(lead, steps):
    now = T0_MS
    occurrence = now + lead  # a one-shot as created
    created = now
    entry: int | None = registry_expiry_s(occurrence, now)  # its TTL (None: never expires)
    flagged, period = True, 0  # period: the recurrence, once an update made it recurring

    def derived() -> int | None:
        return registry_expiry_s(occurrence, created) if flagged else None

    def claim_at(at: int) -> None:
        nonlocal now, entry
        now = at
        assert entry is None or entry * 1000 > now, "the entry expired while its task lived"
        until = extension_s(derived(), now)
        if until is not None:
            entry = until

    claim_at(max(now, occurrence))  # due: claimed
    for kind, value in steps:
        if kind == "defer":
            claim_at(now + value)
        elif kind == "update":  # an update sets a new occurrence, later or earlier, in the future
            new = max(now + 60_000, occurrence + value)
            change, until = expiry_after_update(derived(), occurrence, new, period > 0, now)
            if change:
                entry = until
                flagged = until is not None
            occurrence = new
            claim_at(max(now, occurrence))
        elif kind == "recurring" and period == 0:
            change, until = expiry_after_update(derived(), occurrence, occurrence, True, now)
            if change:
                entry, flagged = until, until is not None
            period = value
        elif kind == "deliver" and period:
            occurrence = max(occurrence, now) + period
            claim_at(occurrence)
        d = derived()
        assert d is None or (entry is not None and d <= entry), "the derived expiry passed the entry's own"
        assert flagged or entry is None, "an entry that expires without its task knowing"
