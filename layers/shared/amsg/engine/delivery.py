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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import (
    DecryptError,
    StoredPayloadUnreadable,
    compact_json,
    decrypt_from_storage,
    decrypt_payload,
    encrypt_for_storage,
)
from amsg.domain.credentials import make_credential_lookup
from amsg.domain.llm import build_llm_request, resolve_chat_credentials
from amsg.domain.recurrence import advance_occurrence, plan_next_occurrence
from amsg.domain.redaction import sanitize_error_summary
from amsg.domain.splitting import split_message
from amsg.engine.policy import before_fire
from amsg.engine.pushes import Occurrence, content_pushes, decode_push, encode_push, reasoning_push, should_push
from amsg.engine.summary import DeliverySummary
from amsg.errors import CloudGuardError
from amsg.failures import ClaimTaken, DeliveryFailure, PushSendError, is_permanent_push_status
from amsg.hooks import HookContext, call_hook, load_hooks, task_view
from amsg.observability import logger, record_delivery_latency
from amsg.ports import (
    APPEND_FALLBACK,
    CapCharge,
    CapReached,
    LlmClient,
    OutboxAppend,
    PushSender,
    PushSubscriptionRow,
    Settlement,
    TaskRow,
)
from amsg.timeutil import iso_from_ms, parse_iso_ms

RETRY_STEP_MS = 120_000
OWNER_RETIRED = "owner_retired"
PERMANENT_CODES = frozenset(
    {"PUSH_SUBSCRIPTION_MISSING", "PUSH_SUBSCRIPTION_STORE_UNSUPPORTED", "PUSH_PAYLOAD_TOO_LARGE"}
)
RECURRING = ("daily", "weekly")
CANCELLED_REASON = "任务在投递期间被取消或顶替"
VAPID_MISSING = "VAPID configuration missing - push notifications cannot be sent"


class Cancelled(Exception):
    """The task was cancelled, superseded or taken over while we delivered it."""

    def __init__(self, status: str = "cancelled_mid_delivery") -> None:
        super().__init__(status)
        self.status = status


@dataclass
class DeliveryEnv:
    """What a run needs besides the context: collaborators and its own budget."""

    push_sender: PushSender | None
    llm: LlmClient | None
    lease_lost: Callable[[], bool] = lambda: False
    sleep: Callable[[float], None] = lambda seconds: None
    llm_timeout_s: Callable[[], float] = lambda: 300.0
    pacing_ms: int = 1500
    max_retries: int | None = None  # overrides settings.max_delivery_retries (instant path: 2)
    defer_supported: bool = True  # a hook may defer the fire (not inside POST /schedule-message)
    cap_charges: list[CapCharge] = field(default_factory=list)  # frequency caps the next push claim counts
    # what run_task read with the task in its one read (None: read the subscription when needed)
    prefetched: tuple[PushSubscriptionRow | None] | None = None
    prefetched_policy: tuple[Any, ...] | None = None
    outbox_seq: int | None = None
    adopt_lease: Callable[[], str] | None = None  # the append adopts the claim with this lease
    owner: str = ""


@dataclass
class Outcome:
    messages_sent: int = 0
    pushed: int = 0
    redelivered: bool = False
    reasoning_error: str | None = None
    deferred_until: str | None = None  # a hook deferred the fire: due again then, no retry consumed
    policy_deferred: bool = False  # the deferral is the user's delivery policy (quiet hours or a cap)
    unmarked: list[str] = field(default_factory=list)  # pushed rows whose delivered mark goes with the settle
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Entry:
    push: dict[str, Any]
    done: bool  # delivered, acked or already claimed for sending


# ---- entry point --------------------------------------------------------------------------------------------


