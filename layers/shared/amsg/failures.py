"""Delivery failures: how one delivery attempt ends when it does not succeed (a leaf module: it imports
nothing from the package, so ports, domain, engine and adapters can all raise these).

These live apart from :mod:`amsg.errors` on purpose. That module is the HTTP catalogue (``ApiError`` becomes a
response envelope) plus store exceptions; a delivery failure never reaches a client as such. The engine turns it
into ``last_error {reason, errorCode, pushStatus}`` and a retry-or-terminal decision, and that decision reads the
*attributes* (``permanent``, ``code``), never the class, exactly like the reference's duck typing. Subclasses only
exist so adapters and tests can say which step failed.

Messages must never carry an API key or prompt text: builders of these exceptions redact upstream text first.
"""

from __future__ import annotations

from typing import Any

LLM_CALL_FAILED = "LLM_CALL_FAILED"
CREDENTIAL_MISSING = "CREDENTIAL_MISSING"


class ClaimTaken(Exception):
    """Another run adopted this claim and still holds its lease: this delivery of the same SQS message (sent
    twice, or redelivered while the first is still running) must do nothing at all."""


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


PERMANENT_PUSH_STATUSES = frozenset({404, 410, 413})
"""Push-service statuses that retrying cannot fix (subscription gone, payload rejected as too large)."""


def is_permanent_push_status(status: int | None) -> bool:
    """404/410/413 are permanent; other failures (VAPID 400/401/403, 408/409/425/429, 5xx, network) retry."""
    return status in PERMANENT_PUSH_STATUSES


class PushSendError(Exception):
    """A push was not accepted. Carries no endpoint, key or payload text.

    * ``code``: ``PUSH_SEND_FAILED`` (push service answered non-2xx, or network error/timeout),
      ``PUSH_PAYLOAD_TOO_LARGE`` (plaintext over :data:`amsg.ports.MAX_PUSH_PAYLOAD_BYTES`; raised before any encryption
      or HTTP), or ``PUSH_SUBSCRIPTION_INVALID`` (stored subscription lacks a usable endpoint/p256dh/auth;
      retryable, since the client can PUT a fresh one).
    * ``status``: the push service's HTTP status, or ``None`` when no response was received. Only this value
      may become the engine's ``pushStatus``.
    * ``permanent``: the reference's permanent-status classification (404, 410, ...), already applied.
    * ``details``: ``{"bytes", "maxBytes"}`` for ``PUSH_PAYLOAD_TOO_LARGE``, else ``None``.
    * ``unconfirmed``: the request left (whole or in part) and no answer came (read or write timeout, reset,
      a broken response): the push service may have accepted it, so it must never be sent again
      (docs/delivery.md). False when nothing of the request was sent (DNS, connect, pool) or an answer came.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "PUSH_SEND_FAILED",
        status: int | None = None,
        permanent: bool | None = None,
        details: dict[str, Any] | None = None,
        unconfirmed: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.permanent = is_permanent_push_status(status) if permanent is None else permanent
        self.details = details
        self.unconfirmed = unconfirmed and status is None
