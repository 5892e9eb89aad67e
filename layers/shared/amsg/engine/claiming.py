"""Claiming due tasks, the mechanics shared by the tick and the claimer (docs/delivery.md): due candidates merged
across shards, serialize groups decided one candidate at a time, conditional claims in batches (one write request
each) on a thread pool, claimed rows enqueued in batches of ten (or settled when stale)."""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypedDict

from amsg.context import AppContext
from amsg.crypto import StoredPayloadUnreadable
from amsg.engine import registry_upkeep
from amsg.engine.env import row_view
from amsg.engine.messages import TaskMessage
from amsg.engine.outcomes import release_claim
from amsg.engine.stale import batch_outboxed, is_stale, settle_stale
from amsg.engine.summary import DeliverySummary, TickSummary
from amsg.hooks import Hooks
from amsg.observability import logger
from amsg.ports import CLAIM_ALONE, ClaimWanted, DueCandidate, DuePageToken, TaskRow
from amsg.tenancy.scope import tenant_of

TICK_PAGE = 100


class Lane:
    """One key space's claiming state within a tick: its context, due candidates, enqueuer and groups."""

    def __init__(
        self,
        ctx: AppContext,
        source: Iterator[DueCandidate],
        enqueuer: Enqueuer,
        hooks: Hooks,
        released: set[tuple[str, str]],
    ) -> None:
        self.ctx = ctx
        self.source = source
        self.enqueuer = enqueuer
        self.hooks = hooks
        self.released = released


class ClaimTerms(TypedDict):
    """What every claim of one step asserts (the keyword arguments of the claim store's claim calls)."""

    now_ms: int
    lease_until_ms: int
    owner: str


def claim_step(
    ctx: AppContext,
    parts: list[tuple[Lane, list[DueCandidate]]],
    pool: ThreadPoolExecutor,
    owner: str,
    summary: TickSummary,
) -> None:
    """Claim one step's candidates (one lane's chunk, or a round's chunks of every tenant: their batched claims
    share batches) and enqueue (or settle) what each lane claimed."""
    now = ctx.now_ms()
    terms: ClaimTerms = {"now_ms": now, "lease_until_ms": now + ctx.settings.tick_claim_lease_ms, "owner": owner}
    outcomes = _claim_chunk(parts, pool, terms, summary)
    for (lane, _), claimed in zip(parts, outcomes, strict=True):
        _take_claimed(lane.ctx, claimed, now, summary, lane.enqueuer)
        lane.enqueuer.flush()


class Enqueuer:
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
    parts: list[tuple[Lane, list[DueCandidate]]],
    pool: ThreadPoolExecutor,
    terms: ClaimTerms,
    summary: TickSummary,
) -> list[list[tuple[DueCandidate, Any]]]:
    """Claim the candidates of one step (batches across the parts, grouped or faulty ones alone);
    per part, each candidate's outcome is its row, None (not claimed) or the exception its claim raised."""
    batched, alone = _sort_candidates(parts, pool, terms, summary)
    size = parts[0][0].ctx.claims.claim_batch  # the parts share one table (one store's batches)
    packs = [batched[i : i + size] for i in range(0, len(batched), size)]
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
    parts: list[tuple[Lane, list[DueCandidate]]],
    pool: ThreadPoolExecutor,
    terms: ClaimTerms,
    summary: TickSummary,
) -> tuple[list[tuple[int, DueCandidate]], list[tuple[int, DueCandidate, Future[TaskRow | None]]]]:
    """(part, candidate) to claim in batches, in order; a grouped claim takes its group's lock in its own
    transaction, submitted at once."""
    batched: list[tuple[int, DueCandidate]] = []
    alone: list[tuple[int, DueCandidate, Future[TaskRow | None]]] = []
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
    parts: list[tuple[Lane, list[DueCandidate]]], pack: list[tuple[int, DueCandidate]], terms: ClaimTerms
) -> list[Any]:
    """One batch of up to the store's ``claim_batch`` claims, of one lane or of several (each in its own key
    space)."""
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
    ctx: AppContext, outcomes: list[tuple[DueCandidate, Any]], now: int, summary: TickSummary, enqueuer: Enqueuer
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
        registry_upkeep.keep_on_claim(ctx, row, now)
        # a late task whose batch is in the outbox goes to a run: it may only need its settlement finished
        if is_stale(row, now, ctx.settings.stale_after_ms) and not batch_outboxed(row):
            _settle_stale_in_tick(ctx, row, summary)
            continue
        enqueuer.add(row)


def _wanted(candidate: DueCandidate) -> ClaimWanted:
    return ClaimWanted(candidate.user_id, candidate.uuid, candidate.next_send_at_ms)


def _claim_alone(ctx: AppContext, candidate: DueCandidate, group: str | None, terms: ClaimTerms) -> TaskRow | None:
    return ctx.claims.claim(
        candidate.user_id, candidate.uuid, expected_next_send_at_ms=candidate.next_send_at_ms, group=group, **terms
    )


def due_in_order(ctx: AppContext, shards: int, now_ms: Callable[[], int]) -> Iterator[DueCandidate]:
    """Every shard's due candidates merged by due-index key (earliest eligible first), one page per shard at
    a time: a k-way merge, so a shard is read further only when its next candidate is the earliest."""
    heap: list[tuple[str, int, int, DueCandidate]] = []
    pages: dict[int, tuple[list[DueCandidate], DuePageToken | None]] = {}
    counter = itertools.count()

    def refill(shard: int, start: DuePageToken | None) -> None:
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
        elif after is not None:
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
