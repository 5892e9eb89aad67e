"""run_task, the SQS consumer (see docs/delivery.md): :func:`run_message` adopts the tick's claim (or does
nothing when it is no longer current) and delivers under a heartbeat-renewed lease; :func:`run_together` runs
the records of one batch at the same time."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from amsg.context import AppContext
from amsg.engine.delivery import deliver_claimed
from amsg.engine.env import DeliveryEnv, delivery_env, sandbox_pool
from amsg.engine.lease import LeaseKeeper
from amsg.engine.messages import TaskMessage
from amsg.engine.outcomes import release_claim
from amsg.engine.summary import DeliverySummary, RunResult
from amsg.observability import logger
from amsg.ports import TaskRow
from amsg.ports.tenants import TenantRecord
from amsg.tenancy.scope import scoped_context

_MEMO_LOCK = threading.Lock()
RECORD_WORKERS = 10  # records of one batch delivered at the same time (SQS hands at most 10 without a window)


# a record that starts with less time than this hands its claim back instead of starting a delivery it
# could not finish (the next tick re-claims it at once; no retry is consumed)
MIN_RUN_BUDGET_MS = 30_000


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
    pool = pool or sandbox_pool("record", RECORD_WORKERS)
    session = ctx.coalescer.session(min(len(groups), RECORD_WORKERS))

    def take_part(indexes: list[int]) -> None:
        with session.participant():
            run_group(indexes)

    list(pool.map(take_part, groups.values()))
    return results


def run_message(
    ctx: AppContext,
    message: TaskMessage | None,
    *,
    remaining_ms: Callable[[], int],
    owner: str,
    tenant_keys: dict[str, str | None] | None = None,
) -> RunResult:
    """Adopt the tick's claim and deliver. A message whose claim is no longer current does nothing.
    On the multi-tenant line the tenant's record is read in the run's own batch read (docs/tenancy-data.md);
    ``tenant_keys`` is shared by the records of one SQS batch for the registry reads that remain (a registry
    outside the table, a claim no longer current): once per tenant and batch, not once per record."""
    if message is None:
        return {"skipped": "malformed_message"}
    refused = _refused_line(ctx, message)
    if refused is not None:
        return {"skipped": refused, "taskUuid": message.uuid}
    if message.tenant_id is None:
        return _run_in_scope(ctx, message, remaining_ms=remaining_ms, owner=owner)
    admit = _Admission(ctx, message.tenant_id, tenant_keys)
    scoped = scoped_context(ctx, message.tenant_id, admit.key)
    active = _tenant_active(ctx, message.tenant_id)
    return _run_in_scope(scoped, message, remaining_ms=remaining_ms, owner=owner, tenant_active=active, admit=admit)


def _tenant_active(ctx: AppContext, tenant_id: str | None) -> Callable[[], bool] | None:
    """Asked at each lease heartbeat: a tenant disabled or being deleted stops its running delivery there."""
    keys = ctx.tenant_keys
    if tenant_id is None or keys is None:
        return None
    return lambda: keys.master_key(tenant_id) is not None


def _refused_line(ctx: AppContext, message: TaskMessage) -> str | None:
    """Why a message is dropped before anything is read: never the wrong key or space, so a message of the
    other line is refused. A multi-tenant message is delivered in its tenant's scope once the tenant's record,
    read with the task, says it is active; an unknown, disabled or deleting tenant delivers nothing: the claim
    is left to expire, the task stays pending in the tenant's space and the tick, which serves active tenants
    only, does not claim it again (docs/tenancy-data.md)."""
    if not ctx.settings.multi_tenant:
        return None if message.tenant_id is None else "tenant_message_on_single_line"
    if message.tenant_id is None:
        return "tenant_missing"
    return "tenant_inactive" if ctx.tenant_keys is None else None


class _Admission:
    """A message's tenant: active or not, decided from the record read along with the task (no request of its
    own), or from the registry when that read could not carry it; the master key once admitted."""

    def __init__(self, ctx: AppContext, tenant_id: str, memo: dict[str, str | None] | None) -> None:
        self.ctx, self.tenant_id, self.memo = ctx, tenant_id, memo
        self.master_key: str | None = None

    def key(self) -> str | None:
        return self.master_key

    def admit(self, record: TenantRecord | None) -> bool:
        keys = self.ctx.tenant_keys
        if keys is None:
            return False
        if record is not None:
            access = keys.access_of(record)
            self.master_key = access.master_key if access else None
        else:
            self.master_key = self._from_registry(keys)
        return self.master_key is not None

    def _from_registry(self, keys: Any) -> str | None:
        """Once per batch when its records share ``memo`` (the first reads, the others wait for that read)."""
        if self.memo is None:
            key: str | None = keys.master_key(self.tenant_id)
            return key
        with _MEMO_LOCK:
            if self.tenant_id not in self.memo:
                self.memo[self.tenant_id] = keys.master_key(self.tenant_id)
            return self.memo[self.tenant_id]


def _run_in_scope(
    ctx: AppContext,
    message: TaskMessage,
    *,
    remaining_ms: Callable[[], int],
    owner: str,
    tenant_active: Callable[[], bool] | None = None,
    admit: _Admission | None = None,
) -> RunResult:
    started = ctx.now_ms()
    env = delivery_env(ctx, remaining_ms=remaining_ms)
    # one read: the task (is the message's claim still current?), the push subscription, the outbox counter
    # (and the tenant's record); the claim is adopted (run lease) by the transaction that appends the batch
    snapshot = ctx.claims.open_run(message.user_id, message.uuid, message.claim_version, message.next_send_at_ms)
    if admit is not None and not admit.admit(snapshot.tenant if snapshot is not None else None):
        return {"skipped": "tenant_inactive", "taskUuid": message.uuid}  # the claim is left to expire
    if snapshot is None:  # delivered, settled, cancelled, rescheduled or taken over since the tick enqueued it
        return {"skipped": "claim_not_current", "taskUuid": message.uuid}
    row = snapshot.row
    if env.push_sender is None:
        release_claim(ctx, row)  # without VAPID, release without consuming a retry
        return {"skipped": "not_configured", "taskUuid": message.uuid}
    if remaining_ms() < MIN_RUN_BUDGET_MS:
        release_claim(ctx, row)  # late in a batch: let the next tick hand it to a fresh invocation
        return {"skipped": "no_time_left", "taskUuid": message.uuid}
    env.prefetched = (snapshot.subscription,)
    env.prefetched_policy = (snapshot.policy,)
    env.outbox_seq = snapshot.outbox_seq
    env.adopt_lease = lambda: ctx.now_ms() + ctx.settings.run_lease_ms
    env.owner = owner
    return deliver_under_lease(ctx, row, env, owner, started, tenant_active=tenant_active)


def deliver_under_lease(
    ctx: AppContext,
    row: TaskRow,
    env: DeliveryEnv,
    owner: str,
    started: int,
    *,
    tenant_active: Callable[[], bool] | None = None,
) -> RunResult:
    """Deliver a task whose run lease we just took (adopted or claimed), renewing it on a heartbeat (which a
    tenant no longer active refuses: the delivery then stops as on a lost lease)."""
    settings = ctx.settings

    def renew() -> bool:
        if tenant_active is not None and not tenant_active():
            return False
        lease_until_ms = ctx.now_ms() + settings.run_lease_ms
        return ctx.claims.renew_lease(row.user_id, row.uuid, row.claim_version, lease_until_ms, owner)

    summary = DeliverySummary(total_tasks=1)
    with LeaseKeeper(renew, settings.heartbeat_ms / 1000) as keeper:
        env.lease_lost = keeper.lost.is_set
        deliver_claimed(ctx, row, summary, env)
    result = summary.as_dict(started_ms=started, now_ms=ctx.now_ms())
    result["taskUuid"] = row.uuid
    logger.info("task delivered", extra={"summary": result})
    return result
