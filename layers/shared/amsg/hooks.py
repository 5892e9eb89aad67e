"""Host hooks: the public, typed contract between this server and the host's own code.

A deployment names a module in ``AMSG_HOOKS_MODULE`` (template parameter ``HooksModule``); ship it in the layer
or in the function code (see ``examples/hooks/`` and ``docs/``). The module may export any of:

===========================  ======================================================================================
``on_before_fire(ctx)``      asked at fire time, before any LLM call. Returns ``None`` (not handled: the frozen
                             prompt path runs), ``{"skip": True}``, ``{"defer": {"after_ms": n}}``, a list of chat
                             messages, or ``{"messages": [...], "max_tool_iterations", "total_timeout_ms",
                             "tools", "tool_choice"}``.
``on_llm_output(ctx)``       after each LLM round; returns a :class:`Decision`.
``execute_tool_calls(calls, ctx)``  runs the tool calls of a ``tool-request``; returns ``role: tool`` messages.
``on_after_send(info)``      after the pushes of a ``finish`` went out (or failed). Best-effort.
``on_fire_settled(info)``    exactly once for every ``on_before_fire`` call, with the fire's status. Best-effort.
``on_stale_skip(row, info)`` a task was too late and was expired or fast-forwarded. Best-effort.
``serialize_by(task)``       a group key: tasks of one user with the same key are delivered one at a time.
``resolve_owner(info)``      the cloud-data inventory's last owner source (``{owner, kind}`` or None; never secrets).
``max_generation_retries``   an int, or ``(task) -> int | None``: retries of a fire that failed before its
                             pushes were committed (default: ``AMSG_MAX_DELIVERY_RETRIES``).
``on_error(info)``           a tick failed as a whole: ``{"stage", "error", "cause"}``. Best-effort.
===========================  ======================================================================================

Every hook may be a plain function or an ``async def`` (it is run to completion). Hooks receive one context
object (:class:`HookContext`) whose attributes mirror the reference's names in snake_case. Messages, tools,
tool calls, push payloads and ``schedule_task`` options are wire JSON and pass through unchanged (camelCase keys
such as ``firstSendTime``, ``messageKind``); only the control keys of return values are snake_case.

Hooks never see API keys, push subscriptions, VAPID keys or the master key: ``ctx.task`` is a read-only view of
the payload without ``apiKey`` and ``pushSubscription``. Raise :class:`amsg.failures.NonRetryableError`
to fail a fire for good; any other exception follows the retry ladder with a sanitized ``lastError``.

Example (a companion that looks at recent state and decides)::

    def on_before_fire(ctx: HookContext) -> BeforeFireResult:
        mood = ctx.read_state("companion", "mood") or "calm"
        return {"messages": [{"role": "system", "content": f"You feel {mood}."},
                             {"role": "user", "content": "Say hi."}], "max_tool_iterations": 3}

    def on_llm_output(ctx: HookContext) -> Decision:
        if not ctx.llm_output_text:
            return {"decision": "skip-push"}
        ctx.schedule_task({"firstSendTime": "2030-01-01T09:00:00Z"})
        return {"decision": "finish", "push_payloads": [{"messageKind": "content", "message": ctx.llm_output_text}]}
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Callable, Mapping
from copy import deepcopy
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any, Literal, NotRequired, Protocol, TypedDict

from amsg.jsonio import JsonObject

# ---- return shapes ------------------------------------------------------------------------------------------

Message = JsonObject
"""An OpenAI chat message, wire JSON (``{"role": "user", "content": "..."}``, ``tool_calls``, ...)."""


class DeferSpec(TypedDict):
    after_ms: int  # 0 < after_ms <= 86_400_000


class Skip(TypedDict):
    skip: Literal[True]


class Defer(TypedDict):
    defer: DeferSpec


class FirePlan(TypedDict):
    messages: list[Message]
    max_tool_iterations: NotRequired[int]  # default AMSG_MAX_TOOL_ITERATIONS (5)
    total_timeout_ms: NotRequired[int]  # default AMSG_TOTAL_TIMEOUT_MS (240 000), measured after on_before_fire
    tools: NotRequired[list[JsonObject]]
    tool_choice: NotRequired[Any]


BeforeFireResult = None | Skip | Defer | FirePlan | list[Message]


class Decision(TypedDict, total=False):
    """``decision`` is ``finish`` (with ``push_payloads``), ``continue`` (with ``next_history``),
    ``tool-request`` (with ``tool_calls``, or ``push_payloads`` carrying ``toolCalls``) or ``skip-push``."""

    decision: Literal["finish", "continue", "tool-request", "skip-push"]
    push_payloads: list[JsonObject]
    next_history: list[Message]
    tool_calls: list[JsonObject]


class ScheduleResult(TypedDict, total=False):
    created: bool
    id: int
    uuid: str
    nextSendAt: str
    reason: str  # 'duplicate', or 'pending_limit' (the tenant's pending-task limit; docs/tenancy.md)
    task: JsonObject | None


class EmitResult(TypedDict):
    messageId: str
    pushed: bool


# ---- the context --------------------------------------------------------------------------------------------


class FireServices(Protocol):
    """What the engine plugs into a context (implemented in :mod:`amsg.engine.fire_services`)."""

    def is_cancelled(self) -> bool: ...
    def throw_if_cancelled(self) -> None: ...
    def read_state(self, namespace: str, key: str | None = None) -> Any: ...
    def write_state(self, namespace: str, entries: Any, value: Any = ..., *, guarded: bool = True) -> JsonObject: ...
    def emit_result(self, payload: Mapping[str, Any]) -> EmitResult: ...
    def schedule_task(self, options: Mapping[str, Any]) -> ScheduleResult: ...
    def cancel_task(self, uuid: str) -> dict[str, bool]: ...
    def renew_task(self, uuid: str, next_send_at: str) -> JsonObject: ...
    def resolve_llm_credential(self, cred_id: str) -> dict[str, str] | None: ...


class HookContext:
    """The one object every hook receives. Common attributes: ``task`` (read-only mapping, wire key names,
    plus ``id``/``uuid``/``nextSendAt``/``retryCount``), ``user_id``, ``now`` (epoch ms at fire start),
    ``scratch`` (a dict shared by every hook of one fire, never persisted). Per hook extra attributes:

    * ``on_llm_output`` / ``execute_tool_calls``: ``session_id``, ``char_id``, ``messages``, ``llm_response``,
      ``llm_output_text``, ``usage``, ``iteration``, ``metadata``, ``contact_name``, ``avatar_url``,
      ``task_id``, ``task_uuid``, ``occurrence_ms``;
    * ``on_after_send``: ``total``, ``sent_count``, ``pushed_count``, ``outboxed``, ``error``, ``usage``,
      ``usage_total``, ``llm_calls``;
    * ``on_fire_settled``: ``status`` (``sent``/``skipped``/``deferred``/``failed``/``cancelled``/
      ``not-handled``), ``will_retry``, ``failure_stage``, ``retry_limit``, ``skip_reason``, ``retry_after``,
      ``sent_count``, ``pushed_count``, ``total``, ``iterations``, ``error``, ``metadata``, ``usage``,
      ``usage_total``, ``llm_calls``, ``outboxed``;
    * ``on_stale_skip``: ``reason``, ``action``, ``metadata``, ``recurrence_type``, ``occurrence_ms``,
      ``skipped_count``, ``skipped_occurrences``, ``skipped_truncated``, ``next_send_at``.

    Helpers: ``is_cancelled()``, ``throw_if_cancelled()``, ``read_state(namespace[, key])``,
    ``write_state(namespace, entries)`` or ``write_state(namespace, key, value)``, ``emit_result(payload)``,
    ``schedule_task(options)``, ``cancel_task(uuid)``, ``renew_task(uuid, next_send_at)``,
    ``resolve_llm_credential(cred_id)``. Unknown attributes read as ``None``.
    """

    def __init__(self, services: FireServices, **attributes: Any) -> None:
        self._services = services
        self._guarded_writes = attributes.pop("guarded_writes", True)
        self.__dict__.update(attributes)

    def __getattr__(self, name: str) -> Any:  # only called for attributes not set: absent means None
        if name.startswith("__"):
            raise AttributeError(name)
        return None

    def is_cancelled(self) -> bool:
        return self._services.is_cancelled()

    def throw_if_cancelled(self) -> None:
        self._services.throw_if_cancelled()

    def read_state(self, namespace: str, key: str | None = None) -> Any:
        """``read_state(ns)`` → ``[{namespace, key, value, updatedAt}]``; ``read_state(ns, key)`` → value or None."""
        return self._services.read_state(namespace, key)

    def write_state(self, namespace: str, entries: Any, value: Any = ...) -> dict[str, int]:
        """``write_state(ns, [{key, value, updatedAt?, version?}])`` or ``write_state(ns, key, value)``
        (value None deletes). Last-write-wins like ``PUT /client-state``; fenced by the task's claim."""
        return self._services.write_state(namespace, entries, value, guarded=self._guarded_writes)

    def emit_result(self, payload: Mapping[str, Any]) -> EmitResult:
        return self._services.emit_result(payload)

    def schedule_task(self, options: Mapping[str, Any]) -> ScheduleResult:
        return self._services.schedule_task(options)

    def cancel_task(self, uuid: str) -> dict[str, bool]:
        return self._services.cancel_task(uuid)

    def renew_task(self, uuid: str, next_send_at: str) -> JsonObject:
        return self._services.renew_task(uuid, next_send_at)

    def resolve_llm_credential(self, cred_id: str) -> dict[str, str] | None:
        return self._services.resolve_llm_credential(cred_id)


