"""OpenAI-compatible chat call rules (the reference's): everything except the HTTP itself.

The adapter only moves bytes; URL normalization, body composition, reply parsing, reasoning extraction, upstream
error wording and permanent/retryable classification live here so they are testable without a socket and
identical for the scheduled and instant paths.

Error messages follow the reference wording. Upstream text is whitespace-collapsed, credential-redacted and cut
to 300 characters before it enters a message, and the caller's literal API key is scrubbed from the whole
message, so these exceptions are safe to persist in ``last_error`` (which sanitizes again) and to log.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from amsg import jsonio
from amsg.domain.redaction import redact_credentials
from amsg.failures import CREDENTIAL_MISSING, DeliveryFailure, LlmCallError
from amsg.jsonio import JsonObject
from amsg.ports import LlmRequest

DEFAULT_TEMPERATURE = 0.8
LLM_TIMEOUT_S = 300.0
"""Per-call ceiling of the legacy path; callers pass min(this, remaining Lambda time)."""

PERMANENT_LLM_STATUSES = frozenset({400, 401, 402, 403, 404, 405, 413, 422})
"""Upstream rejections that a retry cannot fix (bad key, unknown model, oversize request...)."""

ERROR_BODY_MAX_BYTES = 16 * 1024
"""Only this much of a non-2xx body is read: the envelope is at the front; relays may echo the whole prompt."""

DETAIL_MAX_CHARS = 300
PROVIDER_CODE_MAX_CHARS = 64
NON_COMPLETION_KEYS_MAX = 10
MIN_SCRUB_SECRET_CHARS = 8

EMPTY_BODY_NOTE = "response body is empty"
SSE_BODY_NOTE = "response body looks like an SSE stream (the endpoint ignored stream: false)"
TRUNCATED_BODY_NOTE = "upstream error body was truncated before any readable message"
MISSING_CONTENT_MESSAGE = "AI API error: response missing choices[0].message.content"
EMPTY_AFTER_REASONING_MESSAGE = "AI API error: response content empty after removing reasoning"

_VERSION_TAIL = re.compile(r"/v\d+$")
_THINK_SPAN = re.compile(r"<(think|thinking|thought)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)
_WHITESPACE = re.compile(r"\s+")
_SSE_FIELD_LINE = re.compile(r"^(?:data|event|id|retry):", re.IGNORECASE | re.MULTILINE)
_SALVAGE_FIELD = re.compile(r'"(message|detail|code|status|type)"\s*:\s*"((?:[^"\\]|\\.)*)"')


# ---------------------------------------------------------------------------------------------------------
# URL and request body


def normalize_api_url(url: object) -> str:
    """Turn what users paste (bare host, ``…/v1``) into the chat endpoint; idempotent; query kept."""
    text = "" if url is None else str(url)
    trimmed = text.strip()
    if not trimmed:
        raise DeliveryFailure(
            "Invalid apiUrl: apiUrl is required. Please provide a chat endpoint URL "
            "(for example: https://api.openai.com or https://api.openai.com/v1/chat/completions)."
        )
    try:
        parts = urlsplit(trimmed)
    except ValueError:
        parts = None
    if parts is None or not parts.scheme or not parts.netloc:
        # Like a WHATWG URL parse failure: no scheme or no authority is not an absolute URL we can POST to.
        raise DeliveryFailure(f'Invalid apiUrl: "{text}". Please provide a valid absolute URL.')

    path = parts.path.rstrip("/") or "/"
    if path.endswith("/chat/completions"):
        pass
    elif path == "/":
        path = "/v1/chat/completions"
    elif _VERSION_TAIL.search(path):
        path = f"{path}/chat/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def build_chat_body(payload: Mapping[str, Any]) -> JsonObject:
    """Compose the chat-completions body.

    ``llmExtraBody`` goes first so the engine's keys win, but only the keys the engine actually sets: an extra
    ``temperature``/``max_tokens``/``tools``/``tool_choice``/``stream`` survives when the engine leaves that
    key out (reference QUIRK, kept for wire parity). ``primaryModel`` is read from ``payload``; callers merge
    resolved credentials into a copy first (see :func:`build_llm_request`).
    """
    extra = payload.get("llmExtraBody")
    body: JsonObject = dict(extra) if isinstance(extra, dict) else {}

    raw_messages = payload.get("messages")
    body["model"] = payload.get("primaryModel")
    if isinstance(raw_messages, list) and raw_messages:
        body["messages"] = raw_messages
    else:
        body["messages"] = [{"role": "user", "content": payload.get("completePrompt")}]

    temperature = payload.get("temperature")
    if temperature is not None:
        body["temperature"] = temperature
    elif not isinstance(raw_messages, list):
        # Only the completePrompt path gets the default; an (even empty) messages array means "as the app set".
        body["temperature"] = DEFAULT_TEMPERATURE

    tools = payload.get("tools")
    if isinstance(tools, list) and tools:
        body["tools"] = tools
        if payload.get("toolChoice") is not None:
            body["tool_choice"] = payload["toolChoice"]

    max_tokens = payload.get("maxTokens")
    if max_tokens is not None:
        body["max_tokens"] = _positive_int(max_tokens)
    return body


def _positive_int(value: object) -> int:
    """JS ``Number.isInteger`` semantics: 5 and 5.0 pass, booleans/strings/fractions do not."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        number = None
    elif isinstance(value, float):
        number = int(value) if value.is_integer() else None
    else:
        number = value
    if number is None or number <= 0:
        raise DeliveryFailure("Invalid maxTokens: maxTokens must be a positive integer when provided.")
    return number


