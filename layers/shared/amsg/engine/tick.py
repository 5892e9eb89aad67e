"""The tick (EventBridge Scheduler, once a minute; see docs/architecture.md): claim due tasks (conditional
writes), settle stale ones, enqueue the rest, housekeeping, then resume due cloud-data cleanup operations. The
tick never delivers.

On the multi-tenant line one tick serves every active tenant, each through its own scoped context: claims
interleave tenants round by round with a per-tenant quota of the tick's claim limit, so no tenant's backlog can
hold back another's due tasks (docs/tenancy-data.md)."""

from __future__ import annotations

import enum
import heapq
import itertools
import random
import uuid as uuid_lib
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from amsg.context import AppContext
from amsg.crypto import StoredPayloadUnreadable
from amsg.engine import cleanup
from amsg.engine.env import row_view, sandbox_pool
from amsg.engine.messages import TaskMessage
from amsg.engine.outcomes import release_claim
from amsg.engine.stale import batch_outboxed, is_stale, settle_stale
from amsg.engine.summary import DeliverySummary, TickSummary
from amsg.engine.tenant_deletion import advance_tenant_deletions
from amsg.hooks import Hooks, load_hooks
from amsg.observability import logger
from amsg.ports import CLAIM_ALONE, CLAIM_BATCH, ClaimWanted, DueCandidate, TaskRow
from amsg.tenancy.scope import TenantContext, scoped_context, tenant_of

TICK_PAGE = 100
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
) -> dict[str, Any]:
    started = ctx.now_ms()
    summary = TickSummary(scheduled_time=scheduled_time)
    owner = owner or f"tick:{uuid_lib.uuid4()}"
    if ctx.settings.multi_tenant:
        _tick_tenants(ctx, summary, remaining_ms, owner)
    else:
        if ctx.delivery.push_sender is None:
            summary.stopped_by = "vapid"  # claim nothing without VAPID: no push could be sent
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
    enqueuer = _Enqueuer(ctx, summary)
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
        chunk = list(itertools.islice(source, min(room, workers * CLAIM_BATCH)))
        if not chunk:
            break
        _claim_step(ctx, [(_Lane(ctx, source, enqueuer, hooks, released), chunk)], pool, owner, summary)
    enqueuer.flush()


class _Lane:
    """One key space's claiming state within a tick: its context, due candidates, enqueuer and groups."""

    def __init__(
        self, ctx: AppContext, source: Iterator[DueCandidate], enqueuer: _Enqueuer, hooks: Hooks, released: set
    ) -> None:
        self.ctx = ctx
        self.source = source
        self.enqueuer = enqueuer
        self.hooks = hooks
        self.released = released