# ---- loading ------------------------------------------------------------------------------------------------

SerializeBy = Callable[[Mapping[str, Any]], object]
Hook = Callable[..., Any]

HOOK_NAMES = (
    "on_before_fire",
    "on_llm_output",
    "execute_tool_calls",
    "on_after_send",
    "on_fire_settled",
    "on_stale_skip",
    "serialize_by",
    "resolve_owner",
    "on_error",
)


@dataclass(frozen=True)
class Hooks:
    on_before_fire: Hook | None = None
    on_llm_output: Hook | None = None
    execute_tool_calls: Hook | None = None
    on_after_send: Hook | None = None
    on_fire_settled: Hook | None = None
    on_stale_skip: Hook | None = None
    serialize_by: SerializeBy | None = None
    resolve_owner: Hook | None = None
    on_error: Hook | None = None
    max_generation_retries: int | Callable[[Mapping[str, Any]], Any] | None = None

    @property
    def agentic(self) -> bool:
        return self.on_before_fire is not None


NO_HOOKS = Hooks()


@cache
def load_hooks(module_name: str | None) -> Hooks:
    """Import the hooks module once per sandbox; a missing module is a configuration error (fail loudly)."""
    if not module_name:
        return NO_HOOKS
    module = importlib.import_module(module_name)
    found: JsonObject = {}
    for name in HOOK_NAMES:
        value = getattr(module, name, None)
        found[name] = value if callable(value) else None
    retries = getattr(module, "max_generation_retries", None)
    if retries is not None and not callable(retries) and not isinstance(retries, int):
        retries = None
    return Hooks(**found, max_generation_retries=retries)


