"""Entry points of the delivery engine (see docs/architecture.md and docs/delivery.md):

* :func:`run_tick` — claim due tasks (conditional writes), settle stale ones, enqueue the rest, housekeeping,
  then resume due cloud-data cleanup operations.
* :func:`run_message` — what ``run_task`` does with one SQS message: adopt the tick's claim (or do nothing
  when it is no longer current), then deliver under a heartbeat-renewed lease.
* :func:`run_task_now` — ``runTask(uuid)``: run one task now through the same chain, claiming for itself.

Instant messages (delivered inside ``POST /schedule-message``) are :mod:`amsg.engine.instant`.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import uuid as uuid_lib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from amsg.context import AppContext
from amsg.crypto import StoredPayloadUnreadable, decrypt_payload, serialize_group_value
from amsg.engine import cleanup
from amsg.engine.delivery import DeliveryEnv, deliver_claimed, is_stale, settle_stale
from amsg.engine.lease import LeaseKeeper
from amsg.engine.messages import TaskMessage
from amsg.engine.summary import DeliverySummary, TickSummary
from amsg.hooks import Hooks, load_hooks, task_view
from amsg.observability import logger
from amsg.ports import CLAIM_ALONE, CLAIM_BATCH, ClaimWanted, DueCandidate, LlmReply, LlmRequest, Settlement, TaskRow
from amsg.timeutil import iso_from_ms, parse_iso_ms

TICK_PAGE = 100
# a record that starts with less time than this hands its claim back instead of starting a delivery it
# could not finish (the next tick re-claims it at once; no retry is consumed)
MIN_RUN_BUDGET_MS = 30_000
TICK_TIME_MARGIN_MS = 8_000  # stop claiming while there is time left to enqueue and log
RETENTION_MS = 7 * 86_400_000
HOUSEKEEPING_LIMIT = 100


def delivery_env(ctx: AppContext, *, remaining_ms: Callable[[], int] | None = None) -> DeliveryEnv:
    """Collaborators for a delivery: push sender (None without VAPID), LLM client, pacing, LLM budget."""

    cap_s = ctx.settings.llm_timeout_ms / 1000

    def llm_timeout_s() -> float:
        """The LLM call never outlives the invocation: remaining time minus a margin to write the outcome."""
        if remaining_ms is None:
            return cap_s
        return max(1.0, min(cap_s, (remaining_ms() - 10_000) / 1000))

    return DeliveryEnv(
        push_sender=ctx.delivery.push_sender,
        llm=_LlmOnFirstUse(ctx),
        sleep=ctx.delivery.sleep,
        llm_timeout_s=llm_timeout_s,
        pacing_ms=ctx.settings.push_pacing_ms,
    )


class _LlmOnFirstUse:
    """The context's LLM client, built when a delivery first needs one: a batch of fixed messages never pays
    for the HTTP client (its TLS context alone costs milliseconds of a cold start)."""

    def __init__(self, ctx: AppContext) -> None:
        self._ctx = ctx

    def complete(self, request: LlmRequest, *, timeout_s: float) -> LlmReply:
        return self._ctx.delivery.llm.complete(request, timeout_s=timeout_s)


# ---- tick ---------------------------------------------------------------------------------------------------


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
    if ctx.delivery.push_sender is None:
        summary.stopped_by = "vapid"  # claim nothing without VAPID: no push could be sent
    else:
        _claim_and_enqueue(ctx, summary, remaining_ms, owner)
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


def _claim_and_enqueue(ctx: AppContext, summary: TickSummary, remaining_ms: Callable[[], int], owner: str) -> None:
    """Claim due tasks in due order across every shard, up to ``tick_claim_workers`` claims in flight, and
    enqueue them in batches of ten; stop when the time margin or the claim limit is reached.

    Candidates are merged from all shards by their due-index key (eligible time), and serialize groups are
    decided one candidate at a time in that order, so "earlier due first" holds within a group across shards;
    only the independent conditional claims run in parallel."""
    settings = ctx.settings
    queue = ctx.delivery.queue
    pending: list[TaskRow] = []
    tick_correlation = logger.get_correlation_id()  # for tasks created before correlation ids were stored

    def flush() -> None:
        if not pending:
            return
        messages = [
            TaskMessage(
                row.user_id, row.uuid, row.claim_version, row.next_send_at, row.correlation_id or tick_correlation
            ).to_body()
            for row in pending
        ]
        failed = set(queue.send_many(messages)) if queue is not None else set(range(len(messages)))
        for index, row in enumerate(pending):
            if index in failed:
                summary.enqueue_failed += 1
                _release(ctx, row)  # due again at once instead of after the lease
            else:
                summary.enqueued += 1
        pending.clear()

    hooks = load_hooks(settings.hooks_module)
    released: set[tuple[str, str]] = set()  # (user, group key) released this tick: one per group per tick
    workers = max(1, settings.tick_claim_workers)
    source = due_in_order(ctx, max(1, settings.due_shards), lambda: iso_from_ms(ctx.now_ms()))
    pool = _sandbox_pool("claim", workers)  # one pool per sandbox: its threads keep their DynamoDB clients
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
        now = ctx.now_ms()
        terms = {
            "now_iso": iso_from_ms(now),
            "lease_until": iso_from_ms(now + settings.tick_claim_lease_ms),
            "owner": owner,
        }
        batched: list[DueCandidate] = []
        alone: list[tuple[DueCandidate, Future]] = []
        for candidate in chunk:
            summary.due += 1
            group = serialize_group(ctx, hooks, candidate.user_id, candidate.uuid, released)
            if group is SKIP:
                summary.serialize_skipped += 1
            elif group is None:
                batched.append(candidate)
            else:  # a grouped claim takes the group's lock in its own transaction
                alone.append((candidate, pool.submit(_claim_alone, ctx, candidate, group, terms)))
        batches = [
            (part, pool.submit(ctx.claims.claim_many, [_wanted(c) for c in part], **terms))
            for part in (batched[i : i + CLAIM_BATCH] for i in range(0, len(batched), CLAIM_BATCH))
        ]
        outcomes: list[tuple[DueCandidate, Any]] = []
        for part, job in batches:
            try:
                rows = job.result()
            except Exception as exc:  # the read back failed: these come back when their lease expires
                outcomes += [(candidate, exc) for candidate in part]
                continue
            for candidate, row in zip(part, rows, strict=True):
                if row is CLAIM_ALONE:  # the batch could not run: one faulty task must not hold back the rest
                    alone.append((candidate, pool.submit(_claim_alone, ctx, candidate, None, terms)))
                else:
                    outcomes.append((candidate, row))
        for candidate, job in alone:
            try:
                outcomes.append((candidate, job.result()))
            except Exception as exc:  # throttled past the SDK's retries: the task stays due for the next tick
                outcomes.append((candidate, exc))
        for candidate, row in outcomes:
            if isinstance(row, Exception):
                summary.failed.append(
                    {"taskUuid": candidate.uuid, "reason": type(row).__name__, "status": "claim_failed"}
                )
                continue
            if row is None:
                summary.claim_skipped += 1
                continue
            summary.claimed += 1
            if is_stale(row, now, settings.stale_after_ms):
                _settle_stale_in_tick(ctx, row, summary)
                continue
            pending.append(row)
            if len(pending) >= 10:
                flush()
        flush()
    flush()


def _wanted(candidate: DueCandidate) -> ClaimWanted:
    return ClaimWanted(candidate.user_id, candidate.uuid, candidate.next_send_at)


def _claim_alone(ctx: AppContext, candidate: DueCandidate, group: str | None, terms: dict[str, str]) -> TaskRow | None:
    return ctx.claims.claim(
        candidate.user_id, candidate.uuid, expected_next_send_at=candidate.next_send_at, group=group, **terms
    )


_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _sandbox_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """Worker threads of this sandbox (tick claims, a batch's records), built on first use (never at import)
    and reused by later invocations."""
    with _pools_lock:
        pool = _pools.get((name, workers))
        if pool is None:
            pool = _pools[(name, workers)] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        return pool


def due_in_order(ctx: AppContext, shards: int, now_iso: Callable[[], str]) -> Iterator[DueCandidate]:
    """Every shard's due candidates merged by due-index key (earliest eligible first), one page per shard at
    a time: a k-way merge, so a shard is read further only when its next candidate is the earliest."""
    heap: list[tuple[str, int, int, DueCandidate]] = []
    pages: dict[int, tuple[list[DueCandidate], Any]] = {}
    counter = itertools.count()

    def refill(shard: int, start: Any) -> None:
        candidates, after = ctx.claims.due_candidates(shard, now_iso(), TICK_PAGE, start)
        pages[shard] = (candidates[1:], after)
        if candidates:
            heapq.heappush(heap, (candidates[0].due_key, next(counter), shard, candidates[0]))  # type: ignore[misc]

    for shard in range(shards):
        refill(shard, None)
    while heap:
        _, _, shard, candidate = heapq.heappop(heap)  # type: ignore[misc]
        yield candidate
        rest, after = pages[shard]
        if rest:
            pages[shard] = (rest[1:], after)
            heapq.heappush(heap, (rest[0].due_key, next(counter), shard, rest[0]))  # type: ignore[misc]
        elif after:
            refill(shard, after)


SKIP = object()


def serialize_group(
    ctx: AppContext, hooks: Hooks, user_id: str, task_uuid: str, released: set[tuple[str, str]] | None
) -> object:
    """The stored group of a task per the host's ``serialize_by`` (an HMAC of the key under the user key, so
    group names never appear in clear), None when it takes part in no group, or SKIP when it must wait (its
    group already released a task this tick, or the hook failed). Blocked tasks are not touched."""
    if hooks.serialize_by is None:
        return None
    row = ctx.tasks.get_task(user_id, task_uuid)
    if row is None or row.status != "pending":
        return None  # the claim will fail by itself
    user_key = ctx.user_key(user_id)
    try:
        payload = decrypt_payload(row.encrypted_payload, user_key)
    except StoredPayloadUnreadable:
        return None  # delivery records the decrypt failure
    view = task_view(payload, task_id=row.id, uuid=row.uuid, next_send_at=row.next_send_at, retry_count=row.retry_count)
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
    return serialize_group_value(user_key, key)


def _settle_stale_in_tick(ctx: AppContext, row: TaskRow, summary: TickSummary) -> None:
    user_key = ctx.user_key(row.user_id)
    try:
        payload = decrypt_payload(row.encrypted_payload, user_key)
    except StoredPayloadUnreadable:
        payload = {}
    delivery = DeliverySummary()
    settle_stale(ctx, row, payload, user_key, delivery)
    summary.stale.extend(delivery.stale)
    summary.failed.extend(delivery.failed)


def _release(ctx: AppContext, row: TaskRow) -> None:
    try:
        ctx.claims.settle(
            row.user_id,
            row.uuid,
            row.claim_version,
            Settlement(next_send_at=row.next_send_at, retry_after=row.retry_after),
            iso_from_ms(ctx.now_ms()),
        )
    except Exception as exc:  # the lease expires by itself
        logger.warning("releasing a claim failed", extra={"error": type(exc).__name__})


def _housekeeping(ctx: AppContext, summary: TickSummary) -> None:
    """Best-effort and isolated: housekeeping never aborts the tick or loses its summary."""
    now = ctx.now_ms()
    cutoff = iso_from_ms(now - RETENTION_MS)
    try:
        summary.housekeeping["deletedSettledTasks"] = ctx.claims.delete_settled_before(
            cutoff, shards=max(1, ctx.settings.due_shards), limit=HOUSEKEEPING_LIMIT
        )
    except Exception as exc:
        summary.housekeeping["settledTasksError"] = type(exc).__name__
    ttl = ctx.settings.client_state_ttl_days
    cleanup = getattr(ctx.client_state, "cleanup_expired", None)
    if ttl and cleanup is not None:
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


# ---- run_task (SQS consumer) ---------------------------------------------------------------------------------

RECORD_WORKERS = 10  # records of one batch delivered at the same time (SQS hands at most 10 without a window)


def run_together[T](
    ctx: AppContext,
    jobs: Sequence[Callable[[], T]],
    *,
    keys: Sequence[str | None] | None = None,
    pool: ThreadPoolExecutor | None = None,
) -> list[T]:
    """Run the records of one SQS batch at the same time, each on a worker thread, inside one coalescing
    session so that their storage calls share round trips (docs/delivery.md). Each record is delivered exactly
    as it would be alone: claims, fencing and send-claims are per task, and two deliveries of one task (a
    duplicate SQS message) exclude each other (a claim is adopted once). A job must not raise (the batch
    processor catches per record).

    Records with the same key (the user: they share the user's outbox counter, caps and push order) run one
    after the other in batch order, as they were enqueued (earlier due first), on one worker. A batch with a
    single key, or a store without coalescing, runs in this thread. ``pool`` is the sandbox's record workers
    (its threads keep their DynamoDB clients across invocations); at most :data:`RECORD_WORKERS` at once."""
    groups: dict[object, list[int]] = {}
    for index in range(len(jobs)):
        key = keys[index] if keys is not None and keys[index] is not None else ("record", index)
        groups.setdefault(key, []).append(index)
    results: list[Any] = [None] * len(jobs)

    def run_group(indexes: list[int]) -> None:
        for index in indexes:
            results[index] = jobs[index]()

    if len(groups) <= 1 or ctx.coalescer is None:
        run_group(list(range(len(jobs))))
        return results
    pool = pool or _sandbox_pool("record", RECORD_WORKERS)
    session = ctx.coalescer.session(min(len(groups), RECORD_WORKERS))

    def take_part(indexes: list[int]) -> None:
        with session.participant():
            run_group(indexes)

    list(pool.map(take_part, groups.values()))
    return results


def run_message(
    ctx: AppContext, message: TaskMessage | None, *, remaining_ms: Callable[[], int], owner: str
) -> dict[str, Any]:
    """Adopt the tick's claim and deliver. A message whose claim is no longer current does nothing."""
    if message is None:
        return {"skipped": "malformed_message"}
    started = ctx.now_ms()
    env = delivery_env(ctx, remaining_ms=remaining_ms)
    # one read: the task (is the message's claim still current?), the push subscription, the outbox counter;
    # the claim is adopted (run lease) by the transaction that appends the batch
    snapshot = ctx.claims.open_run(message.user_id, message.uuid, message.claim_version, message.next_send_at)
    if snapshot is None:  # delivered, settled, cancelled, rescheduled or taken over since the tick enqueued it
        return {"skipped": "claim_not_current", "taskUuid": message.uuid}
    row = snapshot.row
    if env.push_sender is None:
        _release(ctx, row)  # without VAPID, release without consuming a retry
        return {"skipped": "not_configured", "taskUuid": message.uuid}
    if remaining_ms() < MIN_RUN_BUDGET_MS:
        _release(ctx, row)  # late in a batch: let the next tick hand it to a fresh invocation
        return {"skipped": "no_time_left", "taskUuid": message.uuid}
    env.prefetched = (snapshot.subscription,)
    env.prefetched_policy = (snapshot.policy,)
    env.outbox_seq = snapshot.outbox_seq
    env.adopt_lease = lambda: iso_from_ms(ctx.now_ms() + ctx.settings.run_lease_ms)
    env.owner = owner
    return _deliver_under_lease(ctx, row, env, owner, started)


def _deliver_under_lease(ctx: AppContext, row: TaskRow, env: DeliveryEnv, owner: str, started: int) -> dict:
    """Deliver a task whose run lease we just took (adopted or claimed), renewing it on a heartbeat."""
    settings = ctx.settings

    def renew() -> bool:
        lease = iso_from_ms(ctx.now_ms() + settings.run_lease_ms)
        return ctx.claims.renew_lease(row.user_id, row.uuid, row.claim_version, lease, owner)

    summary = DeliverySummary(total_tasks=1)
    with LeaseKeeper(renew, settings.heartbeat_ms / 1000) as keeper:
        env.lease_lost = keeper.lost.is_set
        deliver_claimed(ctx, row, summary, env)
    result = summary.as_dict(started_ms=started, now_ms=ctx.now_ms())
    result["taskUuid"] = row.uuid
    logger.info("task delivered", extra={"summary": result})
    return result


# ---- runTask(uuid) -------------------------------------------------------------------------------------------


def run_task_now(ctx: AppContext, task_uuid: str, *, owner: str | None = None) -> dict[str, Any]:
    """Run one task now (CLI / in-process) with the reference's reasons when it cannot run."""
    if not isinstance(task_uuid, str) or not task_uuid.strip():
        raise TypeError("runTask requires a non-empty uuid")
    env = delivery_env(ctx)
    if env.push_sender is None:
        return {
            "ran": False,
            "reason": "not_configured",
            "detail": ctx.delivery.push_problem or "push is not configured",
        }
    row = ctx.tasks.find_task(task_uuid.strip())
    if row is None:
        return {"ran": False, "reason": "not_found"}
    if row.status != "pending":
        return {"ran": False, "reason": "already_settled", "status": row.status}
    now = ctx.now_ms()
    occurrence = parse_iso_ms(row.next_send_at)
    if occurrence is not None and occurrence > now:
        return {"ran": False, "reason": "not_due", "nextSendAt": row.next_send_at}
    retry_after = parse_iso_ms(row.retry_after) if row.retry_after else None
    if retry_after is not None and retry_after > now:
        return {"ran": False, "reason": "retry_pending", "retryAfter": row.retry_after}
    owner = owner or f"runTask:{uuid_lib.uuid4()}"
    group = serialize_group(ctx, load_hooks(ctx.settings.hooks_module), row.user_id, row.uuid, None)
    claimed = None
    if group is not SKIP:
        claimed = ctx.claims.claim(
            row.user_id,
            row.uuid,
            expected_next_send_at=row.next_send_at,
            now_iso=iso_from_ms(now),
            lease_until=iso_from_ms(now + ctx.settings.run_lease_ms),
            owner=owner,
            group=group,  # type: ignore[arg-type]
        )
    if claimed is None:
        summary = DeliverySummary(total_tasks=1, claim_skipped=1)
        return {"ran": True, "summary": summary.as_dict(started_ms=now, now_ms=ctx.now_ms())}
    return {"ran": True, "summary": _deliver_under_lease(ctx, claimed, env, owner, now)}