def deliver_claimed(ctx: AppContext, row: TaskRow, summary: DeliverySummary, env: DeliveryEnv) -> Outcome | None:
    """Run the pipeline for a task whose claim (``row.claim_version``) we hold; record into ``summary``.

    Returns the outcome on success, None otherwise. Raises only for infrastructure errors that happened before
    the outcome was written (the caller then lets SQS redeliver; the fencing keeps that safe).
    """
    now = ctx.now_ms()
    user_key = ctx.user_key(row.user_id)
    try:
        payload: dict[str, Any] | None = decrypt_payload(row.encrypted_payload, user_key)
    except StoredPayloadUnreadable:
        if _may_write(ctx, row, env, summary):
            _fail(ctx, row, None, user_key, DeliveryFailure("任务载荷解密失败"), summary, env)
        return None
    assert payload is not None
    owner = row.owner
    if (
        owner is not None
        and ctx.owners is not None
        and not ctx.owners.guard_holds(row.user_id, owner.ref, owner.generation)
    ):
        if _may_write(ctx, row, env, summary):
            cancel_retired(ctx, row, summary)  # retired since the task was written: it never fires again
        return None
    if is_stale(row, now, ctx.settings.stale_after_ms):
        if _may_write(ctx, row, env, summary):
            settle_stale(ctx, row, payload, user_key, summary)
        return None
    try:
        outcome = process_occurrence(ctx, row, payload, user_key, env)
    except ClaimTaken:
        _skip_taken(row, summary)
        return None
    except Cancelled as cancelled:
        if cancelled.status == OWNER_RETIRED:
            cancel_retired(ctx, row, summary)
        else:
            record_cancelled(ctx, row, summary, cancelled.status)
        return None
    except CloudGuardError:  # the owner was retired mid-fire: an outbox append or a push claim refused
        cancel_retired(ctx, row, summary)
        return None
    except CapReached as full:  # the first push found a cap full: nothing was pushed, the batch is outboxed
        if _may_write(ctx, row, env, summary):
            _defer(ctx, row, payload, user_key, iso_from_ms(full.until_ms), summary, policy=True)
        return None
    except Exception as exc:
        if env.lease_lost():
            record_cancelled(ctx, row, summary, "cancelled_mid_delivery")
            return None
        if not isinstance(exc, (DeliveryFailure, PushSendError)):
            logger.warning("delivery step failed", extra={"error": type(exc).__name__})
        if _may_write(ctx, row, env, summary):
            _fail(ctx, row, payload, user_key, exc, summary, env)
        return None
    if outcome.deferred_until is not None:
        if _may_write(ctx, row, env, summary):
            _defer(ctx, row, payload, user_key, outcome.deferred_until, summary, policy=outcome.policy_deferred)
        return None
    if outcome.redelivered:
        summary.redelivered.append({"taskId": row.id, "pushedCount": outcome.pushed})
    if outcome.reasoning_error:
        summary.reasoning_skipped.append({"taskId": row.id, "reason": outcome.reasoning_error})
    if _finalize_success(ctx, row, payload, summary, outcome.unmarked):
        record_delivery_latency(row.next_send_at, row.deferred_until, ctx.now_ms(), outcome.pushed)
        return outcome
    return None


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


def needs_llm(payload: dict[str, Any]) -> bool:
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


def _defer(
    ctx: AppContext,
    row: TaskRow,
    payload: dict[str, Any],
    user_key: str,
    retry_after: str,
    summary: DeliverySummary,
    *,
    policy: bool = False,
) -> None:
    """A hook or the delivery policy deferred the fire: move it to ``retry_after`` without consuming a retry.

    A hook's deferral settles the task as stale once the wake-up would be too late for this occurrence (that
    is what ends endless defers). A policy deferral is not a lateness: the occurrence is kept however long the
    quiet window or the cap lasts, and staleness counts from the deferral's end (``deferred_until``); only a
    recurring task whose next occurrence is reached before the wake-up is settled by the stale rules
    (fast-forwarded), so an occurrence never overtakes the next one."""
    occurrence = parse_iso_ms(row.next_send_at)
    wake = parse_iso_ms(retry_after) or ctx.now_ms()
    if occurrence is not None and not policy and wake - occurrence > ctx.settings.stale_after_ms:
        settle_stale(ctx, row, payload, user_key, summary)
        return
    recurrence = _recurrence(payload)
    next_due = (
        advance_occurrence(occurrence, recurrence, 1, payload.get("tzId"))
        if policy and occurrence is not None and recurrence != "none"
        else None
    )
    if next_due is not None and next_due <= wake:
        settle_stale(ctx, row, payload, user_key, summary)
        return
    settlement = Settlement(next_send_at=row.next_send_at, retry_after=retry_after, policy_deferred=policy)
    try:
        written = ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, iso_from_ms(ctx.now_ms()))
    except Exception as exc:
        summary.failed_count += 1
        summary.failed.append(
            {"taskId": row.id, "reason": sanitize_error_summary(str(exc)), "status": "defer_update_failed"}
        )
        return
    if not written:
        record_cancelled(ctx, row, summary, "cancelled_mid_delivery")
        return
    summary.deferred.append(
        {"taskId": row.id, "retryAfter": retry_after, **({"reason": "delivery_policy"} if policy else {})}
    )


