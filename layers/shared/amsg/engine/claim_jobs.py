"""Claim fan-out (docs/decisions.md, "claims fan out to claimers"): the tick no longer claims a spike itself. It
sends one claim job per key space and due shard that has due work to the claim queue, and the claimer function
(SQS-triggered, many at once) works through each job's due index page by page: it claims one page (fenced by the
same conditional writes as the tick's claims), enqueues the claimed tasks to the task queue, and sends the job's
continuation (the next page) back to the claim queue. So due work is claimed by as many claimers as there are
jobs in flight, never capped by what one invocation can do in its minute.

A chain of pages ends at the end of the due window, when its page was mostly claimed by someone else (another
chain over an overlapping window: fenced, so nothing is claimed twice, and only one of the two goes on), or when
the task queue holds more than ``claim_backlog_limit`` messages (claimed work waiting longer than the claim lease
would be claimed again: the next tick starts a new chain once run_task caught up)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeGuard

from amsg import jsonio
from amsg.context import AppContext
from amsg.engine.claiming import Enqueuer, Lane, claim_step
from amsg.engine.env import sandbox_pool
from amsg.engine.summary import TickSummary
from amsg.hooks import load_hooks
from amsg.jsonio import JsonObject
from amsg.observability import logger
from amsg.ports import DuePageToken
from amsg.tenancy.ids import valid_tenant_id
from amsg.tenancy.scope import scoped_context, tenant_of

JOB_TIME_MARGIN_MS = 5_000  # stop claiming while there is time left to enqueue, continue the chain and log
MAX_START_CHARS = 4_096  # a due-index page token: the index and table keys of one item


@dataclass(frozen=True)
class ClaimJob:
    """One page of one key space's due shard to claim: ``start`` is the due index's page token (None: from the
    earliest due), ``tenant_id`` the tenant whose key space it is (None on the single line)."""

    shard: int
    tenant_id: str | None = None
    start: DuePageToken | None = None

    def to_body(self) -> JsonObject:
        body: JsonObject = {"kind": "claim", "shard": self.shard}
        if self.tenant_id is not None:
            body["tenantId"] = self.tenant_id
        if self.start is not None:
            body["start"] = self.start.wire
        return body


def parse_claim_job(body: str | bytes | None) -> ClaimJob | None:
    """The job, or None for a malformed body (dropped: the next tick fans out the shard again)."""
    try:
        data = jsonio.loads(body) if body else None
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("kind") == "claim":
        shard, tenant, start = data.get("shard"), data.get("tenantId"), data.get("start")
        shard = shard if isinstance(shard, int) and not isinstance(shard, bool) and 0 <= shard < 1_000 else None
        if shard is not None and (tenant is None or valid_tenant_id(tenant)) and _start_ok(start):
            return ClaimJob(shard, tenant, None if start is None else DuePageToken(start))
    logger.warning("malformed claim job dropped")
    return None


def _start_ok(start: object) -> TypeGuard[str | dict[str, str] | None]:
    """A page token's JSON form as a claim job carries it: a text, or an object of texts, of bounded size."""
    if start is None:
        return True
    texts = isinstance(start, str) or (
        isinstance(start, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in start.items())
    )
    return texts and len(jsonio.dumps(start)) <= MAX_START_CHARS


def fan_out(ctx: AppContext, lanes: list[AppContext], summary: TickSummary) -> None:
    """The tick's part: one claim job per lane (key space) and shard whose due index has a due task now (one
    read of one item each), in the lanes' order. A job that could not be sent is counted; its shard is fanned out
    again by the next tick."""
    queue = ctx.delivery.claim_queue
    assert queue is not None
    now = ctx.now_ms()
    jobs = []
    for lane in lanes:
        for shard in range(max(1, ctx.settings.due_shards)):
            due, _ = lane.claims.due_candidates(shard, now, 1)
            if due:
                jobs.append(ClaimJob(shard, tenant_of(lane)).to_body())
    failed = queue.send_many(jobs) if jobs else []
    summary.claim_jobs = len(jobs) - len(failed)
    summary.claim_jobs_failed = len(failed)


def run_claim_job(
    ctx: AppContext, job: ClaimJob, *, remaining_ms: Callable[[], int], owner: str, summary: TickSummary
) -> None:
    """The claimer's part: claim one page of the job's due shard, enqueue it, and continue the chain."""
    if ctx.delivery.push_sender is None:
        summary.stopped_by = "vapid"  # claim nothing without VAPID: no push could be sent
        return
    lane = _lane_of(ctx, job)
    if lane is None:
        summary.stopped_by = "tenant_inactive"
        return
    limit = ctx.settings.claim_backlog_limit
    backlog = ctx.delivery.queue.backlog() if limit > 0 and ctx.delivery.queue is not None else None
    if backlog is not None and backlog > limit:
        summary.stopped_by = "backlog"  # the next tick starts the chain again
        return
    page, skipped_before = max(1, ctx.settings.claim_page_size), summary.claim_skipped
    candidates, after = lane.claims.due_candidates(job.shard, ctx.now_ms(), page, job.start)
    source = iter(candidates)
    enqueuer = Enqueuer(lane, summary)
    lanes = [Lane(lane, source, enqueuer, load_hooks(ctx.settings.hooks_module), set())]
    workers = max(1, ctx.settings.tick_claim_workers)
    pool = sandbox_pool("claim", workers)
    while True:
        if remaining_ms() < JOB_TIME_MARGIN_MS:
            summary.stopped_by = "time"
            after = job.start  # the rest of this page (what was claimed left the index) in the next job
            break
        chunk = list(itertools.islice(source, workers * lane.claims.claim_batch))
        if not chunk:
            break
        claim_step(lane, [(lanes[0], chunk)], pool, owner, summary)
    enqueuer.flush()
    contended = (summary.claim_skipped - skipped_before) * 2 > len(candidates)  # this job's page, not the batch's
    if after is not None and not contended:
        _continue(ctx, ClaimJob(job.shard, job.tenant_id, after), summary)
    elif contended:
        summary.stopped_by = "contended"


def _lane_of(ctx: AppContext, job: ClaimJob) -> AppContext | None:
    """The job's key space: the deployment's on the single line, an active tenant's on the multi-tenant line (the
    tick serves active tenants only; a tenant disabled since is not claimed for). Never the other line's."""
    if not ctx.settings.multi_tenant:
        return ctx if job.tenant_id is None else None
    keys, tenant = ctx.tenant_keys, job.tenant_id
    if keys is None or tenant is None:
        return None
    key = keys.master_key(tenant)
    if key is None:
        return None
    return scoped_context(ctx, tenant, lambda: key)


def _continue(ctx: AppContext, job: ClaimJob, summary: TickSummary) -> None:
    """Send the chain's next page; if that fails the chain ends here and the next tick starts it again."""
    queue = ctx.delivery.claim_queue
    failed = queue.send_many([job.to_body()]) if queue is not None else [0]
    summary.claim_jobs = (summary.claim_jobs or 0) + 1 - len(failed)
    summary.claim_jobs_failed += len(failed)
