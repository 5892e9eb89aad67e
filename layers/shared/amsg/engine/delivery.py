"""Deliver one claimed task (see docs/delivery.md): stale guard → content → outbox → fenced pushes →
settle. Every write after the claim is fenced by the claim version; a run that lost its claim sends
nothing more and writes nothing.

Exactly-once pushes: the whole batch of an occurrence is appended to the outbox *before* anything is sent
(deterministic message ids per occurrence), and each push is claimed in the outbox in one transaction with
a check that our task claim is still current. To keep DynamoDB requests per task low, the first push is
claimed in the append transaction itself (which also adopts the claim and records the occurrence on the
task), each later claim carries the previous row's delivered mark, and the last delivered mark rides with
the settlement (see docs/delivery.md). A retry, a redelivered SQS message or a worker that took over
after a crash only sends rows nobody has claimed yet. A worker killed between claiming a row and sending it
leaves that row unpushed but in the outbox, where the client pulls it (``GET /outbox``): nothing is lost,
nothing is pushed twice.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from amsg.context import AppContext
from amsg.crypto import DecryptError, StoredPayloadUnreadable, UserCodec
from amsg.domain.credentials import make_credential_lookup
from amsg.domain.llm import build_llm_request, resolve_chat_credentials
from amsg.domain.splitting import split_message
from amsg.engine.env import Cancelled, DeliveryEnv, Outcome, row_view
from amsg.engine.fire import AgenticFire, generation_limit
from amsg.engine.outcomes import (
    OWNER_RETIRED,
    cancel_retired,
    fail_task,
    finalize_success,
    record_cancelled,
    record_tenant_inactive,
)
from amsg.engine.policy import before_fire
from amsg.engine.pushes import Occurrence, content_pushes, decode_push, reasoning_push, should_push
from amsg.engine.sending import (
    VAPID_MISSING,
    PushUnconfirmed,
    append_batch,
    outbox_rows,
    resolve_subscription,
    send_one,
)
from amsg.engine.stale import batch_outboxed, defer_task, is_stale, settle_stale
from amsg.engine.summary import DeliverySummary
from amsg.errors import CloudGuardError
from amsg.failures import ClaimTaken, DeliveryFailure, PushSendError
from amsg.hooks import Hooks, load_hooks
from amsg.jsonio import JsonObject
from amsg.observability import logger, record_delivery_latency, tenant_dimension
from amsg.ports import APPEND_FALLBACK, CapReached, PushSubscription, TaskRow
from amsg.ports.tenants import TenantInactive
from amsg.task_payload import StoredPayload
from amsg.tenancy.scope import tenant_of


@dataclass
class _Entry:
    push: JsonObject
    done: bool  # delivered, acked or already claimed for sending
    unknown: bool = False  # claimed for sending, never marked delivered: its push may have left (or died unanswered)


def _left_to_push(entries: list[_Entry]) -> list[_Entry]:
    """The rows this run pushes. None once one row's outcome is unknown (unconfirmed, or taken by a run that
    died): what follows waits in the outbox for the client's pull, so an endpoint that may be gone or hanging
    gets nothing more and the client still reads the batch in order (docs/delivery.md)."""
    if any(entry.unknown for entry in entries):
        return []
    return [entry for entry in entries if not entry.done and should_push(entry.push, outboxed=True)]


def deliver_claimed(ctx: AppContext, row: TaskRow, summary: DeliverySummary, env: DeliveryEnv) -> Outcome | None:
    """Run the pipeline for a task whose claim (``row.claim_version``) we hold; record into ``summary``.

    Returns the outcome on success, None otherwise. Raises only for infrastructure errors that happened before
    the outcome was written (the caller then lets SQS redeliver; the fencing keeps that safe).
    """
    codec = ctx.codec(row.user_id)
    payload = _payload_to_fire(ctx, row, codec, summary, env)
    if payload is None:
        return None
    try:
        outcome = process_occurrence(ctx, row, payload, codec, env)
    except Exception as exc:
        _record_failed_run(ctx, row, payload, codec, exc, summary, env)
        return None
    if outcome.deferred_until_ms is not None:
        if _may_write(ctx, row, env, summary):
            defer_task(ctx, row, payload, codec, outcome.deferred_until_ms, summary, policy=outcome.policy_deferred)
        return None
    if outcome.redelivered:
        summary.redelivered.append({"taskId": row.id, "pushedCount": outcome.pushed})
    if outcome.unconfirmed:
        summary.unconfirmed.append({"taskId": row.id, "unconfirmedCount": outcome.unconfirmed})
    if outcome.reasoning_error:
        summary.reasoning_skipped.append({"taskId": row.id, "reason": outcome.reasoning_error})
    if finalize_success(ctx, row, payload, summary, outcome.unmarked, clear_named=_rows_settled(row, outcome)):
        tenant = tenant_dimension(tenant_of(ctx), ctx.settings.metrics_tenants)
        record_delivery_latency(row.next_send_at_ms, row.deferred_until_ms, ctx.now_ms(), outcome.pushed, tenant=tenant)
        return outcome
    return None


def _payload_to_fire(
    ctx: AppContext, row: TaskRow, codec: UserCodec, summary: DeliverySummary, env: DeliveryEnv
) -> StoredPayload | None:
    """The task's payload when this occurrence may fire; None after settling a task that must not (unreadable
    payload, retired owner, too late)."""
    now = ctx.now_ms()
    try:
        payload: StoredPayload = codec.decrypt_payload(row.encrypted_payload)
    except StoredPayloadUnreadable:
        if _may_write(ctx, row, env, summary):
            fail_task(ctx, row, None, codec, DeliveryFailure("任务载荷解密失败"), summary, env)
        return None
    owner = row.owner
    if (
        owner is not None
        and ctx.owners is not None
        and not ctx.owners.guard_holds(row.user_id, owner.ref, owner.generation)
    ):
        if _may_write(ctx, row, env, summary):
            cancel_retired(ctx, row, summary)  # retired since the task was written: it never fires again
        return None
    if is_stale(row, now, ctx.settings.stale_after_ms) and not _handed_over(ctx, row, codec):
        if _may_write(ctx, row, env, summary):
            settle_stale(ctx, row, payload, codec, summary)
        return None
    return payload


def _handed_over(ctx: AppContext, row: TaskRow, codec: UserCodec) -> bool:
    """A late occurrence whose batch is in the outbox with nothing left to push (its settlement failed after
    the pushes): it is settled as delivered, not as stale."""
    if not batch_outboxed(row):
        return False
    occurrence = Occurrence(row.id, row.uuid, row.next_send_at_ms or None)
    entries = _committed_batch(ctx, row, occurrence, codec)
    return entries is not None and not _left_to_push(entries)


def _record_failed_run(
    ctx: AppContext,
    row: TaskRow,
    payload: StoredPayload,
    codec: UserCodec,
    exc: Exception,
    summary: DeliverySummary,
    env: DeliveryEnv,
) -> None:
    """Write what a run that raised means for the task: nothing (another run holds it), cancelled, retired,
    deferred by a full cap, or failed (retry or final)."""
    if isinstance(exc, ClaimTaken):
        _skip_taken(row, summary)
    elif isinstance(exc, TenantInactive):  # nothing more is pushed; the task is the deletion's (or the enable's)
        record_tenant_inactive(row, summary)
    elif isinstance(exc, Cancelled):
        if exc.status == OWNER_RETIRED:
            cancel_retired(ctx, row, summary)
        else:
            record_cancelled(ctx, row, summary, exc.status)
    elif isinstance(exc, CloudGuardError):  # the owner was retired mid-fire: an append or a push claim refused
        cancel_retired(ctx, row, summary)
    elif isinstance(exc, CapReached):  # the first push found a cap full: nothing was pushed, the batch is outboxed
        if _may_write(ctx, row, env, summary):
            defer_task(ctx, row, payload, codec, exc.until_ms, summary, policy=True)
    elif env.lease_lost():
        record_cancelled(ctx, row, summary, "cancelled_mid_delivery")
    else:
        if not isinstance(exc, (DeliveryFailure, PushSendError)):
            logger.warning("delivery step failed", extra={"error": type(exc).__name__})
        if _may_write(ctx, row, env, summary):
            fail_task(ctx, row, payload, codec, exc, summary, env)


def _may_write(ctx: AppContext, row: TaskRow, env: DeliveryEnv, summary: DeliverySummary) -> bool:
    """Whether this run may settle the task. A run that has not adopted its claim yet (it decided to fail,
    defer or expire the task before its outbox append) adopts it first: one more write, only on these paths.
    Another run of the same message that holds the claim decides instead (the happy path adopts in the
    append, so a duplicate can never settle a task under the run that is delivering it)."""
    if env.adopt_lease is None:
        return True
    try:
        _adopt_now(ctx, row, env)
    except ClaimTaken:
        _skip_taken(row, summary)
        return False
    except Cancelled:
        return False  # the claim moved on (settled, cancelled, claimed again): its holder decides
    return True


def _skip_taken(row: TaskRow, summary: DeliverySummary) -> None:
    """Another run of the same SQS message holds the claim: leave everything to it."""
    summary.claim_skipped += 1
    logger.info("claim already adopted by another run", extra={"taskUuid": row.uuid})


def needs_llm(payload: StoredPayload) -> bool:
    """Whether a fire goes through the hooks: prompted/auto always, instant only with chat credentials."""
    message_type = payload.get("messageType")
    if message_type in ("prompted", "auto"):
        return True
    if message_type != "instant":
        return False
    refs = payload.get("credRefs")
    if isinstance(refs, dict) and isinstance(refs.get("chat"), str) and refs["chat"]:
        return True
    return bool(payload.get("apiUrl") and payload.get("apiKey") and payload.get("primaryModel"))


def process_occurrence(
    ctx: AppContext, row: TaskRow, payload: StoredPayload, codec: UserCodec, env: DeliveryEnv
) -> Outcome:
    occurrence = Occurrence(row.id, row.uuid, row.next_send_at_ms or None)
    hooks = load_hooks(ctx.settings.hooks_module)
    agentic = hooks.agentic and needs_llm(payload)
    # the task records the occurrence whose batch is in the outbox, so a first attempt needs no lookup
    known = batch_outboxed(row)
    entries = _committed_batch(ctx, row, occurrence, codec) if known or agentic else None
    if entries is not None and not _left_to_push(entries):
        return _finish_handed_over(ctx, row, entries, env)
    # the user's quiet hours and caps come first, before the host's on_before_fire and any LLM call
    policy = before_fire(
        ctx,
        row,
        payload,
        codec,
        check_caps=not any(entry.done for entry in entries or ()),
        prefetched=env.prefetched_policy,
    )
    if policy.defer_until_ms is not None:
        return Outcome(deferred_until_ms=policy.defer_until_ms, policy_deferred=True)
    if entries is not None:
        # a batch already in the outbox (a redelivery, a fire deferred by a cap): no append will adopt the
        # claim, so take it now, before any push claim or cap charge (a duplicate run stops here)
        _adopt_now(ctx, row, env)
    env.cap_charges = list(policy.charges)  # counted with the first push this run claims (agentic ones too)
    outcome = Outcome(redelivered=entries is not None)
    fresh = _Fresh()
    if entries is None:
        if agentic:
            _adopt_now(ctx, row, env)  # a chain of LLM rounds and tools: hold the run lease from the start

            fired = AgenticFire(ctx, row, payload, codec, env, hooks).run()
            if fired is not None:
                return fired
        pushes = _generate_counted(ctx, row, payload, occurrence, env, hooks)
        fresh = _append_fresh(ctx, row, payload, codec, occurrence, pushes, env)
        entries, outcome.redelivered = fresh.entries, fresh.redelivered
    outcome.messages_sent = sum(1 for entry in entries if entry.push.get("messageKind") == "content")
    outcome.batch_ids = _batch_ids(entries)
    pending = _left_to_push(entries)
    if not pending:
        return outcome
    if env.push_sender is None:
        raise DeliveryFailure(VAPID_MISSING)
    if fresh.subscription_error is not None:
        raise fresh.subscription_error
    subscription = fresh.subscription
    if subscription is None:
        subscription = resolve_subscription(ctx, row, payload, codec, env)
    _push_pending(ctx, row, pending, subscription, env, fresh.claimed_first, outcome)
    return outcome


def _finish_handed_over(ctx: AppContext, row: TaskRow, entries: list[_Entry], env: DeliveryEnv) -> Outcome:
    """The occurrence's batch is in the outbox and nothing of it is left to push (an earlier run pushed it and
    its settlement failed, or a push's outcome is unknown): settle it as delivered, whatever the delivery policy
    or the hooks would say about a new fire."""
    _adopt_now(ctx, row, env)
    return Outcome(
        messages_sent=sum(1 for entry in entries if entry.push.get("messageKind") == "content"),
        redelivered=True,
        unconfirmed=sum(1 for entry in entries if entry.unknown),
        batch_ids=_batch_ids(entries),
    )


def _batch_ids(entries: list[_Entry]) -> tuple[str, ...]:
    return tuple(str(entry.push.get("messageId")) for entry in entries)


def _rows_settled(row: TaskRow, outcome: Outcome) -> bool:
    """Whether every row the task names is delivered once this occurrence settles: they are all this batch's,
    none of its pushes is unconfirmed and this run pushed every one it did not find done (docs/decisions.md,
    45). Then the task stops naming them."""
    if outcome.unconfirmed or outcome.taken_elsewhere:
        return False
    return set(row.outbox_message_ids) <= set(outcome.batch_ids)


@dataclass
class _Fresh:
    """A batch this run generated and appended, and what it found out on the way."""

    entries: list[_Entry] = field(default_factory=list)
    claimed_first: bool = False  # the append claimed the first push for sending
    redelivered: bool = False  # the append found rows of this occurrence from an earlier run
    subscription: PushSubscription | None = None
    subscription_error: Exception | None = None


def _generate_counted(
    ctx: AppContext, row: TaskRow, payload: StoredPayload, occurrence: Occurrence, env: DeliveryEnv, hooks: Hooks
) -> list[JsonObject]:
    """The occurrence's pushes; a failure carries the host's ``max_generation_retries`` limit when it has one."""
    try:
        return _generate(ctx, row, payload, occurrence, env)
    except Exception as exc:
        if hooks.max_generation_retries is not None and not hasattr(exc, "retry_limit"):
            view = row_view(payload, row)
            exc.retry_limit = generation_limit(ctx, hooks, view)  # type: ignore[attr-defined]
        raise


def _append_fresh(
    ctx: AppContext,
    row: TaskRow,
    payload: StoredPayload,
    codec: UserCodec,
    occurrence: Occurrence,
    pushes: list[JsonObject],
    env: DeliveryEnv,
) -> _Fresh:
    fresh = _Fresh()
    first = next((push["messageId"] for push in pushes if should_push(push, outboxed=True)), None)
    if first is not None and env.push_sender is not None:
        try:
            fresh.subscription = resolve_subscription(ctx, row, payload, codec, env)
        except DeliveryFailure as exc:
            fresh.subscription_error = exc  # raised after the append: the batch still reaches the outbox
    # the first push is claimed with the append unless the user's caps must be charged with its claim
    claim = first if fresh.subscription is not None and not env.lease_lost() and not env.cap_charges else None
    fresh.entries, fresh.claimed_first, fresh.redelivered = _append_new_batch(
        ctx, row, occurrence, pushes, codec, env, claim
    )
    return fresh


def _push_pending(
    ctx: AppContext,
    row: TaskRow,
    pending: list[_Entry],
    subscription: PushSubscription,
    env: DeliveryEnv,
    claimed_first: bool,
    outcome: Outcome,
) -> None:
    """Claim and send each pending push in order, paced; the last pushed row's delivered mark is left in
    ``outcome.unmarked`` for the settlement to carry."""
    previous: str | None = None
    unmarked: str | None = None
    try:
        for index, entry in enumerate(pending):
            if env.lease_lost():
                raise Cancelled("cancelled_mid_delivery")
            if index:
                env.sleep(env.pacing_ms / 1000)
            previous, unmarked = unmarked, None
            preclaimed = index == 0 and claimed_first
            # the run's cap charges go with its first push claim (CapReached: nothing pushed, the fire waits)
            try:
                sent = send_one(
                    ctx,
                    row,
                    entry.push,
                    subscription,
                    env,
                    preclaimed=preclaimed,
                    previous=previous,
                    mark=False,
                    pushes_after=len(pending) - index - 1,
                )
            except PushUnconfirmed:  # the claim marked ``previous``; this row and the rest wait for the pull
                outcome.unconfirmed += 1
                previous = None
                break
            if sent:
                outcome.pushed += 1
                unmarked = entry.push["messageId"]
            else:
                outcome.taken_elsewhere += 1
            previous = None
    except Exception:
        leftover = [message_id for message_id in (previous, unmarked) if message_id]
        if leftover:  # pushed rows say so before anything else happens to the batch
            with contextlib.suppress(Exception):
                ctx.outbox.mark_delivered(row.user_id, leftover, ctx.now_ms())
        raise
    outcome.unmarked = [unmarked] if unmarked else []


def _adopt_now(ctx: AppContext, row: TaskRow, env: DeliveryEnv) -> None:
    """Adopt the tick's claim with the run lease now (instead of in the append transaction)."""
    if env.adopt_lease is None:
        return
    adopted = ctx.claims.adopt_claim(
        row.user_id, row.uuid, row.claim_version, row.next_send_at_ms, env.adopt_lease(), env.owner, ctx.now_ms()
    )
    if adopted is None:
        raise Cancelled("cancelled_mid_delivery")
    row.lease_until_ms = adopted.lease_until_ms
    env.adopt_lease = None