# ---------------------------------------------------------------------------------------------------------
# Credentials: the task's own apiKey, or a credRef resolved from the user's stored LLM credentials


@dataclass(frozen=True)
class ChatCredentials:
    """The resolved triple; ``repr`` hides the key so a stray log line cannot leak it."""

    api_url: str
    api_key: str = field(repr=False)
    primary_model: str


CredentialLookup = Callable[[str], Mapping[str, Any] | None]
"""``cred_id -> {apiUrl, apiKey, primaryModel}`` or ``None`` when absent/undecryptable. Store errors propagate."""

_NEEDS_CREDENTIALS = frozenset({"prompted", "auto"})


def _triple(source: Mapping[str, Any] | None) -> ChatCredentials | None:
    if not isinstance(source, Mapping):
        return None
    url, key, model = source.get("apiUrl"), source.get("apiKey"), source.get("primaryModel")
    if not (url and key and model):
        return None
    return ChatCredentials(api_url=str(url), api_key=str(key), primary_model=str(model))


def resolve_chat_credentials(payload: Mapping[str, Any], lookup: CredentialLookup | None) -> ChatCredentials | None:
    """Pick the credentials for the chat call without touching the payload.

    With a non-empty ``credRefs.chat`` the stored credential wins when complete, else a complete inline triple,
    else ``CREDENTIAL_MISSING``. Without a ref, prompted/auto tasks need the inline triple (else
    ``CREDENTIAL_MISSING``); other types get the inline triple or ``None`` (instant then falls back to
    ``userMessage``). ``lookup=None`` means the deployment has no credential store. The failure is retryable:
    the task heals once the credential is PUT again.
    """
    inline = _triple(payload)
    refs = payload.get("credRefs")
    ref = refs.get("chat") if isinstance(refs, Mapping) else None
    if isinstance(ref, str) and ref:
        stored = _triple(lookup(ref)) if lookup is not None else None
        if stored is not None:
            return stored
        if inline is not None:
            return inline
        raise DeliveryFailure(
            f'{CREDENTIAL_MISSING}: chat credential "{ref}" is missing or incomplete and the task has no '
            "complete inline apiUrl/apiKey/primaryModel",
            code=CREDENTIAL_MISSING,
        )
    if inline is None and payload.get("messageType") in _NEEDS_CREDENTIALS:
        raise DeliveryFailure(
            f"{CREDENTIAL_MISSING}: the task has no credRefs.chat and no complete inline apiUrl/apiKey/primaryModel",
            code=CREDENTIAL_MISSING,
        )
    return inline


def build_llm_request(
    payload: Mapping[str, Any], credentials: ChatCredentials, *, require_content: bool = True
) -> LlmRequest:
    """Merge resolved credentials into the request only (never back into the payload) and compose it."""
    merged = {**payload, "primaryModel": credentials.primary_model}
    return LlmRequest(
        url=normalize_api_url(credentials.api_url),
        api_key=credentials.api_key,
        body=build_chat_body(merged),
        require_content=require_content,
    )


# ---------------------------------------------------------------------------------------------------------
# Classification and upstream errors


