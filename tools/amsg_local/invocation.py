"""What one Lambda invocation returns, shared by the in-process and the process sandboxes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LAMBDA_SYNC_PAYLOAD_LIMIT", "Invocation"]

# Lambda's synchronous invocation limit for the request and the response payload (6 MB).
LAMBDA_SYNC_PAYLOAD_LIMIT = 6 * 1024 * 1024


@dataclass
class Invocation:
    """The outcome of one invocation: ``value`` when ok, else an ``error_type`` like Lambda's ``errorType``."""

    function: str
    request_id: str
    duration_ms: float
    value: Any = None
    error_type: str | None = None
    error_message: str | None = None
    timed_out: bool = False
    handler_ms: float | None = None  # the handler's own time (without sandbox, thread and gateway overhead)

    @property
    def ok(self) -> bool:
        return self.error_type is None