# ---- stale guard ---------------------------------------------------------------------------------------------


def is_stale(row: TaskRow, now_ms: int, stale_after_ms: int) -> bool:
    deferred = parse_iso_ms(row.deferred_until) if row.deferred_until else None
    if deferred is not None:  # the delivery policy moved it: late means late after the deferral's end
        return now_ms - deferred > stale_after_ms
    occurrence = parse_iso_ms(row.next_send_at)
    if occurrence is None or now_ms - occurrence <= stale_after_ms:
        return False
    if row.retry_count == 0:
        return True
    retry_after = parse_iso_ms(row.retry_after) if row.retry_after else None
    return retry_after is not None and now_ms - retry_after > stale_after_ms


def settle_stale(
    ctx: AppContext, row: TaskRow, payload: dict[str, Any], user_key: str, summary: DeliverySummary | Any
) -> bool:
    """Expire a stale one-shot or fast-forward a stale recurring task (no push, no LLM)."""
    now = ctx.now_ms()
    occurrence = parse_iso_ms(row.next_send_at) or now
    recurrence = payload.get("recurrenceType") or "none"
    last_error: dict[str, Any] = {"at": iso_from_ms(now), "occurrence": row.next_send_at, "reason": "stale"}
    entry: dict[str, Any] = {"taskId": row.id, "taskUuid": row.uuid, "reason": "stale"}
    if recurrence in RECURRING:
        plan = plan_next_occurrence(occurrence, recurrence, now, payload.get("tzId"))
        next_iso = iso_from_ms(plan.next_ms)
        last_error.update({"skippedCount": plan.skipped_count, "nextSendAt": next_iso})
        settlement = Settlement(next_send_at=next_iso, retry_count=0, last_error=compact_json(last_error))
        entry.update({"action": "fast_forwarded", "nextSendAt": next_iso, "skippedCount": plan.skipped_count})
    else:
        settlement = Settlement(next_send_at=row.next_send_at, status="failed", last_error=compact_json(last_error))
        entry.update({"action": "expired", "skippedCount": 1})
    settlement.encrypted_payload = _with_last_error(payload, last_error, user_key)
    settlement.payload_rev = row.rev
    try:
        written = ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, iso_from_ms(now))
    except Exception as exc:
        summary.failed_count += 1
        summary.failed.append(
            {"taskId": row.id, "reason": sanitize_error_summary(str(exc)), "status": "stale_update_failed"}
        )
        return False
    if written:
        summary.stale.append(entry)
        _stale_skip_hook(
            ctx, row, payload, user_key, entry, occurrence, recurrence, plan if recurrence in RECURRING else None
        )
    return written


