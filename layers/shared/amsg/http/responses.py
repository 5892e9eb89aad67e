"""Response envelopes (the reference's ``{success, data | error}``) and their Lambda proxy form."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from amsg.crypto import compact_json, encrypt_envelope
from amsg.errors import ApiError, api_error

JSON_CONTENT_TYPE = "application/json; charset=utf-8"
# Lambda's synchronous response limit is 6 MB; stay clear of it.
MAX_RESPONSE_BYTES = 5_900_000


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: dict[str, Any]


def ok(data: Any, status: int = 200) -> ApiResponse:
    return ApiResponse(status, {"success": True, "data": data})


def ok_fields(status: int = 200, **fields: Any) -> ApiResponse:
    """The three endpoints that put fields at the top level (vapid-public-key, capabilities)."""
    return ApiResponse(status, {"success": True, **fields})


def encrypted(payload: Any, user_key: str, status: int = 200) -> ApiResponse:
    return ApiResponse(
        status, {"success": True, "encrypted": True, "version": 1, "data": encrypt_envelope(payload, user_key)}
    )


def from_error(error: ApiError) -> ApiResponse:
    return ApiResponse(error.status, error.body())


_NAME_RE = re.compile(r"[^A-Za-z0-9_.:-]")


def internal_error(exc: BaseException, stage: str) -> ApiResponse:
    """500 INTERNAL_ERROR with the reference's sanitized ``error.cause`` (never secrets or payload text)."""
    from amsg.domain.redaction import sanitize_error_summary

    cause: dict[str, Any] = {"stage": stage, "name": (_NAME_RE.sub("", type(exc).__name__) or "Error")[:100]}
    message = sanitize_error_summary(str(exc))
    if message:
        cause["message"] = message
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code:
        cause["code"] = _NAME_RE.sub("", code)[:100]
    body = api_error("INTERNAL_ERROR").body()
    body["error"]["cause"] = cause
    return ApiResponse(500, body)


def to_lambda_result(response: ApiResponse) -> dict[str, Any]:
    """API Gateway HTTP API proxy result. Handlers never emit CORS headers (API Gateway owns CORS)."""
    text = compact_json(response.body)
    if len(text.encode("utf-8")) > MAX_RESPONSE_BYTES:
        too_large = api_error(
            "RESPONSE_TOO_LARGE",
            details={"maxBytes": MAX_RESPONSE_BYTES, "hint": "use limit/offset or a narrower query"},
        )
        text = json.dumps(too_large.body(), ensure_ascii=False, separators=(",", ":"))
        return {"statusCode": 413, "headers": {"content-type": JSON_CONTENT_TYPE}, "body": text}
    return {"statusCode": response.status, "headers": {"content-type": JSON_CONTENT_TYPE}, "body": text}
