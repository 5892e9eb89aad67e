"""The tick (EventBridge Scheduler, once a minute; see docs/architecture.md): claim due tasks (conditional
writes), settle stale ones, enqueue the rest, housekeeping, then resume due cloud-data cleanup operations. The
tick never delivers. With a claim queue the tick claims nothing itself: it sends one claim job per key space and
due shard with due work, and the claimer function claims them (:mod:`amsg.engine.claim_jobs`).

On the multi-tenant line one tick serves every active tenant, each through its own scoped context: claims
interleave tenants round by round with a per-tenant quota of the tick's claim limit, so no tenant's backlog can
hold back another's due tasks (docs/tenancy-data.md)."""

from __future__ import annotations

import itertools
import random
import uuid as uuid_lib
import zlib
from collections.abc import Callable
from typing import Any

from amsg.context import AppContext
from amsg.engine import cleanup
from amsg.engine.claim_jobs import fan_out
from amsg.engine.claiming import Enqueuer, Lane, claim_step, due_in_order
from amsg.engine.env import sandbox_pool
from amsg.engine.summary import TickResult, TickSummary
from amsg.engine.tenant_deletion import advance_tenant_deletions
from amsg.hooks import load_hooks
from amsg.observability import logger
from amsg.ports import DueCandidate
from amsg.tenancy.scope import TenantContext, scoped_context, tenant_of

TICK_TIME_MARGIN_MS = 8_000  # stop claiming while there is time left to enqueue and log
RETENTION_MS = 7 * 86_400_000
HOUSEKEEPING_LIMIT = 100
TENANT_HOUSEKEEPING_EVERY = 10  # ticks (minutes) between one tenant's retention sweeps
# ticks (minutes) between two reads of an idle tenant's cloud-data cleanup index; the API advances an operation
# on every poll, so the tick only resumes abandoned ones (docs/tenancy-data.md, the cost of idle tenants)
TENANT_CLEANUP_EVERY = 5
# from this many tenants on, the tick reads every tenant's count of pending tasks (one BatchGetItem per 100) and
# skips the due-index queries of those with none; the read then costs at most 5% of the queries it can save
IDLE_CHECK_MIN_TENANTS = 20
# tenants whose last cleanup read found work: read again next tick (per sandbox, best effort; a lost sandbox
# costs an operation at most TENANT_CLEANUP_EVERY minutes)
_cleanups_in_progress: set[str] = set()


def run_tick(
    ctx: AppContext,
    *,
    scheduled_time: str | None = None,
    remaining_ms: Callable[[], int] = lambda: 60_000,
    owner: str | None = None,
) -> TickResult:
    started = ctx.now_ms()
    summary = TickSummary(scheduled_time=scheduled_time)
    owner = owner or f"tick:{uuid_lib.uuid4()}"
    if ctx.settings.multi_tenant:
        _tick_tenants(ctx, summary, remaining_ms, owner)
    else:
        if ctx.delivery.push_sender is None:
            summary.stopped_by = "vapid"  # claim nothing without VAPID: no push could be sent
        elif ctx.delivery.claim_queue is not None:
            fan_out(ctx, [ctx], summary)  # claimers claim (amsg.engine.claim_jobs)
        else:
            claim_and_enqueue(ctx, summary, remaining_ms, owner)
        _housekeeping(ctx, summary)
        _resume_cleanups(ctx, summary, remaining_ms)
    result = summary.as_dict(started_ms=started, now_ms=ctx.now_ms())
    busy = (
        summary.due
        or summary.stale
        or summary.failed
        or summary.stopped_by
        or summary.housekeeping.get("deletedSettledTasks")
        or summary.housekeeping.get("cleanupOperationsAdvanced")
    )
    # an idle minute is not worth a log line (1,440 a day); anything that happened is
    (logger.info if busy else logger.debug)("tick finished", extra={"summary": result})
    return result


def claim_and_enqueue(ctx: AppContext, summary: TickSummary, remaining_ms: Callable[[], int], owner: str) -> None:
    """Claim due tasks in due order across every shard, up to ``tick_claim_workers`` claims in flight, and
    enqueue them in batches of ten; stop when the time margin or the claim limit is reached.

    Candidates are merged from all shards by their due-index key (eligible time), and serialize groups are
    decided one candidate at a time in that order, so "earlier due first" holds within a group across shards;
    only the independent conditional claims run in parallel."""
    settings = ctx.settings
    enqueuer = Enqueuer(ctx, summary)
    hooks = load_hooks(settings.hooks_module)
    released: set[tuple[str, str]] = set()  # (user, group key) released this tick: one per group per tick
    workers = max(1, settings.tick_claim_workers)
    source = due_in_order(ctx, max(1, settings.due_shards), ctx.now_ms)
    pool = sandbox_pool("claim", workers)  # one pool per sandbox: its threads keep their DynamoDB clients
    while True:
        if remaining_ms() < TICK_TIME_MARGIN_MS:
            summary.stopped_by = "time"
            break
        room = settings.tick_claim_limit - summary.claimed
        if room <= 0:
            summary.stopped_by = "limit"
            break
        chunk = list(itertools.islice(source, min(room, workers * ctx.claims.claim_batch)))
        if not chunk:
            break
        claim_step(ctx, [(Lane(ctx, source, enqueuer, hooks, released), chunk)], pool, owner, summary)
    enqueuer.flush()


