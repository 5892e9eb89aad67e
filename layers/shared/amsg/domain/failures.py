"""Delivery failures: how one delivery attempt ends when it does not succeed.

These live apart from :mod:`amsg.errors` on purpose. That module is the HTTP catalogue (``ApiError`` becomes a
response envelope) plus store exceptions; a delivery failure never reaches a client as such. The engine turns it
into ``last_error {reason, errorCode, pushStatus}`` and a retry-or-terminal decision, and that decision reads the
*attributes* (``permanent``, ``code``), never the class, exactly like the reference's duck typing. Subclasses only
exist so adapters and tests can say which step failed.

Messages must never carry an API key or prompt text: builders of these exceptions redact upstream text first.
"""

from __future__ import annotations

LLM_CALL_FAILED = "LLM_CALL_FAILED"
CREDENTIAL_MISSING = "CREDENTIAL_MISSING"


class DeliveryFailure(Exception):
    """A failed delivery step: ``permanent`` stops the retry ladder, ``code`` is ``lastError.errorCode``."""

    def __init__(self, message: str, *, code: str | None = None, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.permanent = permanent


class NonRetryableError(DeliveryFailure):
    """For hosts (hooks): a failure that retrying cannot fix. Detected by ``permanent``, never by class."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message, code=code, permanent=True)


class LlmCallError(DeliveryFailure):
    """The LLM step failed: upstream rejection, unusable reply, timeout or network error.

    ``llm_status`` is set only when the upstream actually answered (it is the HTTP status, kept apart from any
    push status so an LLM 404/413 is never mistaken for a gone push subscription). ``code`` is
    ``LLM_CALL_FAILED`` for upstream answers and ``None`` for timeouts, network errors and empty content (the
    reference's plain errors, always retryable).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = LLM_CALL_FAILED,
        llm_status: int | None = None,
        permanent: bool = False,
        provider_code: str | None = None,
    ) -> None:
        super().__init__(message, code=code, permanent=permanent)
        self.llm_status = llm_status
        self.provider_code = provider_code
