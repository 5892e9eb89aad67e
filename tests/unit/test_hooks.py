"""The hooks contract: loading a module's exports, plain and async hooks, the read-only task view, on_error."""

from __future__ import annotations

import asyncio
import sys
import types

import pytest
from amsg.hooks import HookContext, call_hook, load_hooks, report_error, task_view


def _module(name: str, **exports) -> str:
    module = types.ModuleType(name)
    module.__dict__.update(exports)
    sys.modules[name] = module
    load_hooks.cache_clear()
    return name


def test_load_hooks_takes_callables_and_a_retry_policy_only():
    name = _module(
        "hooks_unit_a", on_before_fire=lambda ctx: None, on_llm_output="not callable", max_generation_retries=1
    )
    hooks = load_hooks(name)
    assert hooks.agentic and hooks.on_llm_output is None and hooks.max_generation_retries == 1
    assert load_hooks(_module("hooks_unit_b", max_generation_retries="2")).max_generation_retries is None
    assert load_hooks(None).agentic is False
    with pytest.raises(ImportError):
        load_hooks("hooks_unit_missing_module")


def test_call_hook_runs_plain_and_async_hooks_even_inside_a_running_loop():
    async def async_hook(value):
        await asyncio.sleep(0)
        return value * 2

    assert call_hook(lambda value: value + 1, 1) == 2
    assert call_hook(async_hook, 2) == 4

    async def host():
        return call_hook(async_hook, 3)

    assert asyncio.run(host()) == 6


def test_task_view_is_read_only_and_never_carries_secrets():
    payload = {"apiKey": "sk-1", "pushSubscription": {"endpoint": "x"}, "metadata": {"a": 1}, "contactName": "Rei"}
    view = task_view(payload, task_id=3, uuid="u", next_send_at="t", retry_count=0)
    assert "apiKey" not in view and "pushSubscription" not in view and view["id"] == 3
    with pytest.raises(TypeError):
        view["contactName"] = "x"  # type: ignore[index]
    view["metadata"]["a"] = 2
    assert payload["metadata"] == {"a": 1}  # a hook cannot reach into the payload either


def test_context_attributes_default_to_none():
    ctx = HookContext(services=None, task={}, status="sent")  # type: ignore[arg-type]
    assert ctx.status == "sent" and ctx.iterations is None


def test_report_error_passes_a_sanitized_cause_and_swallows_hook_failures():
    seen = []
    name = _module("hooks_unit_c", on_error=lambda info: seen.append(info["cause"]))
    error = RuntimeError("Bearer sk-abcdefghijklmnopqrstuvwxyz0123 rejected")
    error.code = "X_FAILED"  # type: ignore[attr-defined]
    report_error(name, "tick", error)
    (cause,) = seen
    assert cause["stage"] == "tick" and cause["name"] == "RuntimeError" and cause["code"] == "X_FAILED"
    assert "sk-abcdefghijklmnopqrstuvwxyz0123" not in cause["message"]

    def broken(info):
        raise ValueError("hook bug")

    report_error(_module("hooks_unit_d", on_error=broken), "tick", error)  # logged, not raised
