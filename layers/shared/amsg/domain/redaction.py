"""Credential redaction for persisted and logged error text: no API key may reach a row or a log.

``last_error.reason`` is shown to clients and provider errors often echo the API key or a bearer token, so
every summary goes through :func:`sanitize_error_summary`. The redaction is shape-based and deliberately
spares strings that look like model ids (``gpt-4o-mini-2024-07-18``): "model X does not exist" is the most
useful error a user can get, and a model id shares the ``word-dash-long-tail`` shape with most keys.
"""

from __future__ import annotations

import math
import re

from amsg.domain.jsvalues import JS_WHITESPACE, utf16_len

__all__ = ["SUMMARY_MAX_UNITS", "looks_like_model_id", "redact_credentials", "sanitize_error_summary"]

SUMMARY_MAX_UNITS = 500
_ELLIPSIS = "…"
_REDACTED = "[redacted]"

_WS_CLASS = "[" + re.escape(JS_WHITESPACE) + "]"
_WHITESPACE_RUN = re.compile(_WS_CLASS + "+")
# JS regexes without the `u` flag: \b and case folding are ASCII-only, hence re.ASCII.
_BEARER = re.compile(r"Bearer" + _WS_CLASS + r"+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE | re.ASCII)
_PREFIXED_TOKEN = re.compile(r"\b[A-Za-z]{2,6}-[A-Za-z0-9_-]{16,}", re.ASCII)
_LONG_RUN = re.compile(r"[A-Za-z0-9+/_.-]{48,}")

_MODEL_ID_MAX_CHARS = 64
_MODEL_ID_SHAPE = re.compile(r"[a-z][a-z0-9]{0,11}(?:[.-][a-z0-9]{1,12})+")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_SEGMENT_SPLIT = re.compile(r"[.-]")
_HEX_SEGMENT = re.compile(r"[0-9a-f]+")
_LETTER_DIGIT_BLOCK = re.compile(r"[a-z]+|[0-9]+")
_MOE_SIZE = re.compile(r"[0-9]+x[0-9]+b")
# Prefixes that real keys carry (sk-…, gsk_…, xai-…); a model id never starts with one of these.
_SECRET_PREFIXES = frozenset(
    {
        "sk",
        "pk",
        "ak",
        "api",
        "apikey",
        "key",
        "token",
        "secret",
        "auth",
        "bearer",
        "session",
        "sess",
        "pat",
        "xai",
        "gsk",
    }
)
_MAX_HEX_RUN_CHARS = 15
_MAX_BLOCK_ALTERNATIONS = 2  # "fewer than 3" letter/digit alternations per segment


def looks_like_model_id(token: str) -> bool:
    """Whether ``token`` is shaped like a model name rather than a secret (the reference's predicate).

    Model ids are short lowercase words and version numbers (``claude-3-5-sonnet-20241022``); secrets are long,
    mixed-case, hex-heavy or letter/digit soup. A MoE size such as ``8x7b`` is the one soup-like segment allowed.
    """
    if len(token) > _MODEL_ID_MAX_CHARS or not _MODEL_ID_SHAPE.fullmatch(token):
        return False
    if _UUID.search(token):
        return False
    segments = _SEGMENT_SPLIT.split(token)
    if segments[0] in _SECRET_PREFIXES:
        return False
    hex_run = 0
    for segment in segments:
        hex_run = hex_run + len(segment) if _HEX_SEGMENT.fullmatch(segment) else 0
        if hex_run > _MAX_HEX_RUN_CHARS:
            return False
        alternations = len(_LETTER_DIGIT_BLOCK.findall(segment)) - 1
        if alternations > _MAX_BLOCK_ALTERNATIONS and not _MOE_SIZE.fullmatch(segment):
            return False
    return True


def _redact_token(match: re.Match[str]) -> str:
    token = match.group(0)
    return token if looks_like_model_id(token) else _REDACTED


def _redact_run(match: re.Match[str]) -> str:
    run = match.group(0)
    return run if looks_like_model_id(run.strip("._+/-")) else _REDACTED


def redact_credentials(text: str) -> str:
    """Replace bearer tokens, ``prefix-longtail`` keys and long base64-ish runs by ``[redacted]`` (in this order)."""
    text = _BEARER.sub("Bearer [redacted]", text)
    text = _PREFIXED_TOKEN.sub(_redact_token, text)
    return _LONG_RUN.sub(_redact_run, text)


def _js_string(value: object) -> str:
    """``String(value ?? '')`` for the values a failure reason can be."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
    return str(value)


def _truncate_utf16(text: str, keep_units: int) -> str:
    """The longest prefix of at most ``keep_units`` UTF-16 units, never splitting a surrogate pair."""
    units = 0
    for index, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > keep_units:
            return text[:index]
    return text


def sanitize_error_summary(value: object) -> str:
    """The ``last_error.reason`` form of a failure: one line, redacted, at most 500 UTF-16 units.

    Longer text keeps its first 497 units plus ``…``. Where JS would cut an emoji in half, the whole emoji is
    dropped instead (a lone surrogate cannot be stored or sent as JSON text).
    """
    text = _WHITESPACE_RUN.sub(" ", _js_string(value)).strip(" ")
    text = redact_credentials(text)
    if utf16_len(text) > SUMMARY_MAX_UNITS:
        text = _truncate_utf16(text, SUMMARY_MAX_UNITS - 3) + _ELLIPSIS
    return text
