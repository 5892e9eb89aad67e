"""The request as our API functions see it, built from an API Gateway HTTP API (payload v2) event."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, str] = field(default_factory=dict)
    raw_body: bytes = b""
    text_body: str | None = None  # set by read_body() for POST/PUT/DELETE
    # the Lambda's remaining time (ms), when the request runs in one: the instant path answers within it
    remaining_ms: Callable[[], int] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_v2_event(cls, event: Mapping[str, Any]) -> ApiRequest:
        http = (event.get("requestContext") or {}).get("http") or {}
        headers: dict[str, str] = {}
        for name, value in (event.get("headers") or {}).items():
            key = str(name).lower()
            if key not in headers:
                # API Gateway joins repeated headers with commas; the reference uses the first value
                headers[key] = str(value)
        body = event.get("body")
        if body is None:
            raw = b""
        elif event.get("isBase64Encoded"):
            raw = base64.b64decode(body)
        else:
            raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        return cls(
            method=str(http.get("method") or "GET").upper(),
            path=str(event.get("rawPath") or http.get("path") or "/"),
            headers=headers,
            query=_first_values(event.get("rawQueryString") or "", event.get("queryStringParameters")),
            raw_body=raw,
        )

    def header(self, name: str) -> str | None:
        """Case-insensitive lookup, value trimmed (the reference trims every header it reads)."""
        value = self.headers.get(name.lower())
        return None if value is None else value.strip()

    def param(self, name: str) -> str | None:
        return self.query.get(name)


def _first_values(raw_query: str, params: Mapping[str, str] | None) -> dict[str, str]:
    """``URLSearchParams.get`` semantics: the first occurrence of each name wins."""
    out: dict[str, str] = {}
    if raw_query:
        for key, value in parse_qsl(raw_query, keep_blank_values=True):
            out.setdefault(key, value)
        return out
    for key, value in (params or {}).items():
        out[key] = str(value).split(",")[0] if value is not None else ""
    return out