def _stale_skip_hook(
    ctx: AppContext,
    row: TaskRow,
    payload: dict[str, Any],
    user_key: str,
    entry: dict[str, Any],
    occurrence: int,
    recurrence: str,
    plan: Any,
) -> None:
    """``on_stale_skip(row, info)``: best-effort, after the stale settle was written."""
    hook = load_hooks(ctx.settings.hooks_module).on_stale_skip
    if hook is None:
        return
    from amsg.engine.fire import AgenticFire

    fire = AgenticFire(
        ctx,
        row,
        payload,
        user_key,
        DeliveryEnv(push_sender=ctx.delivery.push_sender, llm=None),
        load_hooks(ctx.settings.hooks_module),
    )
    metadata = payload.get("metadata")
    info = HookContext(
        fire,
        guarded_writes=False,
        task=fire.view,
        user_id=row.user_id,
        now=fire.now,
        scratch=fire.scratch,
        reason="stale",
        action=entry["action"],
        metadata=metadata if isinstance(metadata, dict) else None,
        recurrence_type=payload.get("recurrenceType") or "none",
        occurrence_ms=occurrence,
        skipped_count=entry["skippedCount"],
        skipped_occurrences=list(plan.skipped_occurrences) if plan is not None else [occurrence],
        skipped_truncated=bool(plan.skipped_truncated) if plan is not None else False,
        next_send_at=entry.get("nextSendAt"),
    )
    safe_row = TaskRow(**{**row.__dict__})
    try:
        call_hook(hook, safe_row, info)
    except Exception as exc:
        logger.warning("hook failed", extra={"hook": "on_stale_skip", "error": type(exc).__name__})


# ---- processing ------------------------------------------------------------------------------------------


def process_occurrence(
    ctx: AppContext, row: TaskRow, payload: dict[str, Any], user_key: str, env: DeliveryEnv
) -> Outcome:
    occurrence = Occurrence(row.id, row.uuid, parse_iso_ms(row.next_send_at))
    hooks = load_hooks(ctx.settings.hooks_module)
    agentic = hooks.agentic and needs_llm(payload)
    # the task records the occurrence whose batch is in the outbox, so a first attempt needs no lookup
    known = row.outbox_occurrence is not None and row.outbox_occurrence == row.next_send_at
    entries = _committed_batch(ctx, row, occurrence, user_key) if known or agentic else None
    # the user's quiet hours and caps come first, before the host's on_before_fire and any LLM call
    policy = before_fire(
        ctx,
        row,
        payload,
        user_key,
        check_caps=not any(entry.done for entry in entries or ()),
        prefetched=env.prefetched_policy,
    )
    if policy.defer_until_ms is not None:
        return Outcome(deferred_until=iso_from_ms(policy.defer_until_ms), policy_deferred=True)
    if entries is not None:
        # a batch already in the outbox (a redelivery, a fire deferred by a cap): no append will adopt the
        # claim, so take it now, before any push claim or cap charge (a duplicate run stops here)
        _adopt_now(ctx, row, env)
    env.cap_charges = list(policy.charges)  # counted with the first push this run claims (agentic ones too)
    outcome = Outcome(redelivered=entries is not None)
    claimed_first = False
    subscription: dict | None = None
    subscription_error: Exception | None = None
    if entries is None:
        if agentic:
            from amsg.engine.fire import AgenticFire

            _adopt_now(ctx, row, env)  # a chain of LLM rounds and tools: hold the run lease from the start

            fired = AgenticFire(ctx, row, payload, user_key, env, hooks).run()
            if fired is not None:
                return fired
        try:
            pushes = _generate(ctx, row, payload, occurrence, env)
        except Exception as exc:
            if hooks.max_generation_retries is not None and not hasattr(exc, "retry_limit"):
                from amsg.engine.fire import generation_limit

                view = task_view(
                    payload, task_id=row.id, uuid=row.uuid, next_send_at=row.next_send_at, retry_count=row.retry_count
                )
                exc.retry_limit = generation_limit(ctx, hooks, view)  # type: ignore[attr-defined]
            raise
        first = next((push["messageId"] for push in pushes if should_push(push, outboxed=True)), None)
        if first is not None and env.push_sender is not None:
            try:
                subscription = _resolve_subscription(ctx, row, payload, user_key, env)
            except DeliveryFailure as exc:
                subscription_error = exc  # raised after the append: the batch still reaches the outbox
        # the first push is claimed with the append unless the user's caps must be charged with its claim
        claim = first if subscription is not None and not env.lease_lost() and not env.cap_charges else None
        entries, claimed_first, outcome.redelivered = _append_new_batch(
            ctx, row, occurrence, pushes, user_key, env, claim
        )
    outcome.messages_sent = sum(1 for entry in entries if entry.push.get("messageKind") == "content")
    pending = [entry for entry in entries if not entry.done and should_push(entry.push, outboxed=True)]
    if not pending:
        return outcome
    if env.push_sender is None:
        raise DeliveryFailure(VAPID_MISSING)
    if subscription_error is not None:
        raise subscription_error
    if subscription is None:
        subscription = _resolve_subscription(ctx, row, payload, user_key, env)
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
            sent = _send_one(
                ctx, row, entry.push, subscription, env, preclaimed=preclaimed, previous=previous, mark=False
            )
            if sent:
                outcome.pushed += 1
                unmarked = entry.push["messageId"]
            previous = None
    except Exception:
        leftover = [message_id for message_id in (previous, unmarked) if message_id]
        if leftover:  # pushed rows say so before anything else happens to the batch
            with contextlib.suppress(Exception):
                ctx.outbox.mark_delivered(row.user_id, leftover, ctx.now_ms())
        raise
    outcome.unmarked = [unmarked] if unmarked else []
    return outcome


