"""An example hooks module: a companion that reads recent client state, may call a tool, and schedules its
own follow-up. Copy it, rename it, and point ``AMSG_HOOKS_MODULE`` at it (see README.md next to this file).

What it does at each fire of a ``prompted``/``auto`` task:

1. ``on_before_fire`` reads the ``companion`` namespace of the user's client state (written by the app with
   ``PUT /client-state``): if the user was active in the last 10 minutes it skips (no need to ping someone who
   is chatting), if the app set ``quiet_until`` in the future it defers the fire until then; otherwise it builds
   the conversation (the mood the app recorded, the last thing the companion said) and offers two tools.
2. ``on_llm_output`` runs the tools the model asks for (``execute_tool_calls``), skips the push when the model
   has nothing to say, otherwise pushes the text, remembers it in client state, and schedules one follow-up
   four hours later (a re-run of the same fire finds its follow-up instead of creating a second one).
3. ``on_fire_settled`` logs how the fire ended (status, rounds, tokens).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from amsg.hooks import BeforeFireResult, Decision, HookContext

log = logging.getLogger("companion")

NAMESPACE = "companion"
ACTIVE_WINDOW_MS = 10 * 60_000
FOLLOW_UP_AFTER_MS = 4 * 3_600_000
MAX_DEFER_MS = 86_400_000

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_local_time",
            "description": "The user's local date and time.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "recall",
            "description": "Read one note the app stored about the user.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        },
    },
]

# a retried generation costs tokens: give up after two retries (pushes already committed still get three)
max_generation_retries = 2


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def on_before_fire(ctx: HookContext) -> BeforeFireResult:
    state = {entry["key"]: entry["value"] for entry in ctx.read_state(NAMESPACE)}
    last_seen = _int(state.get("last_seen"))
    if last_seen is not None and ctx.now - last_seen < ACTIVE_WINDOW_MS:
        return {"skip": True}
    quiet_until = _int(state.get("quiet_until"))
    if quiet_until is not None and quiet_until > ctx.now:
        return {"defer": {"after_ms": min(quiet_until - ctx.now, MAX_DEFER_MS)}}
    name = ctx.task.get("contactName") or "your companion"
    system = f"You are {name}. The user seemed {state.get('mood', 'fine')} last time. Keep it short and warm."
    messages = [{"role": "system", "content": system}]
    if state.get("last_message"):
        messages.append({"role": "assistant", "content": state["last_message"]})
    messages.append({"role": "user", "content": ctx.task.get("completePrompt") or "Check in on me."})
    ctx.scratch["follow_up"] = not (ctx.task.get("metadata") or {}).get("followUpOf")
    return {"messages": messages, "tools": TOOLS, "tool_choice": "auto", "max_tool_iterations": 4}


def on_llm_output(ctx: HookContext) -> Decision:
    message = ctx.llm_response["choices"][0]["message"]
    if message.get("tool_calls"):
        return {"decision": "tool-request", "tool_calls": message["tool_calls"]}
    text = (ctx.llm_output_text or "").strip()
    if not text:
        return {"decision": "skip-push"}
    ctx.write_state(NAMESPACE, "last_message", text)
    if ctx.scratch.get("follow_up"):
        first = datetime.fromtimestamp((ctx.now + FOLLOW_UP_AFTER_MS) / 1000, UTC).isoformat()
        ctx.schedule_task({"firstSendTime": first, "metadata": {"followUpOf": ctx.task_uuid}})
    return {
        "decision": "finish",
        "push_payloads": [
            {
                "messageKind": "content",
                "messageType": ctx.task.get("messageType"),
                "source": "scheduled",
                "title": f"来自 {ctx.contact_name}",
                "contactName": ctx.contact_name,
                "avatarUrl": ctx.avatar_url,
                "message": text,
            }
        ],
    }


def execute_tool_calls(calls: list[dict], ctx: HookContext) -> list[dict]:
    results = []
    for call in calls:
        name = call.get("function", {}).get("name")
        if name == "get_local_time":
            zone = ZoneInfo(ctx.task.get("tzId") or "UTC")
            content = datetime.fromtimestamp(ctx.now / 1000, zone).strftime("%A %H:%M")
        elif name == "recall":
            key = json.loads(call["function"].get("arguments") or "{}").get("key", "")
            content = ctx.read_state(NAMESPACE, key) or "nothing stored"
        else:
            content = f"unknown tool {name}"
        results.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": content})
    return results


def on_fire_settled(ctx: HookContext) -> None:
    log.info(
        "fire settled",
        extra={
            "status": ctx.status,
            "iterations": ctx.iterations,
            "usage": ctx.usage_total,
            "willRetry": ctx.will_retry,
        },
    )
