"""A scriptable hooks module for tests (AMSG_HOOKS_MODULE=tests.support.hooks_agentic).

Tests set ``SCRIPT.before`` / ``SCRIPT.output`` / ``SCRIPT.tools`` to plain or async callables and read the
receipts the engine delivered (``SCRIPT.settled``, ``SCRIPT.after_send``, ``SCRIPT.stale``, ``SCRIPT.errors``).
``reset()`` between tests. Every receipt is recorded as a plain dict of the context's attributes.
"""

from __future__ import annotations

import threading
from typing import Any

RECEIPT_KEYS = (
    "status", "will_retry", "failure_stage", "retry_limit", "skip_reason", "retry_after", "sent_count",
    "pushed_count", "total", "iterations", "metadata", "usage", "usage_total", "llm_calls", "outboxed",
)  # fmt: skip


class Script:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.before: Any = lambda ctx: None
        self.output: Any = lambda ctx: {"decision": "finish", "push_payloads": [{"message": ctx.llm_output_text}]}
        self.tools: Any = None
        self.settled: list[dict[str, Any]] = []
        self.after_send: list[dict[str, Any]] = []
        self.stale: list[dict[str, Any]] = []
        self.contexts: list[Any] = []
        self.before_calls = 0
        self.on_settled: Any = None
        self.errors: list[dict[str, Any]] = []
        self.generation_retries: Any = None  # what max_generation_retries answers (None: the default)


SCRIPT = Script()


def reset() -> None:
    SCRIPT.reset()


def _record(ctx: Any, target: list[dict[str, Any]]) -> dict[str, Any]:
    entry = {key: getattr(ctx, key) for key in RECEIPT_KEYS}
    entry["task_uuid"] = ctx.task["uuid"]
    entry["error"] = ctx.error
    entry["scratch"] = dict(ctx.scratch or {})
    with SCRIPT.lock:
        target.append(entry)
    return entry


def on_before_fire(ctx):
    with SCRIPT.lock:
        SCRIPT.before_calls += 1
        SCRIPT.contexts.append(ctx)
    return SCRIPT.before(ctx)


def on_llm_output(ctx):
    return SCRIPT.output(ctx)


def execute_tool_calls(calls, ctx):
    if SCRIPT.tools is None:
        raise RuntimeError("no tools scripted")
    return SCRIPT.tools(calls, ctx)


async def on_fire_settled(ctx):  # async on purpose: both forms must work
    _record(ctx, SCRIPT.settled)
    if SCRIPT.on_settled is not None:
        SCRIPT.on_settled(ctx)


def on_after_send(ctx):
    _record(ctx, SCRIPT.after_send)


def on_stale_skip(row, info):
    with SCRIPT.lock:
        SCRIPT.stale.append(
            {
                "uuid": row.uuid,
                "action": info.action,
                "skipped_count": info.skipped_count,
                "next_send_at": info.next_send_at,
                "occurrence_ms": info.occurrence_ms,
                "row_next_send_at": row.next_send_at,  # the hook's row keeps ISO text times
            }
        )


def max_generation_retries(task):
    return SCRIPT.generation_retries


def on_error(info):
    with SCRIPT.lock:
        SCRIPT.errors.append(info["cause"])


def serialize_by(task):
    return (task.get("metadata") or {}).get("group")
