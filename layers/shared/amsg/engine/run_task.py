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
from amsg.engine.summary import DeliverySummary
from amsg.observability import logger
from amsg.ports import TaskRow
from amsg.tenancy.scope import scoped_context
from amsg.timeutil import iso_from_ms

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
) -> dict[str, Any]:
    """Adopt the tick's claim and deliver. A message whose claim is no longer current does nothing.
    ``tenant_keys`` is shared by the records of one SQS batch: each tenant's key (and status) is read once per
    batch, not once per record."""
    if message is None:
        return {"skipped": "malformed_message"}
    scoped, skipped = message_scope(ctx, message, tenant_keys)
    if scoped is None:
        return {"skipped": skipped, "taskUuid": message.uuid}
    active = _tenant_active(ctx, message.tenant_id)
    return _run_in_scope(scoped, message, remaining_ms=remaining_ms, owner=owner, tenant_active=active)


def _tenant_active(ctx: AppContext, tenant_id: str | None) -> Callable[[], bool] | None:
    """Asked at each lease heartbeat: a tenant disabled or being deleted stops its running delivery there."""
    keys = ctx.tenant_keys
    if tenant_id is None or keys is None:
        return None
    return lambda: keys.master_key(tenant_id) is not None


def message_scope(
    ctx: AppContext, message: TaskMessage, memo: dict[str, str | None] | None = None
) -> tuple[AppContext | None, str | None]:
    """The context a message is delivered in: the single line's own, or its tenant's scope with the tenant's
    master key. A tenant that is unknown, disabled or being deleted delivers nothing: the claim is left to
    expire, the task stays pending in the tenant's space and the tick, which serves active tenants only, does
    not claim it again (docs/tenancy-data.md). Never the wrong key or space: a message of the other line is dropped."""
    if not ctx.settings.multi_tenant:
        return (ctx, None) if message.tenant_id is None else (None, "tenant_message_on_single_line")
    if message.tenant_id is None:
        return None, "tenant_missing"
    master_key = _tenant_key(ctx, message.tenant_id, memo)
    if master_key is None:
        return None, "tenant_inactive"
    return scoped_context(ctx, message.tenant_id, master_key), None


def _tenant_key(ctx: AppContext, tenant_id: str, memo: dict[str, str | None] | None) -> str | None:
    """The tenant's master key if it is active; read once per batch when the batch shares ``memo`` (its records
    start together: the first one reads, the others wait for that read instead of repeating it)."""
    keys = ctx.tenant_keys
    if keys is None:
        return None
    if memo is None:
        return keys.master_key(tenant_id)
    with _MEMO_LOCK:
        if tenant_id not in memo:
            memo[tenant_id] = keys.master_key(tenant_id)
        return memo[tenant_id]


def _run_in_scope(
    ctx: AppContext,
    message: TaskMessage,
    *,
    remaining_ms: Callable[[], int],
    owner: str,
    tenant_active: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    started = ctx.now_ms()
    env = delivery_env(ctx, remaining_ms=remaining_ms)
    # one read: the task (is the message's claim still current?), the push subscription, the outbox counter;
    # the claim is adopted (run lease) by the transaction that appends the batch
    snapshot = ctx.claims.open_run(message.user_id, message.uuid, message.claim_version, message.next_send_at)
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
    env.adopt_lease = lambda: iso_from_ms(ctx.now_ms() + ctx.settings.run_lease_ms)
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
) -> dict:
    """Deliver a task whose run lease we just took (adopted or claimed), renewing it on a heartbeat (which a
    tenant no longer active refuses: the delivery then stops as on a lost lease)."""
    settings = ctx.settings

    def renew() -> bool:
        if tenant_active is not None and not tenant_active():
            return False
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