def _append_new_batch(
    ctx: AppContext,
    row: TaskRow,
    occurrence: Occurrence,
    pushes: list[JsonObject],
    codec: UserCodec,
    env: DeliveryEnv,
    claim: str | None,
) -> tuple[list[_Entry], bool, bool]:
    """Append a freshly generated batch: (entries, whether ``claim`` was claimed for sending, redelivered).

    One transaction appends the rows, adopts the claim and records the occurrence; when that does not apply
    (a batch too large for one transaction, or rows of this occurrence already there from an earlier
    version) the batch found in the outbox is used, else the outbox's general append."""
    rows = outbox_rows(ctx, row, pushes, codec, named=True)
    result = ctx.claims.append_batch(
        row,
        rows,
        now_ms=ctx.now_ms(),
        lease_until_ms=env.adopt_lease() if env.adopt_lease is not None else None,
        owner=env.owner,
        claim_first=claim,
        outbox_seq=env.outbox_seq,
    )
    if result is None:
        raise Cancelled("cancelled_mid_delivery")
    fresh = [_Entry(push, done=False) for push in pushes]
    if result is not APPEND_FALLBACK:
        env.adopt_lease = None  # the append adopted the claim: this run holds it now
        return fresh, claim is not None, False
    _adopt_now(ctx, row, env)  # rows from an earlier run: adopt on our own before working them
    committed = _committed_batch(ctx, row, occurrence, codec)
    if committed is not None:
        return committed, False, True
    append_batch(ctx, row, pushes, codec)
    return fresh, False, False


