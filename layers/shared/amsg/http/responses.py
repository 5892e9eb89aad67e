"""Response envelopes (the reference's ``{success, data | error}``) and their Lambda proxy form."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from amsg.crypto import UserCodec, compact_json
from amsg.errors import ApiError, api_error
from amsg.jsonio import JsonObject

JSON_CONTENT_TYPE = "application/json; charset=utf-8"
# Lambda's synchronous response limit is 6 MB; stay clear of it.
MAX_RESPONSE_BYTES = 5_900_000


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: JsonObject
    headers: dict[str, str] = field(default_factory=dict)  # beyond content-type (Retry-After)


def ok(data: Any, status: int = 200) -> ApiResponse:
    return ApiResponse(status, {"success": True, "data": data})


def ok_fields(status: int = 200, **fields: Any) -> ApiResponse:
    """The three endpoints that put fields at the top level (vapid-public-key, capabilities)."""
    return ApiResponse(status, {"success": True, **fields})


def encrypted(payload: Any, codec: UserCodec, status: int = 200) -> ApiResponse:
    return ApiResponse(status, {"success": True, "encrypted": True, "version": 1, "data": codec.seal(payload)})


def from_error(error: ApiError) -> ApiResponse:
    return ApiResponse(error.status, error.body(), dict(error.headers))


_NAME_RE = re.compile(r"[^A-Za-z0-9_.:-]")


def internal_error(exc: BaseException, stage: str) -> ApiResponse:
    """500 INTERNAL_ERROR with the reference's ``error.cause`` ``{stage, name, message?, code?}``.

    The cause only ever carries text we wrote: the message and code of our own exceptions (sanitized), the
    name of ours or of a Python builtin. A storage, SDK or library exception becomes ``name: "Error"`` with no
    message (its text may quote keys, table names or payload fragments); the logs keep the details.
    """
    from amsg.domain.redaction import sanitize_error_summary

    ours = type(exc).__module__.split(".")[0] == "amsg"
    name = type(exc).__name__ if ours or type(exc).__module__ == "builtins" else "Error"
    cause: JsonObject = {"stage": stage, "name": (_NAME_RE.sub("", name) or "Error")[:100]}
    if ours:
        message = sanitize_error_summary(str(exc))
        if message:
            cause["message"] = message
        code = getattr(exc, "code", None)
        if isinstance(code, str) and code:
            cause["code"] = _NAME_RE.sub("", code)[:100]
    body = api_error("INTERNAL_ERROR").body()
    body["error"]["cause"] = cause
    return ApiResponse(500, body)


def to_lambda_result(response: ApiResponse) -> JsonObject:
    """API Gateway HTTP API proxy result. Handlers never emit CORS headers (API Gateway owns CORS)."""
    text = compact_json(response.body)
    if len(text.encode("utf-8")) > MAX_RESPONSE_BYTES:
        too_large = api_error(
            "RESPONSE_TOO_LARGE",
            details={"maxBytes": MAX_RESPONSE_BYTES, "hint": "use limit/offset or a narrower query"},
        )
        text = compact_json(too_large.body())
        return {"statusCode": 413, "headers": {"content-type": JSON_CONTENT_TYPE}, "body": text}
    return {
        "statusCode": response.status,
        "headers": {"content-type": JSON_CONTENT_TYPE, **response.headers},
        "body": text,
    }
