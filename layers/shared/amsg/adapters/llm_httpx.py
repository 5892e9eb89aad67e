"""LlmClient over httpx: the only module that talks HTTP to an LLM provider.

It moves bytes and maps transport outcomes onto :class:`~amsg.failures.LlmCallError`; all wording,
parsing and classification come from :mod:`amsg.domain.llm`. Timeouts and network errors are retryable and
carry no code or status (the upstream never answered). Nothing here logs, and no message includes the key.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType

import httpx

from amsg import jsonio
from amsg.domain.llm import ERROR_BODY_MAX_BYTES, parse_completion, scrub_secret, upstream_status_error
from amsg.domain.redaction import redact_credentials
from amsg.failures import LlmCallError
from amsg.observability import emit_metric, status_class
from amsg.ports import LlmReply, LlmRequest


class HttpxLlmClient:
    """One pooled ``httpx.Client`` per instance, built on first use (never at import or construction)."""

    def __init__(self, *, transport: httpx.BaseTransport | None = None) -> None:
        self._transport = transport  # tests may inject httpx.MockTransport; None means real sockets
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(transport=self._transport, follow_redirects=False)
            return self._client

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> HttpxLlmClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def complete(self, request: LlmRequest, *, timeout_s: float) -> LlmReply:
        """POST ``request.body``; ``timeout_s`` bounds connect, each read, and the body download as a whole.

        Each call is measured (``LlmLatency`` in ms, dimension ``Outcome``: ok, timeout, network, 4xx, 5xx).
        """
        started = time.monotonic()
        outcome = "ok"
        try:
            return self._complete(request, timeout_s=timeout_s)
        except LlmCallError as exc:
            # _timeout_error below is the only failure worded "timed out"; upstream answers carry their status
            outcome = "timeout" if "request timed out" in str(exc) else status_class(exc.llm_status)
            raise
        finally:
            if timeout_s > 0:
                emit_metric("LlmLatency", "Milliseconds", (time.monotonic() - started) * 1000, Outcome=outcome)

    def _complete(self, request: LlmRequest, *, timeout_s: float) -> LlmReply:
        if timeout_s <= 0:
            raise _timeout_error(request, timeout_s)
        deadline = time.monotonic() + timeout_s
        content = jsonio.dumps(request.body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {request.api_key}"}
        try:
            with self._http().stream(
                "POST", request.url, content=content, headers=headers, timeout=httpx.Timeout(timeout_s)
            ) as response:
                status = response.status_code
                if not 200 <= status < 300:
                    raw, truncated = _read_capped(response, deadline)
                    raise upstream_status_error(
                        status,
                        response.reason_phrase,
                        request.url,
                        raw.decode("utf-8", errors="replace"),
                        truncated=truncated,
                        api_key=request.api_key,
                    )
                body = _read_all(response, deadline)
        except httpx.TimeoutException:
            raise _timeout_error(request, timeout_s) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise _network_error(request, exc) from None

        data, text, reasoning = parse_completion(
            status,
            request.url,
            body.decode("utf-8", errors="replace"),
            require_content=request.require_content,
            api_key=request.api_key,
        )
        return LlmReply(content=text, reasoning=reasoning, raw_status=status, response=data)


def _read_capped(response: httpx.Response, deadline: float) -> tuple[bytes, bool]:
    """Read at most ERROR_BODY_MAX_BYTES of an error body; a failed read only loses the detail."""
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= ERROR_BODY_MAX_BYTES or time.monotonic() > deadline:
                break
    except httpx.HTTPError:
        pass  # the status is what we report; a broken body must not mask it
    raw = b"".join(chunks)
    return raw[:ERROR_BODY_MAX_BYTES], size >= ERROR_BODY_MAX_BYTES


def _read_all(response: httpx.Response, deadline: float) -> bytes:
    """Read the whole success body, but not past the caller's deadline (a trickling server cannot stall us)."""
    chunks: list[bytes] = []
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("response body not complete before the deadline")
    return b"".join(chunks)


def _safe(text: str, request: LlmRequest) -> str:
    return scrub_secret(redact_credentials(text), request.api_key)


def _timeout_error(request: LlmRequest, timeout_s: float) -> LlmCallError:
    return LlmCallError(
        _safe(f"AI API error: request timed out after {max(timeout_s, 0):.1f}s. Request URL: {request.url}", request),
        code=None,
    )


def _network_error(request: LlmRequest, exc: Exception) -> LlmCallError:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return LlmCallError(
        _safe(f"AI API error: network error ({reason}). Request URL: {request.url}", request),
        code=None,
    )