def _claim_step(
    ctx: AppContext,
    parts: list[tuple[_Lane, list[DueCandidate]]],
    pool: ThreadPoolExecutor,
    owner: str,
    summary: TickSummary,
) -> None:
    """Claim one step's candidates (one lane's chunk, or a round's chunks of every tenant: their batched claims
    share transactions) and enqueue (or settle) what each lane claimed."""
    now = ctx.now_ms()
    terms: dict[str, Any] = {"now_ms": now, "lease_until_ms": now + ctx.settings.tick_claim_lease_ms, "owner": owner}
    outcomes = _claim_chunk(parts, pool, terms, summary)
    for (lane, _), claimed in zip(parts, outcomes, strict=True):
        _take_claimed(lane.ctx, claimed, now, summary, lane.enqueuer)
        lane.enqueuer.flush()


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
    else:
        claim_fairly(ctx, lanes, summary, remaining_ms, owner)
    for lane in lanes:  # housekeeping and cleanups per tenant, while there is time
        if remaining_ms() < TICK_TIME_MARGIN_MS:
            summary.housekeeping["tenantsDeferred"] = summary.housekeeping.get("tenantsDeferred", 0) + 1
            continue
        part = TickSummary()
        if _housekeeping_turn(lane, ctx.now_ms()):
            _housekeeping(lane, part)
        if _cleanup_turn(lane, ctx.now_ms()):
            _resume_tenant_cleanups(lane, part, remaining_ms)
        for name, value in part.housekeeping.items():
            total = summary.housekeeping.get(name)
            both_counts = isinstance(value, int) and isinstance(total, int)
            summary.housekeeping[name] = total + value if both_counts else value
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
    active = [_Lane(t, due_in_order(t, shards, ctx.now_ms), _Enqueuer(t, summary), hooks, set()) for t in lanes]
    while active:
        room = settings.tick_claim_limit - summary.claimed
        if room <= 0:
            summary.stopped_by = "limit"
            break
        quota = max(1, min(workers * CLAIM_BATCH, room // len(active)))
        parts, still = _take_round(ctx, active, quota, room, remaining_ms, summary)
        if parts:  # every tenant's chunk of the round claimed together: fewer, fuller transactions
            _claim_step(ctx, parts, pool, owner, summary)
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
    active: list[_Lane],
    quota: int,
    room: int,
    remaining_ms: Callable[[], int],
    summary: TickSummary,
) -> tuple[list[tuple[_Lane, list[DueCandidate]]], list[_Lane]]:
    """Each lane's due candidates of one round (up to ``quota``, ``room`` in all), and the lanes that filled
    their quota (they may have more); stops taking when the tick's time margin is reached."""
    parts: list[tuple[_Lane, list[DueCandidate]]] = []
    still: list[_Lane] = []
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


class _Enqueuer:
    """Claimed rows go to SQS in batches of ten; a row that could not be enqueued is released at once (due
    again now instead of after its lease)."""

    def __init__(self, ctx: AppContext, summary: TickSummary) -> None:
        self.ctx = ctx
        self.summary = summary
        self.queue = ctx.delivery.queue
        self.pending: list[TaskRow] = []
        self.correlation = logger.get_correlation_id()  # for tasks created before correlation ids were stored

    def add(self, row: TaskRow) -> None:
        self.pending.append(row)
        if len(self.pending) >= 10:
            self.flush()

    def flush(self) -> None:
        pending = self.pending
        if not pending:
            return
        tenant = tenant_of(self.ctx)  # the message names the tenant whose space and key run_task uses
        messages = [
            TaskMessage(
                row.user_id,
                row.uuid,
                row.claim_version,
                row.next_send_at_ms,
                row.correlation_id or self.correlation,
                tenant,
            ).to_body()
            for row in pending
        ]
        failed = set(self.queue.send_many(messages)) if self.queue is not None else set(range(len(messages)))
        for index, row in enumerate(pending):
            if index in failed:
                self.summary.enqueue_failed += 1
                release_claim(self.ctx, row)  # due again at once instead of after the lease
            else:
                self.summary.enqueued += 1
        pending.clear()


def _claim_chunk(
    parts: list[tuple[_Lane, list[DueCandidate]]],
    pool: ThreadPoolExecutor,
    terms: dict[str, Any],
    summary: TickSummary,
) -> list[list[tuple[DueCandidate, Any]]]:
    """Claim the candidates of one step (batched transactions across the parts, grouped or faulty ones alone);
    per part, each candidate's outcome is its row, None (not claimed) or the exception its claim raised."""
    batched, alone = _sort_candidates(parts, pool, terms, summary)
    packs = [batched[i : i + CLAIM_BATCH] for i in range(0, len(batched), CLAIM_BATCH)]
    jobs = [(pack, pool.submit(_claim_pack, parts, pack, terms)) for pack in packs]
    outcomes: list[list[tuple[DueCandidate, Any]]] = [[] for _ in parts]
    for pack, job in jobs:
        try:
            rows = job.result()
        except Exception as exc:  # the read back failed: these come back when their lease expires
            for index, candidate in pack:
                outcomes[index].append((candidate, exc))
            continue
        for (index, candidate), row in zip(pack, rows, strict=True):
            if row is CLAIM_ALONE:  # the batch could not run: one faulty task must not hold back the rest
                alone.append((index, candidate, pool.submit(_claim_alone, parts[index][0].ctx, candidate, None, terms)))
            else:
                outcomes[index].append((candidate, row))
    for index, candidate, single in alone:
        try:
            outcomes[index].append((candidate, single.result()))
        except Exception as exc:  # throttled past the SDK's retries: the task stays due for the next tick
            outcomes[index].append((candidate, exc))
    return outcomes


def _sort_candidates(
    parts: list[tuple[_Lane, list[DueCandidate]]],
    pool: ThreadPoolExecutor,
    terms: dict[str, Any],
    summary: TickSummary,
) -> tuple[list[tuple[int, DueCandidate]], list[tuple[int, DueCandidate, Future]]]:
    """(part, candidate) to claim in batches, in order; a grouped claim takes its group's lock in its own
    transaction, submitted at once."""
    batched: list[tuple[int, DueCandidate]] = []
    alone: list[tuple[int, DueCandidate, Future]] = []
    for index, (lane, chunk) in enumerate(parts):
        for candidate in chunk:
            summary.due += 1
            group = serialize_group(lane.ctx, lane.hooks, candidate.user_id, candidate.uuid, lane.released)
            if group is SKIP:
                summary.serialize_skipped += 1
            elif group is None:
                batched.append((index, candidate))
            else:
                alone.append((index, candidate, pool.submit(_claim_alone, lane.ctx, candidate, group, terms)))
    return batched, alone


def _claim_pack(
    parts: list[tuple[_Lane, list[DueCandidate]]], pack: list[tuple[int, DueCandidate]], terms: dict[str, Any]
) -> list[Any]:
    """One transaction of up to CLAIM_BATCH claims, of one lane or of several (each in its own key space)."""
    positions: dict[int, list[int]] = {}
    for position, (index, _) in enumerate(pack):
        positions.setdefault(index, []).append(position)
    groups = list(positions.items())
    wanted = [(parts[index][0].ctx.claims, [_wanted(pack[p][1]) for p in where]) for index, where in groups]
    claims = wanted[0][0]
    results = (
        claims.claim_many_together(wanted, **terms) if len(wanted) > 1 else [claims.claim_many(wanted[0][1], **terms)]
    )
    rows: list[Any] = [None] * len(pack)
    for (_, where), part_rows in zip(groups, results, strict=True):
        for p, row in zip(where, part_rows, strict=True):
            rows[p] = row
    return rows


def _take_claimed(
    ctx: AppContext, outcomes: list[tuple[DueCandidate, Any]], now: int, summary: TickSummary, enqueuer: _Enqueuer
) -> None:
    """Count each outcome; a claimed row is settled as stale when it is too late, else enqueued."""
    for candidate, row in outcomes:
        if isinstance(row, Exception):
            summary.failed.append({"taskUuid": candidate.uuid, "reason": type(row).__name__, "status": "claim_failed"})
            continue
        if row is None:
            summary.claim_skipped += 1
            continue
        summary.claimed += 1
        # a late task whose batch is in the outbox goes to a run: it may only need its settlement finished
        if is_stale(row, now, ctx.settings.stale_after_ms) and not batch_outboxed(row):
            _settle_stale_in_tick(ctx, row, summary)
            continue
        enqueuer.add(row)


def _wanted(candidate: DueCandidate) -> ClaimWanted:
    return ClaimWanted(candidate.user_id, candidate.uuid, candidate.next_send_at_ms)


def _claim_alone(ctx: AppContext, candidate: DueCandidate, group: str | None, terms: dict[str, Any]) -> TaskRow | None:
    return ctx.claims.claim(
        candidate.user_id, candidate.uuid, expected_next_send_at_ms=candidate.next_send_at_ms, group=group, **terms
    )


def due_in_order(ctx: AppContext, shards: int, now_ms: Callable[[], int]) -> Iterator[DueCandidate]:
    """Every shard's due candidates merged by due-index key (earliest eligible first), one page per shard at
    a time: a k-way merge, so a shard is read further only when its next candidate is the earliest."""
    heap: list[tuple[str, int, int, DueCandidate]] = []
    pages: dict[int, tuple[list[DueCandidate], Any]] = {}
    counter = itertools.count()

    def refill(shard: int, start: Any) -> None:
        candidates, after = ctx.claims.due_candidates(shard, now_ms(), TICK_PAGE, start)
        pages[shard] = (candidates[1:], after)
        if candidates:
            heapq.heappush(heap, (candidates[0].due_key, next(counter), shard, candidates[0]))

    for shard in range(shards):
        refill(shard, None)
    while heap:
        _, _, shard, candidate = heapq.heappop(heap)
        yield candidate
        rest, after = pages[shard]
        if rest:
            pages[shard] = (rest[1:], after)
            heapq.heappush(heap, (rest[0].due_key, next(counter), shard, rest[0]))
        elif after:
            refill(shard, after)


class _Skip(enum.Enum):
    SKIP = "skip"


SKIP = _Skip.SKIP
"""What :func:`serialize_group` answers for a task that must wait for a later tick."""


def serialize_group(
    ctx: AppContext, hooks: Hooks, user_id: str, task_uuid: str, released: set[tuple[str, str]] | None
) -> str | _Skip | None:
    """The stored group of a task per the host's ``serialize_by`` (an HMAC of the key under the user key, so
    group names never appear in clear), None when it takes part in no group, or SKIP when it must wait (its
    group already released a task this tick, or the hook failed). Blocked tasks are not touched."""
    if hooks.serialize_by is None:
        return None
    row = ctx.tasks.get_task(user_id, task_uuid)
    if row is None or row.status != "pending":
        return None  # the claim will fail by itself
    codec = ctx.codec(user_id)
    try:
        payload = codec.decrypt_payload(row.encrypted_payload)
    except StoredPayloadUnreadable:
        return None  # delivery records the decrypt failure
    view = row_view(payload, row)
    try:
        key = hooks.serialize_by(view)
    except Exception as exc:
        logger.warning("serialize_by failed; the task waits for a later tick", extra={"error": type(exc).__name__})
        return SKIP
    if not isinstance(key, str) or not key:
        return None
    if released is not None:
        if (user_id, key) in released:
            return SKIP
        released.add((user_id, key))
    return codec.group_value(key)


def _settle_stale_in_tick(ctx: AppContext, row: TaskRow, summary: TickSummary) -> None:
    codec = ctx.codec(row.user_id)
    try:
        payload = codec.decrypt_payload(row.encrypted_payload)
    except StoredPayloadUnreadable:
        payload = {}
    delivery = DeliverySummary()
    settle_stale(ctx, row, payload, codec, delivery)
    summary.stale.extend(delivery.stale)
    summary.failed.extend(delivery.failed)


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
