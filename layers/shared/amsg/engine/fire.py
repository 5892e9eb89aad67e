"""The agentic fire: the host's hooks drive generation, tools and follow-ups (public contract: :mod:`amsg.hooks`;
the services hooks call are :mod:`amsg.engine.fire_services`, the pure rules :mod:`amsg.engine.fire_rules`).

Runs inside :func:`amsg.engine.delivery.process_occurrence` for a task that needs the LLM, after the
committed-batch check (an occurrence whose pushes are already in the outbox is only redelivered: no hook runs
again). Exactly once across retries, SQS redelivery and lease takeover:

* hook pushes (``finish``) get deterministic ids per occurrence and go through the outbox before sending, like
  ordinary pushes; results (``emit_result``) get deterministic ids per fire and are never re-appended once
  stored, and every push is claimed in the outbox (fenced by the task claim) before it is sent;
* ``schedule_task`` without a ``uuid`` derives the follow-up's uuid from (task, occurrence, call index), so a
  re-run of the same occurrence finds its own follow-up as a duplicate instead of creating a second one;
* ``write_state`` is committed in one transaction with a check that our claim on the task is still current;
* ``on_fire_settled`` runs exactly once for every ``on_before_fire`` call, whatever happens in between.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any

from amsg.context import AppContext
from amsg.crypto import UserCodec
from amsg.domain.credentials import make_credential_lookup
from amsg.domain.llm import build_llm_request, resolve_chat_credentials
from amsg.engine.env import Cancelled, DeliveryEnv, Outcome, row_view
from amsg.engine.fire_rules import (
    BEFORE_FIRE_FORMS,
    MAX_DEFER_MS,
    accumulate_usage,
    config_error,
    contract_error,
    failed_tools,
    first_message,
    first_positive_int,
    first_positive_number,
    requested_calls,
    validate_decision,
    with_tool_calls,
)
from amsg.engine.fire_services import FireProgress, HookServices
from amsg.engine.pushes import Occurrence, should_push
from amsg.engine.sending import VAPID_MISSING, PushUnconfirmed, append_batch, resolve_subscription, send_one
from amsg.failures import DeliveryFailure
from amsg.hooks import HookContext, Hooks, call_hook
from amsg.jsonio import JsonObject
from amsg.observability import logger
from amsg.ports import PushSubscription, TaskRow
from amsg.ports.tenants import TenantInactive
from amsg.task_payload import StoredPayload
from amsg.timeutil import iso_from_ms

MIN_ROUND_S = 2.0  # an LLM round with less time than this left in the invocation is not started


def generation_limit(ctx: AppContext, hooks: Hooks, view: Mapping[str, Any]) -> int:
    """Retries of a fire that failed before its pushes were committed (``max_generation_retries``)."""
    policy = hooks.max_generation_retries
    value: Any = policy(view) if callable(policy) else policy
    if value is None:
        return ctx.settings.max_delivery_retries
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise config_error("max_generation_retries must be a non-negative integer", "GENERATION_RETRY_POLICY_INVALID")
    return value


class AgenticFire(HookServices):
    """One fire of one claimed task. :meth:`run` returns None when ``on_before_fire`` did not handle it."""

    def __init__(
        self,
        ctx: AppContext,
        row: TaskRow,
        payload: StoredPayload,
        codec: UserCodec,
        env: DeliveryEnv,
        hooks: Hooks,
    ) -> None:
        self.ctx = ctx
        self.row = row
        self.payload = payload
        self.codec = codec
        self.env = env
        self.hooks = hooks
        self.occurrence = Occurrence(row.id, row.uuid, row.next_send_at_ms or None)
        self.now = ctx.now_ms()
        self.scratch: JsonObject = {}
        self.progress = FireProgress()
        self.view = row_view(payload, row)
        metadata = payload.get("metadata")
        self.metadata: JsonObject = metadata if isinstance(metadata, dict) else {}

    def _context(self, **extra: Any) -> HookContext:
        return HookContext(self, task=self.view, user_id=self.row.user_id, now=self.now, scratch=self.scratch, **extra)

    # ---- the fire -------------------------------------------------------------------------------------------

    def run(self) -> Outcome | None:
        if self.hooks.on_llm_output is None:
            raise config_error("on_before_fire is exported but on_llm_output is not", "AGENTIC_CONFIG_ERROR")
        assert self.hooks.on_before_fire is not None
        try:
            outcome = self._run()
        except Exception as exc:
            self._settle(exc)
            raise
        # (a BaseException such as a killed sandbox propagates without a receipt: the takeover settles)
        if outcome is not None and self.env.lease_lost():
            self.progress.status = "cancelled"
        self._settle(None)
        return outcome

    def _run(self) -> Outcome | None:
        before = call_hook(self.hooks.on_before_fire, self._context())  # type: ignore[arg-type]
        self.throw_if_cancelled()
        plan = self._plan(before)
        progress = self.progress
        if plan is None:
            progress.status = "not-handled"
            return None
        if plan == "skip":
            progress.status, progress.skip_reason = "skipped", "before-fire"
            return Outcome(extra={"status": "skipped", "iterations": 0})
        if isinstance(plan, int):  # a defer: the retry time (ms)
            progress.status, progress.retry_after = "deferred", iso_from_ms(plan)
            return Outcome(deferred_until_ms=plan)
        return self._rounds(plan)

    def _plan(self, before: Any) -> Any:
        if before is None:
            return None
        if isinstance(before, dict) and before.get("skip") is True:
            return "skip"
        if isinstance(before, dict) and before.get("defer") is not None:
            defer = before["defer"]
            after_ms = defer.get("after_ms") if isinstance(defer, dict) else None
            if (
                isinstance(after_ms, bool)
                or not isinstance(after_ms, int | float)
                or not math.isfinite(after_ms)
                or not 0 < after_ms <= MAX_DEFER_MS
            ):
                raise contract_error("AGENTIC_BAD_BEFORE_FIRE", f"on_before_fire must return {BEFORE_FIRE_FORMS}")
            if not self.env.defer_supported:
                raise config_error("this delivery path cannot defer a fire", "AGENTIC_DEFER_UNSUPPORTED")
            return self.ctx.now_ms() + int(after_ms)
        if isinstance(before, list):
            return {"messages": before}
        if isinstance(before, dict) and isinstance(before.get("messages"), list):
            return before
        raise contract_error("AGENTIC_BAD_BEFORE_FIRE", f"on_before_fire must return {BEFORE_FIRE_FORMS}")

    def _rounds(self, plan: JsonObject) -> Outcome:
        settings = self.ctx.settings
        max_rounds = first_positive_int(plan.get("max_tool_iterations"), settings.max_tool_iterations, 5)
        budget_ms = first_positive_number(plan.get("total_timeout_ms"), settings.total_timeout_ms, 240_000)
        deadline = self.ctx.now_ms() + budget_ms
        tools = plan.get("tools") if isinstance(plan.get("tools"), list) and plan.get("tools") else None
        tool_choice = plan.get("tool_choice")
        lookup = make_credential_lookup(self.ctx.credentials, self.row.user_id, self.codec)
        credentials = resolve_chat_credentials(self.payload, lookup)
        if credentials is None:
            raise DeliveryFailure("CREDENTIAL_MISSING: the task has no chat credentials", code="CREDENTIAL_MISSING")
        if self.env.llm is None:
            raise DeliveryFailure("LLM client is not configured")
        messages = list(plan["messages"])
        progress = self.progress
        for iteration in range(max_rounds):
            self.throw_if_cancelled()
            now = self.ctx.now_ms()
            # the invocation's own time runs out first when the Lambda timeout is shorter than the budget:
            # stop with a retryable timeout while there is still time to record it
            if now >= deadline or self.env.llm_timeout_s() < MIN_ROUND_S:
                raise DeliveryFailure(
                    f"AGENTIC_TOTAL_TIMEOUT: fire chain exceeded {budget_ms}ms after {iteration} LLM round(s)"
                )
            progress.llm_calls += 1
            request_payload = {**self.payload, "messages": messages, "tools": tools, "toolChoice": tool_choice}
            request = build_llm_request(request_payload, credentials, require_content=False)
            timeout_s = max(1.0, min(self.env.llm_timeout_s(), (deadline - now) / 1000))
            reply = self.env.llm.complete(request, timeout_s=timeout_s)
            response = reply.response if isinstance(reply.response, dict) else {}
            assistant = first_message(response)
            messages = [*messages, assistant]
            usage = response.get("usage") if isinstance(response.get("usage"), dict) else None
            progress.usage = usage
            progress.usage_total = accumulate_usage(progress.usage_total, usage)
            self.throw_if_cancelled()
            content = assistant.get("content")
            session = self._context(
                session_id=self.occurrence.session_id,
                char_id=self.payload.get("charId"),
                messages=list(messages),
                llm_response=response,
                llm_output_text=content if isinstance(content, str) else "",
                usage=usage,
                iteration=iteration,
                metadata=self.metadata,
                contact_name=self.payload.get("contactName"),
                avatar_url=self.payload.get("avatarUrl") or None,
                task_id=self.row.id,
                task_uuid=self.row.uuid,
                occurrence_ms=self.occurrence.occurrence_ms,
            )
            decision = call_hook(self.hooks.on_llm_output, session)  # type: ignore[arg-type]
            self.throw_if_cancelled()
            validate_decision(decision)
            kind = decision["decision"]
            progress.iterations = iteration + 1
            if kind == "continue":
                messages = list(decision["next_history"])
                continue
            if kind == "skip-push":
                progress.status, progress.skip_reason = "skipped", "skip-push"
                return Outcome(extra={"status": "skipped", "iterations": iteration + 1})
            if kind == "finish":
                sent = self._send(decision["push_payloads"])
                progress.status = "sent"
                return Outcome(messages_sent=sent, pushed=progress.pushed_count)
            calls = requested_calls(decision)
            if not calls:
                raise DeliveryFailure(
                    "AGENTIC_EMPTY_TOOL_REQUEST: tool-request without tool calls", code="AGENTIC_EMPTY_TOOL_REQUEST"
                )
            if self.hooks.execute_tool_calls is None:
                raise config_error("tool-request needs an execute_tool_calls hook", "AGENTIC_CONFIG_ERROR")
            if iteration == max_rounds - 1:
                break
            results = self._execute(calls, session)
            messages = [*messages[:-1], with_tool_calls(messages[-1], calls), *results]
        raise DeliveryFailure(
            f"AGENTIC_LOOP_EXCEEDED: no finish/skip-push decision within {max_rounds} LLM round(s)",
            code="AGENTIC_LOOP_EXCEEDED",
        )

    def _execute(self, calls: list[JsonObject], session: HookContext) -> list[JsonObject]:
        self.throw_if_cancelled()
        try:
            results: Any = call_hook(self.hooks.execute_tool_calls, calls, session)  # type: ignore[arg-type]
        except (Cancelled, TenantInactive):  # a tool's push found the tenant inactive: the fire stops
            raise
        except Exception as exc:
            if self.env.lease_lost():
                raise Cancelled("cancelled_mid_delivery") from exc
            results = failed_tools(calls, str(exc) or type(exc).__name__)
        self.throw_if_cancelled()
        if not isinstance(results, list):
            return failed_tools(calls, "execute_tool_calls must return a list of tool messages")
        return list(results)

    # ---- sending (finish) -----------------------------------------------------------------------------------

    def _send(self, payloads: list[JsonObject]) -> int:
        progress = self.progress
        now_iso = iso_from_ms(self.ctx.now_ms())
        total = len(payloads)
        pushes = []
        for index, given in enumerate(payloads):
            push = dict(given)
            if not isinstance(push.get("messageId"), str) or not push["messageId"]:
                push["messageId"] = self.occurrence.message_id(f"hook_{index}")
            push["sessionId"] = push.get("sessionId") or self.occurrence.session_id
            push["timestamp"] = push.get("timestamp") or now_iso
            push["messageIndex"] = index + 1
            push["totalMessages"] = total
            pushes.append(self._stamp(push))
        progress.total = total
        self.throw_if_cancelled()
        append_batch(self.ctx, self.row, pushes, self.codec)
        progress.outboxed = True
        self.throw_if_cancelled()
        error: BaseException | None = None
        try:
            if self.env.push_sender is None:
                raise DeliveryFailure(VAPID_MISSING)
            subscription = resolve_subscription(self.ctx, self.row, self.payload, self.codec, self.env, fresh=True)
            last_pushed = max((i for i, p in enumerate(pushes) if should_push(p, outboxed=True)), default=-1)
            unconfirmed = False
            for index, push in enumerate(pushes):
                self.throw_if_cancelled()
                if should_push(push, outboxed=True) and not unconfirmed:
                    unconfirmed = self._push_one(pushes, index, subscription)
                    if index < last_pushed and not unconfirmed:
                        self.env.sleep(self.env.pacing_ms / 1000)
                progress.sent_count += 1
        except Exception as exc:
            error = exc
            raise
        finally:
            if error is not None or progress.sent_count == total:
                self._receipt(
                    self.hooks.on_after_send,
                    "on_after_send",
                    total=total,
                    sent_count=progress.sent_count,
                    pushed_count=progress.pushed_count,
                    outboxed=progress.outboxed,
                    error=error,
                    usage=progress.usage,
                    usage_total=progress.usage_total,
                    llm_calls=progress.llm_calls,
                )
        return total

    def _push_one(self, pushes: list[JsonObject], index: int, subscription: PushSubscription) -> bool:
        """Push one of the batch; True when its outcome is unknown: the pushes after it wait in the outbox for
        the client's pull (docs/delivery.md)."""
        after = sum(1 for later in pushes[index + 1 :] if should_push(later, outboxed=True))
        try:
            if send_one(self.ctx, self.row, pushes[index], subscription, self.env, pushes_after=after):
                self.progress.pushed_count += 1
        except PushUnconfirmed:
            return True
        return False

    # ---- receipts -------------------------------------------------------------------------------------------

    def _settle(self, error: BaseException | None) -> None:
        progress = self.progress
        status = progress.status
        will_retry: bool | None = None
        failure_stage: str | None = None
        retry_limit: int | None = None
        if error is not None:
            if isinstance(error, Cancelled) or self.env.lease_lost():
                status, will_retry = "cancelled", False
            else:
                status = "failed"
                failure_stage = "delivery" if progress.outboxed else "generation"
                retry_limit = getattr(error, "retry_limit", None)
                if retry_limit is None:
                    retry_limit = self.retry_limit()
                    with contextlib.suppress(AttributeError):  # the settle write uses the limit announced here
                        error.retry_limit = retry_limit  # type: ignore[attr-defined]
                will_retry = getattr(error, "permanent", False) is not True and self.row.retry_count < retry_limit
        self._receipt(
            self.hooks.on_fire_settled,
            "on_fire_settled",
            status=status,
            will_retry=will_retry,
            failure_stage=failure_stage,
            retry_limit=retry_limit,
            skip_reason=progress.skip_reason,
            retry_after=progress.retry_after,
            sent_count=progress.sent_count,
            pushed_count=progress.pushed_count,
            total=progress.total,
            iterations=progress.iterations,
            error=error,
            metadata=self.metadata or None,
            usage=progress.usage,
            usage_total=progress.usage_total,
            llm_calls=progress.llm_calls,
            outboxed=progress.outboxed,
        )

    def retry_limit(self) -> int:
        if self.env.max_retries is not None:
            return self.env.max_retries
        if self.progress.outboxed:
            return self.ctx.settings.max_delivery_retries
        try:
            return generation_limit(self.ctx, self.hooks, self.view)
        except Exception:
            return self.ctx.settings.max_delivery_retries

    def _receipt(self, hook: Any, name: str, **attributes: Any) -> None:
        """Config hooks are best-effort: an exception is logged (never its text) and ignored."""
        if hook is None:
            return
        try:
            call_hook(hook, self._context(guarded_writes=False, **attributes))
        except Exception as exc:
            logger.warning("hook failed", extra={"hook": name, "error": type(exc).__name__})