def tenant_lanes(ctx: AppContext) -> list[TenantContext]:
    """A scoped context per active tenant, in random order (no tenant is always first when time runs out).
    Each tenant's master key is read (registry, KMS behind a bounded-age cache) only when its work needs it."""
    directory, keys = ctx.tenants, ctx.tenant_keys
    if directory is None or keys is None:
        return []
    ids = directory.active_tenant_ids()
    random.shuffle(ids)
    return [scoped_context(ctx, tenant_id, _key_reader(keys, tenant_id)) for tenant_id in ids]


def _key_reader(keys: Any, tenant_id: str) -> Callable[[], str | None]:
    """The tenant's key, read on first use and kept for this tick (one registry read per tenant per tick)."""
    read: list[str | None] = []

    def key() -> str | None:
        if not read:
            read.append(keys.master_key(tenant_id))
        return read[0]

    return key


def _tick_tenants(ctx: AppContext, summary: TickSummary, remaining_ms: Callable[[], int], owner: str) -> None:
    lanes = tenant_lanes(ctx)
    summary.tenants = len(lanes)
    if ctx.delivery.push_sender is None:
        summary.stopped_by = "vapid"
    elif ctx.delivery.claim_queue is not None:  # one claim job per tenant and shard with due work
        fan_out(ctx, list(_may_have_due_work(ctx, lanes, summary)), summary)
    else:
        claim_fairly(ctx, lanes, summary, remaining_ms, owner)
    for lane in lanes:  # housekeeping and cleanups per tenant, while there is time
        if remaining_ms() < TICK_TIME_MARGIN_MS:
            deferred = summary.housekeeping.get("tenantsDeferred", 0)
            summary.housekeeping["tenantsDeferred"] = (deferred if isinstance(deferred, int) else 0) + 1
            continue
        part = TickSummary()
        if _housekeeping_turn(lane, ctx.now_ms()):
            _housekeeping(lane, part)
        if _cleanup_turn(lane, ctx.now_ms()):
            _resume_tenant_cleanups(lane, part, remaining_ms)
        for name, value in part.housekeeping.items():
            total = summary.housekeeping.get(name)
            summary.housekeeping[name] = total + value if isinstance(value, int) and isinstance(total, int) else value
    try:  # tenants being deleted: bounded steps, resumed by the next tick (docs/tenancy-data.md)
        summary.housekeeping.update(advance_tenant_deletions(ctx, remaining_ms))
    except Exception as exc:
        summary.housekeeping["tenantDeletionError"] = type(exc).__name__


