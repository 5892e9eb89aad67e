"""The agentic fire: the host's hooks drive generation, tools and follow-ups (public contract: :mod:`amsg.hooks`).

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
import uuid as uuid_lib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from amsg import jsonio
from amsg.context import AppContext
from amsg.crypto import compact_json, decrypt_from_storage, encrypt_for_storage
from amsg.domain.client_state import (
    DEFAULT_MAX_STATE_VALUE_BYTES,
    MAX_KEY_CHARS,
    MAX_NAMESPACE_CHARS,
    MAX_STATE_ENTRIES,
    StateEntry,
    has_reserved_chars,
    read_namespace,
    write_entries,
)
from amsg.domain.credentials import make_credential_lookup
from amsg.domain.jsvalues import is_plain_object
from amsg.domain.llm import build_llm_request, resolve_chat_credentials
from amsg.domain.ownership import GUARD_FIELD
from amsg.domain.projection import project_task
from amsg.domain.timezones import canonical_tz, is_valid_tz
from amsg.domain.validation import MAX_TASK_PAYLOAD_BYTES, payload_byte_length
from amsg.engine.delivery import (
    VAPID_MISSING,
    Cancelled,
    DeliveryEnv,
    Outcome,
    _append_batch,
    _resolve_subscription,
    _send_one,
)
from amsg.engine.pushes import Occurrence, should_push
from amsg.errors import ClaimLost, CloudGuardError, TaskUuidConflict
from amsg.failures import DeliveryFailure
from amsg.hooks import HookContext, Hooks, call_hook, task_view
from amsg.observability import logger
from amsg.ports import NewTask, OutboxAppend, TaskRow
from amsg.timeutil import iso_from_ms, parse_iso_ms

MAX_DEFER_MS = 86_400_000
MIN_FOLLOW_UP_LEAD_MS = 60_000
MIN_ROUND_S = 2.0  # an LLM round with less time than this left in the invocation is not started
DECISIONS = ("finish", "tool-request", "continue", "skip-push")
FOLLOW_UP_NAMESPACE = uuid_lib.UUID("6f1c0a52-9d8e-4b57-a3c1-5e2f7d9b0c41")
BEFORE_FIRE_FORMS = (
    'None, {"skip": True}, {"defer": {"after_ms": n}} with 0 < n <= 86400000, a list of messages, or '
    '{"messages": [...], "max_tool_iterations"?, "total_timeout_ms"?, "tools"?, "tool_choice"?}'
)


def _config_error(message: str, code: str) -> DeliveryFailure:
    """A deployment problem: retryable (the task heals once the deployment is fixed)."""
    return DeliveryFailure(f"{code}: {message}", code=code)


def _bad(code: str, message: str) -> DeliveryFailure:
    """A contract violation by a hook: permanent, retrying cannot fix it."""
    return DeliveryFailure(f"{code}: {message}", code=code, permanent=True)


@dataclass
class _Progress:
    status: str | None = None
    skip_reason: str | None = None
    retry_after: str | None = None
    sent_count: int = 0
    pushed_count: int = 0
    total: int = 0
    iterations: int = 0
    usage: dict[str, Any] | None = None
    usage_total: dict[str, int] | None = None
    llm_calls: int = 0
    outboxed: bool = False
    scheduled: int = 0
    results: int = 0
    existing_ids: set[str] | None = None


def generation_limit(ctx: AppContext, hooks: Hooks, view: Mapping[str, Any]) -> int:
    """Retries of a fire that failed before its pushes were committed (``max_generation_retries``)."""
    policy = hooks.max_generation_retries
    value: Any = policy(view) if callable(policy) else policy
    if value is None:
        return ctx.settings.max_delivery_retries
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _config_error("max_generation_retries must be a non-negative integer", "GENERATION_RETRY_POLICY_INVALID")
    return value


class AgenticFire:
    """One fire of one claimed task. :meth:`run` returns None when ``on_before_fire`` did not handle it."""

    def __init__(
        self,
        ctx: AppContext,
        row: TaskRow,
        payload: dict[str, Any],
        user_key: str,
        env: DeliveryEnv,
        hooks: Hooks,
    ) -> None:
        self.ctx = ctx
        self.row = row
        self.payload = payload
        self.user_key = user_key
        self.env = env
        self.hooks = hooks
        self.occurrence = Occurrence(row.id, row.uuid, parse_iso_ms(row.next_send_at))
        self.now = ctx.now_ms()
        self.scratch: dict[str, Any] = {}
        self.progress = _Progress()
        self.view = task_view(
            payload, task_id=row.id, uuid=row.uuid, next_send_at=row.next_send_at, retry_count=row.retry_count
        )
        metadata = payload.get("metadata")
        self.metadata: dict[str, Any] = metadata if isinstance(metadata, dict) else {}

    # ---- cancellation ---------------------------------------------------------------------------------------

    def is_cancelled(self) -> bool:
        return self.env.lease_lost()

    def throw_if_cancelled(self) -> None:
        if self.env.lease_lost():
            raise Cancelled("cancelled_mid_delivery")

    def _context(self, **extra: Any) -> HookContext:
        return HookContext(self, task=self.view, user_id=self.row.user_id, now=self.now, scratch=self.scratch, **extra)

    # ---- the fire -------------------------------------------------------------------------------------------

    def run(self) -> Outcome | None:
        if self.hooks.on_llm_output is None:
            raise _config_error("on_before_fire is exported but on_llm_output is not", "AGENTIC_CONFIG_ERROR")
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
        if isinstance(plan, str):  # a defer: the retry time
            progress.status, progress.retry_after = "deferred", plan
            return Outcome(deferred_until=plan)
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
                raise _bad("AGENTIC_BAD_BEFORE_FIRE", f"on_before_fire must return {BEFORE_FIRE_FORMS}")
            if not self.env.defer_supported:
                raise _config_error("this delivery path cannot defer a fire", "AGENTIC_DEFER_UNSUPPORTED")
            return iso_from_ms(self.ctx.now_ms() + int(after_ms))
        if isinstance(before, list):
            return {"messages": before}
        if isinstance(before, dict) and isinstance(before.get("messages"), list):
            return before
        raise _bad("AGENTIC_BAD_BEFORE_FIRE", f"on_before_fire must return {BEFORE_FIRE_FORMS}")

    def _rounds(self, plan: dict[str, Any]) -> Outcome:
        settings = self.ctx.settings
        max_rounds = _first_positive_int(plan.get("max_tool_iterations"), settings.max_tool_iterations, 5)
        budget_ms = _first_positive_number(plan.get("total_timeout_ms"), settings.total_timeout_ms, 240_000)
        deadline = self.ctx.now_ms() + budget_ms
        tools = plan.get("tools") if isinstance(plan.get("tools"), list) and plan.get("tools") else None
        tool_choice = plan.get("tool_choice")
        lookup = make_credential_lookup(self.ctx.credentials, self.row.user_id, self.user_key)
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
            assistant = _first_message(response)
            messages = [*messages, assistant]
            usage = response.get("usage") if isinstance(response.get("usage"), dict) else None
            progress.usage = usage
            progress.usage_total = _accumulate(progress.usage_total, usage)
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
            _validate_decision(decision)
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
            calls = _requested_calls(decision)
            if not calls:
                raise DeliveryFailure(
                    "AGENTIC_EMPTY_TOOL_REQUEST: tool-request without tool calls", code="AGENTIC_EMPTY_TOOL_REQUEST"
                )
            if self.hooks.execute_tool_calls is None:
                raise _config_error("tool-request needs an execute_tool_calls hook", "AGENTIC_CONFIG_ERROR")
            if iteration == max_rounds - 1:
                break
            results = self._execute(calls, session)
            messages = [*messages[:-1], _with_tool_calls(messages[-1], calls), *results]
        raise DeliveryFailure(
            f"AGENTIC_LOOP_EXCEEDED: no finish/skip-push decision within {max_rounds} LLM round(s)",
            code="AGENTIC_LOOP_EXCEEDED",
        )

    def _execute(self, calls: list[dict[str, Any]], session: HookContext) -> list[dict[str, Any]]:
        self.throw_if_cancelled()
        try:
            results = call_hook(self.hooks.execute_tool_calls, calls, session)  # type: ignore[arg-type]
        except Cancelled:
            raise
        except Exception as exc:
            if self.env.lease_lost():
                raise Cancelled("cancelled_mid_delivery") from exc
            results = _failed_tools(calls, str(exc) or type(exc).__name__)
        self.throw_if_cancelled()
        if not isinstance(results, list):
            results = _failed_tools(calls, "execute_tool_calls must return a list of tool messages")
        return results

    # ---- sending (finish) -----------------------------------------------------------------------------------

    def _send(self, payloads: list[dict[str, Any]]) -> int:
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
        _append_batch(self.ctx, self.row, pushes, self.user_key)
        progress.outboxed = True
        self.throw_if_cancelled()
        error: BaseException | None = None
        try:
            if self.env.push_sender is None:
                raise DeliveryFailure(VAPID_MISSING)
            subscription = _resolve_subscription(self.ctx, self.row, self.payload, self.user_key)
            last_pushed = max((i for i, p in enumerate(pushes) if should_push(p, outboxed=True)), default=-1)
            for index, push in enumerate(pushes):
                self.throw_if_cancelled()
                if should_push(push, outboxed=True):
                    if _send_one(self.ctx, self.row, push, subscription, self.env):
                        progress.pushed_count += 1
                    if index < last_pushed:
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

    def _stamp(self, push: dict[str, Any]) -> dict[str, Any]:
        push["taskId"] = self.row.id
        push["taskUuid"] = self.row.uuid
        push["recurrenceType"] = self.payload.get("recurrenceType") or "none"
        push["occurrenceMs"] = self.occurrence.occurrence_ms
        return push

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

    # ---- services the context delegates to ------------------------------------------------------------------

    def read_state(self, namespace: str, key: str | None = None) -> Any:
        if not isinstance(namespace, str) or not namespace.strip():
            raise TypeError("read_state(namespace) requires a non-empty string")
        store = self.ctx.client_state
        entries = read_namespace(store, self.row.user_id, self.user_key, namespace) if store is not None else []
        if key is None:
            return entries
        return next((entry["value"] for entry in entries if entry["key"] == key), None)

    def write_state(self, namespace: str, entries: Any, value: Any = ..., *, guarded: bool = True) -> dict:
        if guarded:
            self.throw_if_cancelled()
        if value is not ...:
            entries = [{"key": entries, "value": value}]
        checked = _state_entries(namespace, entries, self.ctx.now_ms())
        if not checked:
            return {"upserted": 0, "skipped": 0, "deleted": 0}
        store = self.ctx.client_state
        if store is None:
            raise _config_error("this deployment has no client state store", "AGENTIC_STATE_WRITE_UNSUPPORTED")
        fence = (self.row.uuid, self.row.claim_version) if guarded else None
        try:
            # a fire's state writes are gated on its task's owner (and may not name another owner)
            result = write_entries(
                store, self.row.user_id, self.user_key, checked, self.ctx.now_ms(), fence=fence, inherit=self.row.owner
            )
        except ClaimLost:
            raise Cancelled("cancelled_mid_delivery") from None
        except CloudGuardError as exc:
            if exc.code == "CLOUD_OWNER_RETIRED":
                raise Cancelled("owner_retired") from None
            raise
        return {"upserted": result.upserted, "skipped": result.skipped, "deleted": result.deleted}

    def emit_result(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        if not is_plain_object(payload) or not isinstance(payload.get("resultKind"), str) or not payload["resultKind"]:
            raise TypeError("emit_result(payload) requires a dict with a non-empty resultKind")
        index = self.progress.results
        self.progress.results += 1
        message_type = payload.get("messageType") or "auto"
        push: dict[str, Any] = {"messageKind": "result", **payload}
        if not isinstance(push.get("messageId"), str) or not push["messageId"]:
            push["messageId"] = self.occurrence.message_id(f"result_{index}")
        push["sessionId"] = push.get("sessionId") or self.occurrence.session_id
        push["timestamp"] = push.get("timestamp") or iso_from_ms(self.ctx.now_ms())
        push["messageType"] = message_type
        push.setdefault("source", "instant" if message_type == "instant" else "scheduled")
        notification = push.get("notification")
        if not isinstance(notification, dict):
            notification = {}
        if "show" not in notification:
            push["notification"] = {**notification, "show": "always"}
        push["messageKind"] = "result"
        self._stamp(push)
        self.throw_if_cancelled()
        message_id = push["messageId"]
        if message_id not in self._existing_ids():
            self.ctx.outbox.append(
                self.row.user_id,
                [
                    OutboxAppend(
                        message_id=message_id,
                        task_uuid=self.row.uuid,
                        session_id=push.get("sessionId"),
                        encrypted_push=encrypt_for_storage(compact_json(push), self.user_key),
                        created_at=self.ctx.now_ms(),
                        owner=self.row.owner,
                    )
                ],
            )
            self._existing_ids().add(message_id)
        if push["notification"].get("show") is False or self.env.push_sender is None:
            return {"messageId": message_id, "pushed": False}
        try:
            subscription = _resolve_subscription(self.ctx, self.row, self.payload, self.user_key)
            pushed = _send_one(self.ctx, self.row, push, subscription, self.env)
        except Cancelled:
            raise
        except Exception as exc:
            logger.warning("result push failed", extra={"error": type(exc).__name__})
            pushed = False
        return {"messageId": message_id, "pushed": pushed}

    def _existing_ids(self) -> set[str]:
        """Message ids this task already has in the outbox: a re-run never re-appends (and so re-arms) them."""
        if self.progress.existing_ids is None:
            since = min(self.occurrence.occurrence_ms or self.now, self.now) - 3_600_000
            rows = self.ctx.outbox.list_for_task(self.row.user_id, self.row.uuid, since_ms=max(0, since))
            self.progress.existing_ids = {row.message_id for row in rows}
        return self.progress.existing_ids

    def schedule_task(self, options: Mapping[str, Any]) -> dict[str, Any]:
        self.throw_if_cancelled()
        if not is_plain_object(options):
            raise TypeError("schedule_task(options) requires a dict")
        parent = self.payload
        now = self.ctx.now_ms()
        first = options.get("firstSendTime")
        first_ms = parse_iso_ms(first) if isinstance(first, str) and first.strip() else None
        if first_ms is None:
            raise TypeError("schedule_task: firstSendTime must be an ISO 8601 date-time string")
        if first_ms < now + MIN_FOLLOW_UP_LEAD_MS:
            raise ValueError("schedule_task: firstSendTime must be at least 60 seconds in the future")
        message_type = options.get("messageType")
        if message_type is None:
            message_type = parent.get("messageType")
        if message_type == "instant":
            raise TypeError("schedule_task: messageType 'instant' cannot be scheduled from a hook")
        if message_type not in ("auto", "prompted", "fixed"):
            raise TypeError("schedule_task: messageType must be auto, prompted or fixed")
        recurrence = options.get("recurrenceType") or "none"
        if recurrence not in ("none", "daily", "weekly"):
            raise TypeError("schedule_task: recurrenceType must be none, daily or weekly")
        if "tzId" not in options:
            tz_id = parent.get("tzId")
        elif options.get("tzId") in (None, ""):
            tz_id = None
        elif is_valid_tz(options["tzId"]):
            tz_id = canonical_tz(options["tzId"])
        else:
            raise TypeError("schedule_task: tzId must be a valid IANA time zone")
        contact_name = options["contactName"] if "contactName" in options else parent.get("contactName")
        if not isinstance(contact_name, str) or not contact_name.strip():
            raise TypeError("schedule_task: contactName must be a non-empty string")
        user_message = options["userMessage"] if "userMessage" in options else parent.get("userMessage")
        if message_type == "fixed" and (not isinstance(user_message, str) or not user_message):
            raise TypeError("schedule_task: a fixed task needs a non-empty userMessage")
        metadata = options["metadata"] if "metadata" in options else (parent.get("metadata") or {})
        if not is_plain_object(metadata):
            raise TypeError("schedule_task: metadata must be a dict")
        index = self.progress.scheduled
        task_uuid = options.get("uuid")
        if task_uuid is None:
            seed = f"{self.row.user_id}/{self.row.uuid}@{self.occurrence.occurrence_ms}#{index}"
            task_uuid = str(uuid_lib.uuid5(FOLLOW_UP_NAMESPACE, seed))
        if not isinstance(task_uuid, str) or not task_uuid.strip():
            raise TypeError("schedule_task: uuid must be a non-empty string")
        refs = parent.get("credRefs") if isinstance(parent.get("credRefs"), dict) else None
        by_ref = bool(refs and isinstance(refs.get("chat"), str) and refs["chat"])
        stored: dict[str, Any] = {
            "contactName": contact_name,
            "avatarUrl": (options.get("avatarUrl") or None)
            if "avatarUrl" in options
            else parent.get("avatarUrl") or None,
            "messageType": message_type,
            "messageSubtype": options.get("messageSubtype") or parent.get("messageSubtype") or "chat",
            "userMessage": user_message or None,
            "firstSendTime": iso_from_ms(first_ms),
            "recurrenceType": recurrence,
            "tzId": tz_id,
            "apiUrl": None if by_ref else parent.get("apiUrl") or None,
            "apiKey": None if by_ref else parent.get("apiKey") or None,
            "primaryModel": None if by_ref else parent.get("primaryModel") or None,
            "credRefs": dict(refs) if refs else None,
            "completePrompt": None,
            "messages": None,
            "maxTokens": parent.get("maxTokens"),
            "temperature": parent.get("temperature"),
            "splitPattern": parent.get("splitPattern"),
            "llmExtraBody": parent.get("llmExtraBody"),
            "metadata": metadata,
        }
        if GUARD_FIELD in parent:  # a follow-up is guarded by its parent's owner
            stored[GUARD_FIELD] = parent[GUARD_FIELD]
        size = payload_byte_length(stored)
        if size > MAX_TASK_PAYLOAD_BYTES:
            raise _bad("TASK_PAYLOAD_TOO_LARGE", f"the follow-up payload is {size} bytes")
        limit = self.ctx.settings.max_scheduled_tasks_per_fire
        if index >= limit:
            raise ValueError(f"schedule_task: at most {limit} follow-up task(s) per fire")
        self.progress.scheduled += 1
        encrypted = encrypt_for_storage(compact_json(stored), self.user_key)
        self.throw_if_cancelled()
        next_send_at = iso_from_ms(first_ms)
        try:
            created = self.ctx.tasks.create_task(
                NewTask(
                    self.row.user_id,
                    task_uuid,
                    encrypted,
                    message_type,
                    next_send_at,
                    iso_from_ms(now),
                    owner=self.row.owner,  # a follow-up belongs to the owner of the task that scheduled it
                )
            )
        except TaskUuidConflict:
            existing = self.ctx.tasks.get_task(self.row.user_id, task_uuid)
            projection = None
            if existing is not None and existing.status == "pending":
                projection = self._project(existing)
            return {"created": False, "reason": "duplicate", "uuid": task_uuid, "task": projection}
        return {"created": True, "id": created.id, "uuid": task_uuid, "nextSendAt": next_send_at}

    def _project(self, row: TaskRow) -> dict[str, Any] | None:
        try:
            payload = jsonio.loads(decrypt_from_storage(row.encrypted_payload, self.user_key))
        except Exception:
            return None
        return project_task(row, payload if isinstance(payload, dict) else {}, include_metadata=True)

    def _other_task(self, task_uuid: Any, what: str) -> str:
        self.throw_if_cancelled()
        if not isinstance(task_uuid, str) or not task_uuid.strip():
            raise TypeError(f"{what}(uuid) requires a non-empty string")
        if task_uuid == self.row.uuid:
            raise ValueError(f"{what} cannot target the task that is firing")
        return task_uuid

    def cancel_task(self, task_uuid: str) -> dict[str, bool]:
        task_uuid = self._other_task(task_uuid, "cancel_task")
        cancelled = self.ctx.tasks.delete_task(self.row.user_id, task_uuid)
        if cancelled:
            try:
                self.ctx.outbox.discard_undelivered_for_task(self.row.user_id, task_uuid)
            except Exception as exc:
                logger.warning("outbox discard failed", extra={"error": type(exc).__name__})
        return {"cancelled": bool(cancelled)}

    def renew_task(self, task_uuid: str, next_send_at: str) -> dict[str, Any]:
        task_uuid = self._other_task(task_uuid, "renew_task")
        next_ms = parse_iso_ms(next_send_at) if isinstance(next_send_at, str) else None
        if next_ms is None:
            raise TypeError("renew_task: next_send_at must be an ISO 8601 date-time string")
        if next_ms < self.ctx.now_ms() + MIN_FOLLOW_UP_LEAD_MS:
            raise ValueError("renew_task: next_send_at must be at least 60 seconds in the future")
        user_id = self.row.user_id
        row = self.ctx.tasks.get_task(user_id, task_uuid)
        if row is None or row.status != "pending":
            return {"renewed": False, "reason": "not_found"}
        try:
            payload = jsonio.loads(decrypt_from_storage(row.encrypted_payload, self.user_key))
        except Exception:
            return {"renewed": False, "reason": "not_found"}
        next_iso = iso_from_ms(next_ms)
        payload["firstSendTime"] = next_iso
        updated = self.ctx.tasks.update_pending_task(
            user_id,
            task_uuid,
            encrypted_payload=encrypt_for_storage(compact_json(payload), self.user_key),
            next_send_at=next_iso,
            now_iso=iso_from_ms(self.ctx.now_ms()),
            expected_rev=row.rev,
        )
        if updated is None:
            again = self.ctx.tasks.get_task(user_id, task_uuid)
            return {"renewed": False, "reason": "in_flight" if again and again.status == "pending" else "not_found"}
        return {"renewed": True, "uuid": task_uuid, "nextSendAt": next_iso}

    def resolve_llm_credential(self, cred_id: str) -> dict[str, str] | None:
        if not isinstance(cred_id, str) or not cred_id.strip():
            raise TypeError("resolve_llm_credential(cred_id) requires a non-empty string")
        lookup = make_credential_lookup(self.ctx.credentials, self.row.user_id, self.user_key)
        value = lookup(cred_id) if lookup is not None else None
        if not isinstance(value, Mapping):
            return None
        url, key, model = value.get("apiUrl"), value.get("apiKey"), value.get("primaryModel")
        if not (url and key and model):
            return None
        return {"apiUrl": str(url), "apiKey": str(key), "primaryModel": str(model)}


# ---- helpers ----------------------------------------------------------------------------------------------


def _first_positive_int(*values: Any) -> int:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 5


def _first_positive_number(*values: Any) -> int:
    for value in values:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            return int(value)
    return 240_000


def _first_message(response: Mapping[str, Any]) -> dict[str, Any]:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    return dict(message) if isinstance(message, dict) else {"role": "assistant", "content": ""}


def _token(usage: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = usage.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
            return int(value)
    return None


def _accumulate(total: dict[str, int] | None, usage: Mapping[str, Any] | None) -> dict[str, int] | None:
    if not usage:
        return total
    prompt = _token(usage, "prompt_tokens", "input_tokens")
    completion = _token(usage, "completion_tokens", "output_tokens")
    whole = _token(usage, "total_tokens")
    if whole is None and prompt is not None and completion is not None:
        whole = prompt + completion
    if prompt is None and completion is None and whole is None:
        return total
    out = dict(total or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
    for name, value in (("prompt_tokens", prompt), ("completion_tokens", completion), ("total_tokens", whole)):
        if value is not None:
            out[name] = out.get(name, 0) + value
    return out


def _validate_decision(decision: Any) -> None:
    def bad(message: str) -> DeliveryFailure:
        return _bad("AGENTIC_BAD_DECISION", message)

    if not isinstance(decision, dict):
        raise bad("on_llm_output must return a dict with a 'decision' key")
    kind = decision.get("decision")
    if kind not in DECISIONS:
        raise bad(f"decision must be one of {', '.join(DECISIONS)}")
    if "push_payload" in decision or "pushPayload" in decision:
        raise bad("use push_payloads (a list), not push_payload")
    if kind == "continue":
        if not isinstance(decision.get("next_history"), list):
            raise bad("continue needs a next_history list")
        return
    if kind == "skip-push":
        return
    if kind == "tool-request" and "tool_calls" in decision:
        calls = decision["tool_calls"]
        if not isinstance(calls, list) or not calls or not all(is_plain_object(call) for call in calls):
            raise bad("tool_calls must be a non-empty list of dicts")
        return
    payloads = decision.get("push_payloads")
    if not isinstance(payloads, list) or not payloads or not all(is_plain_object(p) for p in payloads):
        raise bad(f"{kind} needs push_payloads: a non-empty list of dicts")
    for index, push in enumerate(payloads):
        if "splitPattern" in push:
            raise bad(f"push_payloads[{index}] must not carry splitPattern")
        if "messageId" in push and (not isinstance(push["messageId"], str) or not push["messageId"]):
            raise bad(f"push_payloads[{index}].messageId must be a non-empty string")


def _requested_calls(decision: dict[str, Any]) -> list[dict[str, Any]]:
    calls = decision.get("tool_calls")
    if isinstance(calls, list) and calls:
        return list(calls)
    out: list[dict[str, Any]] = []
    for push in decision.get("push_payloads") or []:
        embedded = push.get("toolCalls") if isinstance(push, dict) else None
        if isinstance(embedded, list):
            out.extend(embedded)
    return out


def _failed_tools(calls: list[dict[str, Any]], message: str) -> list[dict[str, Any]]:
    return [
        {"tool_call_id": str(call.get("id") or ""), "role": "tool", "content": f"Tool execution failed: {message}"}
        for call in calls
    ]


def _with_tool_calls(assistant: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    native = assistant.get("tool_calls") if isinstance(assistant.get("tool_calls"), list) else []
    ids = {call.get("id") for call in native if isinstance(call, dict)}
    synthesized = [call for call in calls if call.get("id") not in ids]
    if not synthesized:
        return assistant
    return {**assistant, "tool_calls": [*native, *synthesized]}


def _state_entries(namespace: Any, entries: Any, now_ms: int) -> list[StateEntry]:
    if not isinstance(namespace, str) or not namespace.strip():
        raise TypeError("write_state(namespace, entries) requires a non-empty string namespace")
    if len(namespace) > MAX_NAMESPACE_CHARS or has_reserved_chars(namespace):
        raise TypeError(f"write_state: namespace must be 1-{MAX_NAMESPACE_CHARS} characters without control characters")
    if not isinstance(entries, list):
        raise TypeError("write_state(namespace, entries) requires a list of {key, value}")
    if len(entries) > MAX_STATE_ENTRIES:
        raise ValueError(f"write_state: at most {MAX_STATE_ENTRIES} entries per call")
    checked = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise TypeError(f"write_state: entries[{index}] must be a dict")
        key = entry.get("key")
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_CHARS or has_reserved_chars(key):
            raise TypeError(f"write_state: entries[{index}].key must be 1-{MAX_KEY_CHARS} characters")
        value = entry.get("value")
        if value is not None and not isinstance(value, str):
            raise TypeError(f"write_state: entries[{index}].value must be a string (serialize it) or None")
        if isinstance(value, str) and len(value.encode("utf-8")) > DEFAULT_MAX_STATE_VALUE_BYTES:
            raise ValueError(f"write_state: entries[{index}].value is too large")
        updated_at = entry.get("updatedAt", now_ms)
        version = entry.get("version")
        for name, number in (("updatedAt", updated_at), ("version", version)):
            if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number <= 0):
                raise TypeError(f"write_state: entries[{index}].{name} must be a positive integer")
        checked.append(StateEntry(index, namespace, key, value, int(updated_at), version))
    return checked
