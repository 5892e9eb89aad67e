"""The fixed cost of idle tenants per tick (docs/tenancy-data.md): an idle tenant's cleanup index is read one
tick in TENANT_CLEANUP_EVERY, spread over the minutes by tenant, and every tick while its last read found work."""

from __future__ import annotations

from amsg.engine import tick
from amsg.tenancy.scope import TenantContext


def _lane(tenant_id: str) -> TenantContext:
    lane = TenantContext.__new__(TenantContext)
    lane.tenant_id = tenant_id
    return lane


def test_an_idle_tenant_reads_its_cleanup_index_once_in_every_rotation():
    for n in range(50):
        lane = _lane(f"tenant-{n}")
        turns = [tick._cleanup_turn(lane, minute * 60_000) for minute in range(tick.TENANT_CLEANUP_EVERY * 3)]
        assert sum(turns) == 3
        assert turns[: tick.TENANT_CLEANUP_EVERY] * 3 == turns


def test_a_tenant_with_cleanup_work_is_read_every_tick_until_it_has_none(monkeypatch):
    lane = _lane("busy")
    off = next(m for m in range(tick.TENANT_CLEANUP_EVERY) if not tick._cleanup_turn(lane, m * 60_000))
    results = iter([{"cleanupOperationsAdvanced": 1}, {"cleanupOperationsAdvanced": 0}])

    def resume(ctx, summary, remaining_ms):
        summary.housekeeping.update(next(results))

    monkeypatch.setattr(tick, "_resume_cleanups", resume)
    monkeypatch.setattr(tick, "_cleanups_in_progress", set())
    tick._resume_tenant_cleanups(lane, tick.TickSummary(), lambda: 60_000)
    assert tick._cleanup_turn(lane, off * 60_000)  # work found: served next tick whatever its slot
    tick._resume_tenant_cleanups(lane, tick.TickSummary(), lambda: 60_000)
    assert not tick._cleanup_turn(lane, off * 60_000)  # nothing left: back to its slot
