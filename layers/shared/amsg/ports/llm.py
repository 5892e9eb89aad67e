"""The LLM port."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from amsg.jsonio import JsonObject

# ---------------------------------------------------------------------------------------------------------
# LLM. The port raises amsg.failures.LlmCallError for every
# failure: delivery code reads only its ``permanent``/``code``/``llm_status``, never a transport's errors.


@dataclass
class LlmRequest:
    """One chat-completions call: normalized URL, resolved key, composed body (see amsg.domain.llm)."""

    url: str
    api_key: str = field(repr=False)
    body: JsonObject = field(repr=False)
    # False for agentic rounds: a reply with only tool_calls is legitimate there.
    require_content: bool = True


@dataclass
class LlmReply:
    """Trimmed content, extracted reasoning, the 2xx status; ``response`` is for agentic tool_calls."""

    content: str
    reasoning: str | None
    raw_status: int
    response: JsonObject = field(default_factory=dict, repr=False)


class LlmClient(Protocol):
    def complete(self, request: LlmRequest, *, timeout_s: float) -> LlmReply:
        """POST the request within ``timeout_s`` (the caller's remaining budget); raises LlmCallError."""
        ...
