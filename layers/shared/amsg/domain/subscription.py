"""What ``PUT /push-subscription`` stores: a bounded copy of the browser's ``PushSubscription.toJSON()``.

The reference stores the client's object as is. We keep its fields and answer the same 400 for anything a push
service could never use or that would bloat the stored item (see docs/compatibility.md): ``endpoint`` an http(s)
URL of at most 2,048 characters; ``expirationTime`` null or a finite number; ``keys.p256dh`` the 65-byte
uncompressed P-256 point and ``keys.auth`` the 16-byte secret, both base64url (standard base64 tolerated, as the
sender decodes both). ``keys`` (and each key) may be absent, as the reference's own tests send endpoint-only
objects; such a subscription is refused by the sender at delivery instead. Unknown fields are dropped.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from typing import Any, Literal

from amsg.errors import ApiError, api_error
from amsg.ports import PushKeys, PushSubscription
from amsg.vapid import endpoint_origin

MAX_ENDPOINT_CHARS = 2048
# base64 of 65 bytes is 88 characters padded; a little slack for stray padding/whitespace is not worth it
_MAX_KEY_CHARS = 100
_BASE64 = re.compile(r"[A-Za-z0-9_+/-]+={0,2}")
P256DH_BYTES = 65
AUTH_BYTES = 16


def _invalid(field: str, reason: str) -> ApiError:
    return api_error("INVALID_PUSH_SUBSCRIPTION", details={"field": field, "reason": reason})


def normalize_subscription(value: Any) -> PushSubscription:
    """The subscription to store, or the documented 400 ``INVALID_PUSH_SUBSCRIPTION`` (``details`` names the field)."""
    endpoint = value.get("endpoint") if isinstance(value, dict) else None
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise api_error("INVALID_PUSH_SUBSCRIPTION")
    out: PushSubscription = {"endpoint": _endpoint(endpoint)}
    if "expirationTime" in value:
        out["expirationTime"] = _expiration(value["expirationTime"])
    if "keys" in value and value["keys"] is not None:
        out["keys"] = _keys(value["keys"])
    return out


def _endpoint(endpoint: str) -> str:
    if len(endpoint) > MAX_ENDPOINT_CHARS:
        raise _invalid("endpoint", f"at most {MAX_ENDPOINT_CHARS} characters")
    try:
        endpoint_origin(endpoint.strip())
    except ValueError:
        raise _invalid("endpoint", "must be an http(s) URL") from None
    return endpoint


def _expiration(value: Any) -> int | float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _invalid("expirationTime", "must be null or a number")
    return value


def _keys(keys: Any) -> PushKeys:
    if not isinstance(keys, dict):
        raise _invalid("keys", "must be an object")
    out: PushKeys = {}
    fields: tuple[tuple[Literal["p256dh", "auth"], int], ...] = (("p256dh", P256DH_BYTES), ("auth", AUTH_BYTES))
    for name, size in fields:
        if name in keys:
            out[name] = _key(keys[name], f"keys.{name}", size)
    return out


def _key(value: Any, field: str, size: int) -> str:
    reason = f"must be {size} bytes, base64url"
    if not isinstance(value, str) or len(value) > _MAX_KEY_CHARS or not _BASE64.fullmatch(value):
        raise _invalid(field, reason)
    cleaned = value.replace("+", "-").replace("/", "_").rstrip("=")
    try:
        raw = base64.urlsafe_b64decode(cleaned + "=" * (-len(cleaned) % 4))
    except (binascii.Error, ValueError):
        raise _invalid(field, reason) from None
    if len(raw) != size or (size == P256DH_BYTES and raw[0] != 0x04):
        raise _invalid(field, reason)
    return value