def classify_llm_status(status: int) -> bool:
    """True when an upstream HTTP status is a permanent rejection; everything else (429, 5xx, 2xx…) retries."""
    return status in PERMANENT_LLM_STATUSES


def _clamp_detail(text: object) -> str:
    flat = _WHITESPACE.sub(" ", "" if text is None else str(text)).strip()
    safe = redact_credentials(flat)
    return safe if len(safe) <= DETAIL_MAX_CHARS else safe[: DETAIL_MAX_CHARS - 1] + "…"


def _clamp_code(code: object) -> str:
    return _WHITESPACE.sub(" ", "" if code is None else str(code)).strip()[:PROVIDER_CODE_MAX_CHARS]


def _first_text(*values: object) -> str:
    for value in values:
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _first_integer(*values: object) -> str:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
    return ""


def envelope_detail(body: object, *, fallback_message: str = "", keep_numeric_code: bool = False) -> tuple[str, str]:
    """(message, provider code) from the usual error envelopes: OpenAI, Anthropic, Gemini, ``{code, msg}``.

    Numeric codes are kept only for 2xx bodies: on a non-2xx they merely repeat the HTTP status.
    """
    envelope = body if isinstance(body, dict) else {}
    raw_error = envelope.get("error")
    inner = raw_error if isinstance(raw_error, dict) else {}
    message = (
        _first_text(
            inner.get("message"),
            raw_error if isinstance(raw_error, str) else "",
            envelope.get("message"),
            envelope.get("msg"),
            envelope.get("detail"),
        )
        or fallback_message
    )
    code = _first_text(inner.get("code"), inner.get("status"), inner.get("type"), envelope.get("code"))
    if not code and keep_numeric_code:
        code = _first_integer(inner.get("code"), envelope.get("code"))
    return _clamp_detail(message), _clamp_code(code)


def _salvage_truncated(raw: str) -> tuple[str, str]:
    """Pull string fields out of a JSON prefix cut at the read cap; the first occurrence of each name wins."""
    found: dict[str, str] = {}
    for match in _SALVAGE_FIELD.finditer(raw):
        name = match.group(1)
        if name in found:
            continue
        try:
            value = jsonio.loads(f'"{match.group(2)}"')
        except ValueError:
            value = match.group(2)
        if name == "type" and value == "error":
            continue  # Anthropic's outer discriminator, not an error category
        found[name] = value
    return (
        _first_text(found.get("message"), found.get("detail")),
        _first_text(found.get("code"), found.get("status"), found.get("type")),
    )


def error_body_detail(raw: str, *, truncated: bool = False) -> tuple[str, str]:
    """(message, provider code) for a non-2xx body read up to :data:`ERROR_BODY_MAX_BYTES`."""
    if not raw.strip():
        return "", ""
    try:
        parsed = jsonio.loads(raw)
    except ValueError:
        if truncated and raw.lstrip()[:1] in ("{", "["):
            message, code = _salvage_truncated(raw)
            return _clamp_detail(message or TRUNCATED_BODY_NOTE), _clamp_code(code)
        return _clamp_detail(raw), ""
    return envelope_detail(parsed, fallback_message=raw)


def scrub_secret(message: str, secret: str | None) -> str:
    """Remove the caller's own key even where the shape-based redaction would not recognise it."""
    if secret and len(secret) >= MIN_SCRUB_SECRET_CHARS:
        message = message.replace(secret, "[redacted]")
    return message


def _upstream_error(
    summary: str, status: int, detail: tuple[str, str], *, api_key: str | None, permanent: bool
) -> LlmCallError:
    message, code = detail
    text = summary + (f" — {message}" if message else "") + (f" (provider code: {code})" if code else "")
    return LlmCallError(
        scrub_secret(text, api_key),
        llm_status=status,
        permanent=permanent,
        provider_code=scrub_secret(code, api_key) or None,
    )


def _safe_url(url: str, api_key: str | None) -> str:
    # A few providers take the key in the query string; the URL goes into a persisted message.
    return scrub_secret(redact_credentials(url), api_key)