def _adopt_now(ctx: AppContext, row: TaskRow, env: DeliveryEnv) -> None:
    """Adopt the tick's claim with the run lease now (instead of in the append transaction)."""
    if env.adopt_lease is None:
        return
    now_iso = iso_from_ms(ctx.now_ms())
    adopted = ctx.claims.adopt_claim(
        row.user_id, row.uuid, row.claim_version, row.next_send_at, env.adopt_lease(), env.owner, now_iso
    )
    if adopted is None:
        raise Cancelled("cancelled_mid_delivery")
    row.lease_until = adopted.lease_until
    env.adopt_lease = None


def _append_new_batch(
    ctx: AppContext,
    row: TaskRow,
    occurrence: Occurrence,
    pushes: list[dict[str, Any]],
    user_key: str,
    env: DeliveryEnv,
    claim: str | None,
) -> tuple[list[_Entry], bool, bool]:
    """Append a freshly generated batch: (entries, whether ``claim`` was claimed for sending, redelivered).

    One transaction appends the rows, adopts the claim and records the occurrence; when that does not apply
    (a batch too large for one transaction, or rows of this occurrence already there from an earlier
    version) the batch found in the outbox is used, else the outbox's general append."""
    rows = _outbox_rows(ctx, row, pushes, user_key)
    result = ctx.claims.append_batch(
        row,
        rows,
        now_ms=ctx.now_ms(),
        lease_until=env.adopt_lease() if env.adopt_lease is not None else None,
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
    committed = _committed_batch(ctx, row, occurrence, user_key)
    if committed is not None:
        return committed, False, True
    _append_batch(ctx, row, pushes, user_key)
    return fresh, False, False


def _send_one(
    ctx: AppContext,
    row: TaskRow,
    push: dict[str, Any],
    subscription: dict,
    env: DeliveryEnv,
    *,
    preclaimed: bool = False,
    previous: str | None = None,
    mark: bool = True,
) -> bool:
    """Claim the row (unless the append already did), push it, mark it delivered (or leave that to the
    caller, ``mark=False``); ``previous``, a pushed row, is marked delivered with the claim. False when
    another run already claimed the row.

    The run's pending cap charges (``env.cap_charges``) go into the first claim: the occurrence is counted
    against the user's caps in the same transaction, or :class:`CapReached` is raised and nothing is taken."""
    message_id = push["messageId"]
    now = ctx.now_ms()
    # the claim re-checks the task's owner in the same transaction: nothing is pushed after a retirement
    claimed = preclaimed or ctx.outbox.claim_send(
        row.user_id,
        message_id,
        task_uuid=row.uuid,
        claim_version=row.claim_version,
        now_ms=now,
        owner=row.owner,
        caps=env.cap_charges,
        delivered=previous,
    )
    if claimed:
        env.cap_charges = []
    if not claimed:
        current = ctx.tasks.get_task(row.user_id, row.uuid)
        if current is None or current.claim_version != row.claim_version or current.status != "pending":
            raise Cancelled("cancelled_mid_delivery")
        return False  # another run already claimed this row for sending: never push it twice
    assert env.push_sender is not None
    try:
        env.push_sender.send(subscription, encode_push(push))
    except Exception:
        ctx.outbox.release_send(row.user_id, message_id)
        raise
    if mark:
        ctx.outbox.mark_delivered(row.user_id, [message_id], ctx.now_ms())
    return True


def _generate(
    ctx: AppContext, row: TaskRow, payload: dict[str, Any], occurrence: Occurrence, env: DeliveryEnv
) -> list[dict[str, Any]]:
    message_type = payload.get("messageType") or row.message_type
    reasoning: str | None = None
    if message_type == "fixed":
        content = payload.get("userMessage")
        if not isinstance(content, str) or not content:
            raise DeliveryFailure("Invalid message configuration: no content source available")
    elif message_type in ("prompted", "auto", "instant"):
        lookup = make_credential_lookup(ctx.credentials, row.user_id, ctx.user_key(row.user_id))
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


def _append_batch(ctx: AppContext, row: TaskRow, pushes: list[dict[str, Any]], user_key: str) -> None:
    ctx.outbox.append(row.user_id, _outbox_rows(ctx, row, pushes, user_key))


def _outbox_rows(ctx: AppContext, row: TaskRow, pushes: list[dict[str, Any]], user_key: str) -> list[OutboxAppend]:
    now = ctx.now_ms()
    return [
        OutboxAppend(
            message_id=push["messageId"],
            task_uuid=row.uuid,
            session_id=push.get("sessionId"),
            message_index=push.get("messageIndex"),
            total_messages=push.get("totalMessages"),
            encrypted_push=encrypt_for_storage(compact_json(push), user_key),
            created_at=now,
            owner=row.owner,
        )
        for push in pushes
    ]


def _committed_batch(ctx: AppContext, row: TaskRow, occurrence: Occurrence, user_key: str) -> list[_Entry] | None:
    """This occurrence's batch if it is already in the outbox (a redelivery): then only unsent rows go out."""
    if occurrence.occurrence_ms is None:
        return None
    try:
        stored = ctx.outbox.list_for_task(row.user_id, row.uuid)
    except Exception as exc:
        logger.warning("committed-batch lookup failed; regenerating", extra={"error": type(exc).__name__})
        return None
    entries: list[tuple[int, _Entry]] = []
    for item in stored:
        if item.total_messages is None or item.encrypted_push is None:
            continue
        try:
            push = decode_push(decrypt_from_storage(item.encrypted_push, user_key))
        except (DecryptError, ValueError):
            continue
        if (
            push.get("taskUuid") != row.uuid
            or push.get("occurrenceMs") != occurrence.occurrence_ms
            or push.get("messageKind") == "result"
        ):
            continue
        done = item.delivered_at is not None or item.acked_at is not None or item.sending_at is not None
        entries.append((int(push.get("messageIndex") or 0), _Entry(push, done)))
    if not entries:
        return None
    entries.sort(key=lambda pair: pair[0])
    return [entry for _, entry in entries]


def _resolve_subscription(
    ctx: AppContext, row: TaskRow, payload: dict[str, Any], user_key: str, env: DeliveryEnv | None = None
) -> dict:
    if env is not None and env.prefetched is not None:
        stored = env.prefetched[0]  # read together with the task
    else:
        stored = ctx.subscriptions.get_push_subscription(row.user_id)
    if stored is not None:
        try:
            value = jsonio.loads(decrypt_from_storage(stored.encrypted_subscription, user_key))
        except (DecryptError, ValueError) as exc:
            raise DeliveryFailure("stored push subscription cannot be decrypted") from exc
        if isinstance(value, dict):
            return value
    legacy = payload.get("pushSubscription")
    if isinstance(legacy, dict) and isinstance(legacy.get("endpoint"), str) and legacy["endpoint"].strip():
        return legacy
    raise DeliveryFailure(
        "PUSH_SUBSCRIPTION_MISSING: 该用户还没有登记推送订阅", code="PUSH_SUBSCRIPTION_MISSING", permanent=True
    )


# ---- settling ---------------------------------------------------------------------------------------------


def _recurrence(payload: dict[str, Any] | None) -> str:
    value = (payload or {}).get("recurrenceType")
    return value if value in RECURRING else "none"  # missing means none, on every path


def _with_last_error(payload: dict[str, Any] | None, last_error: dict[str, Any] | None, user_key: str) -> str | None:
    if payload is None:
        return None
    updated = dict(payload)
    if last_error is None:
        if "lastError" not in updated:
            return None
        updated.pop("lastError")
    else:
        updated["lastError"] = last_error
    return encrypt_for_storage(compact_json(updated), user_key)


def _finalize_success(
    ctx: AppContext,
    row: TaskRow,
    payload: dict[str, Any],
    summary: DeliverySummary,
    delivered: list[str] | None = None,
) -> bool:
    now = ctx.now_ms()
    now_iso = iso_from_ms(now)
    recurrence = _recurrence(payload)
    if recurrence == "none":
        settlement = Settlement(
            next_send_at=row.next_send_at, delete=True, payload_rev=row.rev, payload_token=row.payload_token
        )
    else:
        occurrence = parse_iso_ms(row.next_send_at) or now
        next_ms = plan_next_occurrence(occurrence, recurrence, now, payload.get("tzId")).next_ms
        user_key = ctx.user_key(row.user_id)
        settlement = Settlement(
            next_send_at=iso_from_ms(next_ms),
            retry_count=0,
            last_error=None,
            encrypted_payload=_with_last_error(payload, None, user_key),
            payload_rev=row.rev,
        )
    settlement.delivered, settlement.delivered_at_ms = tuple(delivered or ()), now
    try:
        written = ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, now_iso)
    except Exception as exc:
        return _post_send_persistence_failure(ctx, row, recurrence, settlement, summary, exc)
    if not written:
        record_cancelled(ctx, row, summary, "cancelled_after_delivery")
        return False
    summary.success_count += 1
    if recurrence == "none":
        summary.deleted_once_off += 1
    else:
        summary.updated_recurring += 1
    return True


