"""The per-request gates of the reference, each raising its documented error, in the reference's order.

Handlers call them in the reference's check order; keeping each gate tiny makes the order visible there.
"""

from __future__ import annotations

import re
from typing import Any

from amsg import jsonio
from amsg.crypto import DecryptError, UserCodec, constant_time_equals
from amsg.errors import ApiError, api_error
from amsg.http.request import ApiRequest
from amsg.jsonio import JsonObject

UUID_V4_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", re.IGNORECASE)


def repeated_header_value(value: str | None) -> str | None:
    """One value for a header sent more than once. API Gateway (like Node) joins repeats with commas; repeats
    that all carry the same value are that value, anything else stays as joined (and fails its check), since
    we cannot tell which copy the client meant (see docs/compatibility.md)."""
    if value is None or "," not in value:
        return value
    parts = {part.strip() for part in value.split(",")}
    return parts.pop() if len(parts) == 1 else value


def require_client_token(request: ApiRequest, expected: str | None) -> None:
    """Single-user shared secret; open when no token is configured. Always the first check."""
    if not expected:
        return
    given = request.header("x-client-token") or ""
    if constant_time_equals(given, expected):  # first as sent: a token may itself contain a comma
        return
    if not constant_time_equals(repeated_header_value(given) or "", expected):
        raise api_error("INVALID_CLIENT_TOKEN")


def require_user_id(request: ApiRequest) -> str:
    user_id = repeated_header_value(request.header("x-user-id"))
    if not user_id:
        raise api_error("USER_ID_REQUIRED")
    if not UUID_V4_RE.match(user_id):
        raise api_error("INVALID_USER_ID_FORMAT")
    return user_id


def require_payload_encrypted(request: ApiRequest) -> None:
    if request.header("x-payload-encrypted") != "true":
        raise api_error("ENCRYPTION_REQUIRED")


def require_encryption_version(request: ApiRequest) -> None:
    if request.header("x-encryption-version") != "1":
        raise api_error("UNSUPPORTED_ENCRYPTION_VERSION")


def require_query_id(request: ApiRequest) -> str:
    task_id = request.param("id")
    if not task_id:
        raise api_error("TASK_ID_REQUIRED")
    return task_id


def parse_json(text: str) -> Any:
    """``JSON.parse`` with the service's limits (:mod:`amsg.jsonio`): depth, no NaN/Infinity, finite numbers."""
    return jsonio.loads(text)


def decrypt_request_object(
    request: ApiRequest,
    codec: UserCodec,
    *,
    bad_json: ApiError | None = None,
    not_object: ApiError | None = None,
) -> JsonObject:
    """Envelope → decrypted plain object. Error codes per endpoint are overridable, as the reference's are."""
    try:
        envelope = parse_json(request.text_body or "")
    except ValueError as exc:
        raise api_error("INVALID_ENCRYPTED_PAYLOAD") from exc
    if not isinstance(envelope, dict) or not all(
        isinstance(envelope.get(field), str) for field in ("iv", "authTag", "encryptedData")
    ):
        raise api_error("INVALID_ENCRYPTED_PAYLOAD")
    try:
        text = codec.open_text(envelope)
    except DecryptError as exc:
        raise api_error("DECRYPTION_FAILED") from exc
    try:
        value = parse_json(text)
    except ValueError as exc:
        raise (bad_json or api_error("INVALID_PAYLOAD_FORMAT")) from exc
    if not isinstance(value, dict):
        raise not_object or api_error("INVALID_PAYLOAD_FORMAT", "解密后的数据必须是 JSON 对象")
    return value


def page_limit(raw: str | None, *, default: int, maximum: int, error: ApiError) -> int:
    """A positive page size: absent/empty → default, clamped to ``maximum``; otherwise ``error``."""
    try:
        value = parse_strict_int(raw)
    except ValueError:
        raise error from None
    if value is None:
        return default
    if value < 1:
        raise error
    return min(value, maximum)


def parse_strict_int(raw: str | None) -> int | None:
    """Numeric query parameters: absent/empty → None (default); otherwise ``^[0-9]+$`` or ValueError."""
    if raw is None or raw == "":
        return None
    if not re.fullmatch(r"[0-9]+", raw):
        raise ValueError(raw)
    return int(raw)