def upstream_status_error(
    status: int,
    reason_phrase: str,
    url: str,
    raw_body: str,
    *,
    truncated: bool = False,
    api_key: str | None = None,
) -> LlmCallError:
    """The error for a non-2xx answer; permanent iff the status is in :data:`PERMANENT_LLM_STATUSES`."""
    shown = _safe_url(url, api_key)
    if status == 405:
        summary = (
            "AI API error: 405 Method Not Allowed. apiUrl must point to a full chat endpoint "
            f"(for example: /chat/completions). Received: {shown}"
        )
    else:
        summary = f"AI API error: {status} {reason_phrase or 'Unknown Error'}. Request URL: {shown}"
    detail = error_body_detail(raw_body, truncated=truncated)
    return _upstream_error(summary, status, detail, api_key=api_key, permanent=classify_llm_status(status))


def _unparsable_detail(raw: str) -> tuple[str, str]:
    trimmed = raw.strip()
    if not trimmed:
        return EMPTY_BODY_NOTE, ""
    if trimmed.startswith(":") or _SSE_FIELD_LINE.search(trimmed):
        return SSE_BODY_NOTE, ""  # the stream is generated chat text: never echo it
    return _clamp_detail(raw), ""


def _shape_note(data: object) -> str:
    if isinstance(data, list):
        return "response body is a JSON array"
    if isinstance(data, dict):
        keys = list(data)
        if not keys:
            return "response body is an empty object"
        more = ", …" if len(keys) > NON_COMPLETION_KEYS_MAX else ""
        return "top-level keys: " + ", ".join(str(k) for k in keys[:NON_COMPLETION_KEYS_MAX]) + more
    if data is None:
        return "response body is null"
    kind = {bool: "boolean", str: "string"}.get(type(data), "number")
    return f"response body is a JSON {kind}"


def _non_completion_detail(data: object) -> tuple[str, str]:
    message, code = envelope_detail(data, keep_numeric_code=True)
    if message or code:
        return message, code
    # Shape only: a well-formed reply of another API (e.g. Anthropic /v1/messages) carries generated text.
    return _clamp_detail(_shape_note(data)), ""


# ---------------------------------------------------------------------------------------------------------
# Successful replies


def extract_reply(json_body: object, *, require_content: bool = True) -> tuple[str, str | None]:
    """(content, reasoning) from a parsed chat completion; empty content after reasoning is a retryable failure.

    Reasoning is ``reasoning_content`` or the first ``<think>``/``<thinking>``/``<thought>`` span; when found,
    every such span is removed from the content. Blank content fails (retryable, no code) when required, and so
    does content that is blank once reasoning is removed: we never push an empty message.
    """
    message = _first_message(json_body)
    raw_content = message.get("content")
    content = raw_content.strip() if isinstance(raw_content, str) else ""
    if require_content and not content:
        raise LlmCallError(MISSING_CONTENT_MESSAGE, code=None)

    reasoning: str | None = None
    reasoning_content = message.get("reasoning_content")
    if isinstance(reasoning_content, str) and reasoning_content.strip():
        reasoning = reasoning_content.strip()
    else:
        span = _THINK_SPAN.search(content)
        if span and span.group(2).strip():
            reasoning = span.group(2).strip()
    if reasoning is not None:
        content = _THINK_SPAN.sub("", content).strip()
        if require_content and not content:
            raise LlmCallError(EMPTY_AFTER_REASONING_MESSAGE, code=None)
    return content, reasoning


def _first_message(json_body: object) -> JsonObject:
    choices = json_body.get("choices") if isinstance(json_body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    return message if isinstance(message, dict) else {}


def parse_completion(
    status: int,
    url: str,
    raw_text: str,
    *,
    require_content: bool = True,
    api_key: str | None = None,
) -> tuple[JsonObject, str, str | None]:
    """Validate a 2xx body and return (parsed response, content, reasoning).

    A 2xx is not yet a completion: relays wrap errors in 200 bodies and proxies return HTML. Those raise
    ``LLM_CALL_FAILED`` with ``llm_status`` = the 2xx, which is retryable, whatever ``require_content`` says.
    """
    shown = _safe_url(url, api_key)
    try:
        data = jsonio.loads(raw_text)
    except ValueError:
        summary = f"AI API error: HTTP {status} but body is not valid JSON. Request URL: {shown}"
        raise _upstream_error(summary, status, _unparsable_detail(raw_text), api_key=api_key, permanent=False) from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(choices, list) or not choices:
        summary = f"AI API error: HTTP {status} but body is not a chat completion (no choices). Request URL: {shown}"
        raise _upstream_error(summary, status, _non_completion_detail(data), api_key=api_key, permanent=False)
    content, reasoning = extract_reply(data, require_content=require_content)
    return data, content, reasoning