def _post_send_persistence_failure(
    ctx: AppContext, row: TaskRow, recurrence: str, settlement: Settlement, summary: DeliverySummary, exc: Exception
) -> bool:
    """Pushes went out but the finalize write failed: one more, simpler write."""
    summary.failed_count += 1
    entry: dict[str, Any] = {"taskId": row.id, "reason": sanitize_error_summary(str(exc)), "messageDelivered": True}
    fallback = (
        Settlement(next_send_at=settlement.next_send_at, retry_count=0)
        if recurrence != "none"
        else Settlement(next_send_at=row.next_send_at, status="sent", retry_count=0)
    )
    try:
        ctx.claims.settle(row.user_id, row.uuid, row.claim_version, fallback, iso_from_ms(ctx.now_ms()))
        entry["status"] = (
            "post_send_cleanup_failed_rescheduled" if recurrence != "none" else "post_send_cleanup_failed_marked_sent"
        )
    except Exception:
        entry["status"] = "post_send_cleanup_failed"
    summary.failed.append(entry)
    return False


def _fail(
    ctx: AppContext,
    row: TaskRow,
    payload: dict[str, Any] | None,
    user_key: str,
    exc: BaseException,
    summary: DeliverySummary,
    env: DeliveryEnv,
) -> None:
    """Retry with back-off, or settle terminally. The outcome is written before SQS is acked, so a crash redelivers."""
    now = ctx.now_ms()
    info = failure_info(exc, row, now)
    reason, permanent, last_error = info.reason, info.permanent, info.last_error
    limit = getattr(exc, "retry_limit", None)
    if not isinstance(limit, int):
        limit = env.max_retries if env.max_retries is not None else ctx.settings.max_delivery_retries
    raw_last_error = {**last_error, "reason": reason}
    recurrence = _recurrence(payload)
    summary.failed_count += 1
    entry: dict[str, Any] = {"taskId": row.id, "reason": last_error["reason"]}
    if permanent or row.retry_count >= limit:
        if recurrence != "none":
            occurrence = parse_iso_ms(row.next_send_at) or now
            next_iso = iso_from_ms(
                plan_next_occurrence(occurrence, recurrence, now, (payload or {}).get("tzId")).next_ms
            )
            settlement = Settlement(next_send_at=next_iso, retry_count=0, last_error=compact_json(last_error))
            entry.update({"retryCount": row.retry_count, "status": "occurrence_skipped", "nextSendAt": next_iso})
        else:
            settlement = Settlement(next_send_at=row.next_send_at, status="failed", last_error=compact_json(last_error))
            entry.update({"retryCount": row.retry_count, "status": "permanently_failed"})
        if permanent:
            entry["permanent"] = True
        settlement.encrypted_payload = _with_last_error(payload, raw_last_error, user_key)
        settlement.payload_rev = row.rev
    else:
        retry_at = iso_from_ms(now + (row.retry_count + 1) * RETRY_STEP_MS)
        settlement = Settlement(
            next_send_at=row.next_send_at,
            retry_after=retry_at,
            retry_count=row.retry_count + 1,
            last_error=compact_json(last_error),
        )
        entry.update({"retryCount": row.retry_count + 1, "nextRetryAt": retry_at})
    try:
        written = ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, iso_from_ms(now))
    except Exception as write_error:
        entry.update({"status": "retry_update_failed", "updateError": sanitize_error_summary(str(write_error))})
        summary.failed.append(entry)
        raise
    if not written:
        summary.failed_count -= 1
        record_cancelled(ctx, row, summary, "cancelled_mid_delivery")
        return
    summary.failed.append(entry)