def _housekeeping_turn(lane: AppContext, now_ms: int) -> bool:
    """Retention and TTL sweeps of a tenant run one tick in :data:`TENANT_HOUSEKEEPING_EVERY` (their deadlines
    are days, not minutes), spread over the minutes by tenant, so an idle tenant costs a tick few requests."""
    tenant = tenant_of(lane) or ""
    return zlib.crc32(tenant.encode()) % TENANT_HOUSEKEEPING_EVERY == (now_ms // 60_000) % TENANT_HOUSEKEEPING_EVERY


def _cleanup_turn(lane: AppContext, now_ms: int) -> bool:
    """A tenant's cleanup index is read one tick in :data:`TENANT_CLEANUP_EVERY` (spread over the minutes by
    tenant), and every tick while its last read found work."""
    tenant = tenant_of(lane) or ""
    if tenant in _cleanups_in_progress:
        return True
    slot = zlib.crc32(f"cleanup:{tenant}".encode()) % TENANT_CLEANUP_EVERY
    return slot == (now_ms // 60_000) % TENANT_CLEANUP_EVERY


def _resume_tenant_cleanups(lane: AppContext, summary: TickSummary, remaining_ms: Callable[[], int]) -> None:
    _resume_cleanups(lane, summary, remaining_ms)
    tenant = tenant_of(lane) or ""
    found = summary.housekeeping.get("cleanupOperationsAdvanced") or summary.housekeeping.get("cleanupOperationsFailed")
    if found or "cleanupError" in summary.housekeeping:
        _cleanups_in_progress.add(tenant)
    else:
        _cleanups_in_progress.discard(tenant)


def claim_fairly(
    ctx: AppContext, lanes: list[TenantContext], summary: TickSummary, remaining_ms: Callable[[], int], owner: str
) -> None:
    """Claim across tenants in rounds: each round gives every tenant that still has due work an equal share of
    the room left under the claim limit (at least one task, at most one claim chunk); a tenant that takes less
    than its share drops out and its unused share goes to the others in the next round. So tenant B's few
    due tasks are claimed in the first round however large tenant A's backlog is. A round's claims are sent
    together (several tenants' claims in one transaction), which changes neither their order nor the shares."""
    settings = ctx.settings
    hooks = load_hooks(settings.hooks_module)
    workers = max(1, settings.tick_claim_workers)
    shards = max(1, settings.due_shards)
    pool = sandbox_pool("claim", workers)

    lanes = _may_have_due_work(ctx, lanes, summary)
    active = [Lane(t, due_in_order(t, shards, ctx.now_ms), Enqueuer(t, summary), hooks, set()) for t in lanes]
    while active:
        room = settings.tick_claim_limit - summary.claimed
        if room <= 0:
            summary.stopped_by = "limit"
            break
        quota = max(1, min(workers * ctx.claims.claim_batch, room // len(active)))
        parts, still = _take_round(ctx, active, quota, room, remaining_ms, summary)
        if parts:  # every tenant's chunk of the round claimed together: fewer, fuller transactions
            claim_step(ctx, parts, pool, owner, summary)
        if summary.stopped_by == "time":
            return
        active = still


def _may_have_due_work(ctx: AppContext, lanes: list[TenantContext], summary: TickSummary) -> list[TenantContext]:
    """The tenants whose due index is worth reading: with many tenants, those whose exact count of pending tasks
    (kept in the transactions that create and end them: docs/tenancy.md; read eventually consistent, as the due
    index is) is not 0. A tenant with none is still read on its housekeeping slot, one tick in
    :data:`TENANT_HOUSEKEEPING_EVERY`, so no count could hold a task back for longer. If the counts cannot be
    read, every tenant's index is."""
    if len(lanes) < IDLE_CHECK_MIN_TENANTS:
        return lanes
    try:
        counts = lanes[0].claims.pending_counts([lane.claims for lane in lanes])
    except Exception as exc:
        summary.housekeeping["pendingCountsError"] = type(exc).__name__
        return lanes
    now = ctx.now_ms()
    kept = [lane for lane, n in zip(lanes, counts, strict=True) if n != 0 or _housekeeping_turn(lane, now)]
    summary.housekeeping["idleTenantsSkipped"] = len(lanes) - len(kept)
    return kept


def _take_round(
    ctx: AppContext,
    active: list[Lane],
    quota: int,
    room: int,
    remaining_ms: Callable[[], int],
    summary: TickSummary,
) -> tuple[list[tuple[Lane, list[DueCandidate]]], list[Lane]]:
    """Each lane's due candidates of one round (up to ``quota``, ``room`` in all), and the lanes that filled
    their quota (they may have more); stops taking when the tick's time margin is reached."""
    parts: list[tuple[Lane, list[DueCandidate]]] = []
    still: list[Lane] = []
    for lane in active:
        if remaining_ms() < TICK_TIME_MARGIN_MS:
            summary.stopped_by = "time"
            break
        take = min(quota, room)
        chunk = list(itertools.islice(lane.source, take)) if take > 0 else []
        room -= len(chunk)
        if chunk:
            parts.append((lane, chunk))
        if chunk and len(chunk) == take:
            still.append(lane)
    return parts, still


def _housekeeping(ctx: AppContext, summary: TickSummary) -> None:
    """Best-effort and isolated: housekeeping never aborts the tick or loses its summary."""
    now = ctx.now_ms()
    try:
        summary.housekeeping["deletedSettledTasks"] = ctx.claims.delete_settled_before(
            now - RETENTION_MS, shards=max(1, ctx.settings.due_shards), limit=HOUSEKEEPING_LIMIT
        )
    except Exception as exc:
        summary.housekeeping["settledTasksError"] = type(exc).__name__
    ttl = ctx.settings.client_state_ttl_days
    cleanup = getattr(ctx.client_state, "cleanup_expired", None) if ttl else None  # no TTL: no client state touched
    if cleanup is not None:
        try:
            summary.housekeeping["expiredStateEntries"] = cleanup(ttl, now, limit=HOUSEKEEPING_LIMIT)
        except Exception as exc:
            summary.housekeeping["clientStateError"] = type(exc).__name__


def _resume_cleanups(ctx: AppContext, summary: TickSummary, remaining_ms: Callable[[], int]) -> None:
    """Cloud-data cleanup operations continue here, after delivery and housekeeping, isolated like them."""
    try:
        summary.housekeeping.update(cleanup.resume_due(ctx, remaining_ms))
    except Exception as exc:
        summary.housekeeping["cleanupError"] = type(exc).__name__