def _generate(
    ctx: AppContext, row: TaskRow, payload: StoredPayload, occurrence: Occurrence, env: DeliveryEnv
) -> list[JsonObject]:
    message_type = payload.get("messageType") or row.message_type
    reasoning: str | None = None
    if message_type == "fixed":
        content = payload.get("userMessage")
        if not isinstance(content, str) or not content:
            raise DeliveryFailure("Invalid message configuration: no content source available")
    elif message_type in ("prompted", "auto", "instant"):
        lookup = make_credential_lookup(ctx.credentials, row.user_id, ctx.codec(row.user_id))
        credentials = resolve_chat_credentials(payload, lookup)
        has_prompt = bool(payload.get("completePrompt")) or (
            isinstance(payload.get("messages"), list) and bool(payload["messages"])
        )
        if credentials is not None and has_prompt:
            if env.llm is None:
                raise DeliveryFailure("LLM client is not configured")
            reply = env.llm.complete(build_llm_request(payload, credentials), timeout_s=env.llm_timeout_s())
            content, reasoning = reply.content, reply.reasoning
        elif message_type == "instant" and payload.get("userMessage"):
            content = str(payload["userMessage"])
        elif message_type == "instant":
            raise DeliveryFailure("Invalid instant message: no content source available")
        else:
            raise DeliveryFailure("Invalid message configuration: no content source available")
    else:
        raise DeliveryFailure("Invalid message configuration: no content source available")
    now = ctx.now_ms()
    segments = split_message(content, payload.get("splitPattern"))
    pushes = [reasoning_push(payload, occurrence, reasoning, now)] if reasoning else []
    return pushes + content_pushes(payload, occurrence, segments, now)


