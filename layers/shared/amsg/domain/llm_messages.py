"""Shape rules of an OpenAI-style ``messages`` array in a schedule or update request (the reference's messages)."""

from __future__ import annotations

from typing import Any

from amsg.domain.jsvalues import is_plain_object, js_truthy

__all__ = ["LLM_MESSAGE_ROLES", "validate_messages_array"]

LLM_MESSAGE_ROLES = ("system", "user", "assistant", "tool")


def validate_messages_array(value: Any) -> str | None:
    """The push-subscription shape rules; returns the reference's English message for the first problem, or None."""
    if not isinstance(value, list) or not value:
        return "messages must be a non-empty array"
    for i, message in enumerate(value):
        problem = _message_problem(i, message)
        if problem is not None:
            return problem
    return None


def _message_problem(i: int, message: Any) -> str | None:
    if not is_plain_object(message):
        return f"messages[{i}] must be an object"
    role = message.get("role")
    if not isinstance(role, str) or role not in LLM_MESSAGE_ROLES:
        return f"messages[{i}].role must be one of system / user / assistant / tool"
    tool_calls = message.get("tool_calls")
    if role == "assistant" and isinstance(tool_calls, list) and tool_calls:
        # An assistant turn that carries tool calls may have empty content (agentic replay).
        return _tool_calls_problem(i, tool_calls)
    content = message.get("content")
    if role == "tool":
        # Empty tool output is legitimate (a search with no hits), but the reference id is mandatory.
        if not isinstance(content, str | list):
            return f"messages[{i}].content (tool) must be a string or an array"
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            return f"messages[{i}].tool_call_id is required (tool messages must reference a prior tool_call)"
        return None
    return _content_problem(i, content)


def _tool_calls_problem(i: int, tool_calls: list[Any]) -> str | None:
    for j, call in enumerate(tool_calls):
        if not is_plain_object(call) or not isinstance(call.get("id"), str) or not js_truthy(call.get("function")):
            return (
                f"messages[{i}].tool_calls[{j}] is malformed "
                "(expected { id, type:'function', function:{ name, arguments } })"
            )
    return None


def _content_problem(i: int, content: Any) -> str | None:
    if isinstance(content, str):
        return None if content else f"messages[{i}].content must be a non-empty string"
    if isinstance(content, list):
        return None if content else f"messages[{i}].content array must be non-empty"
    return f"messages[{i}].content must be a non-empty string or a non-empty array"