@dataclass
class FailureInfo:
    reason: str
    code: str | None
    push_status: int | None
    permanent: bool
    last_error: dict[str, Any]


def failure_info(exc: BaseException, row: TaskRow, now_ms: int) -> FailureInfo:
    """Classify a failed attempt and build the sanitized ``last_error`` (no secret in it)."""
    reason = str(getattr(exc, "message", None) or exc) or type(exc).__name__
    code = getattr(exc, "code", None)
    code = code if isinstance(code, str) and code else None
    push_status = exc.status if isinstance(exc, PushSendError) else None
    permanent = (
        getattr(exc, "permanent", False) is True or code in PERMANENT_CODES or is_permanent_push_status(push_status)
    )
    last_error: dict[str, Any] = {
        "at": iso_from_ms(now_ms),
        "occurrence": row.next_send_at,
        "reason": sanitize_error_summary(reason),
    }
    if code:
        last_error["errorCode"] = code[:64]
    if push_status is not None:
        last_error["pushStatus"] = push_status
    return FailureInfo(reason, code, push_status, permanent, last_error)


def cancel_retired(ctx: AppContext, row: TaskRow, summary: DeliverySummary) -> None:
    """The task's owner was retired: the task fails without a retry (out of the due index, so it never fires
    again; a restore does not revive it) and its unsent outbox rows are discarded. Its cleanup deletes it."""
    last_error = {"reason": "owner retired", "errorCode": "CLOUD_OWNER_RETIRED", "at": iso_from_ms(ctx.now_ms())}
    settlement = Settlement(next_send_at=row.next_send_at, status="failed", last_error=compact_json(last_error))
    try:
        ctx.claims.settle(row.user_id, row.uuid, row.claim_version, settlement, iso_from_ms(ctx.now_ms()))
    except Exception as exc:  # the claim lease expires; the next run finds the owner retired again
        logger.warning("retired task settle failed", extra={"error": type(exc).__name__})
    record_cancelled(ctx, row, summary, OWNER_RETIRED)


def record_cancelled(ctx: AppContext, row: TaskRow, summary: DeliverySummary, status: str) -> None:
    summary.cancelled.append({"taskId": row.id, "reason": CANCELLED_REASON, "status": status})
    logger.info("delivery cancelled", extra={"taskUuid": row.uuid, "status": status})
    try:
        ctx.outbox.discard_undelivered_for_task(row.user_id, row.uuid)
    except Exception as exc:
        logger.warning("outbox discard failed", extra={"error": type(exc).__name__})