def call_hook(hook: Hook, *args: Any) -> Any:
    """Call a plain or ``async`` hook and return its result (a coroutine is run to completion)."""
    result = hook(*args)
    if inspect.isawaitable(result):
        return _run_awaitable(result)
    return result


def _run_awaitable(awaitable: Any) -> Any:
    async def wait() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    # called from inside a running loop (a host embedding us): run it on a private loop in a helper thread
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, wait()).result()


def report_error(module_name: str | None, stage: str, error: BaseException) -> None:
    """``on_error({"stage", "error", "cause"})`` for a failure no task outcome records (a whole tick failed).
    Best-effort: the hook's own failure is logged and ignored. ``cause`` is sanitized (no secrets, no paths)."""
    try:
        hook = load_hooks(module_name).on_error
    except Exception:
        return
    if hook is None:
        return
    from amsg.domain.redaction import sanitize_error_summary

    cause: JsonObject = {
        "stage": stage,
        "name": type(error).__name__,
        "message": sanitize_error_summary(str(error)),
    }
    code = getattr(error, "code", None)
    if isinstance(code, str) and code:
        cause["code"] = code
    try:
        call_hook(hook, {"stage": stage, "error": error, "cause": cause})
    except Exception as exc:
        from amsg.observability import logger

        logger.warning("hook failed", extra={"hook": "on_error", "error": type(exc).__name__})


def task_view(
    payload: Mapping[str, Any], *, task_id: int, uuid: str, next_send_at: str, retry_count: int
) -> MappingProxyType[str, Any]:
    """The frozen view hooks see: never the API key or a legacy push subscription."""
    view = {key: deepcopy(value) for key, value in payload.items() if key not in ("apiKey", "pushSubscription")}
    view.update({"id": task_id, "uuid": uuid, "nextSendAt": next_send_at, "retryCount": retry_count})
    return MappingProxyType(view)