def _committed_batch(ctx: AppContext, row: TaskRow, occurrence: Occurrence, codec: UserCodec) -> list[_Entry] | None:
    """This occurrence's batch if it is already in the outbox (a redelivery): then only unsent rows go out."""
    if occurrence.occurrence_ms is None:
        return None
    try:
        stored = ctx.outbox.list_for_task(row.user_id, row.uuid, named=row.outbox_message_ids)
    except Exception as exc:
        logger.warning("committed-batch lookup failed; regenerating", extra={"error": type(exc).__name__})
        return None
    entries: list[tuple[int, _Entry]] = []
    for item in stored:
        if item.total_messages is None or item.encrypted_push is None:
            continue
        try:
            push = decode_push(codec.decrypt(item.encrypted_push))
        except (DecryptError, ValueError):
            continue
        if (
            push.get("taskUuid") != row.uuid
            or push.get("occurrenceMs") != occurrence.occurrence_ms
            or push.get("messageKind") == "result"
        ):
            continue
        finished = item.delivered_at is not None or item.acked_at is not None
        unknown = item.sending_at is not None and not finished
        entries.append((int(push.get("messageIndex") or 0), _Entry(push, finished or unknown, unknown)))
    if not entries:
        return None
    entries.sort(key=lambda pair: pair[0])
    return [entry for _, entry in entries]
