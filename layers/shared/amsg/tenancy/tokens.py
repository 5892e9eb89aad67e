"""Tenant and cron tokens in the reference's JWT-shaped HS256 format (docs/tenancy.md).

``base64url(header).base64url(payload).base64url(signature)``: the header is ``{"alg":"HS256","typ":"JWT"}``,
the payload ``{"tid","typ","iat","exp","v":1}`` in that order, the signature HMAC-SHA256 over the ASCII
``header.payload`` with the UTF-8 signing key. Tokens the reference mints verify here and ours there.

Verification refuses anything longer than :data:`MAX_TOKEN_CHARS` before decoding a byte, compares signatures
with ``hmac.compare_digest`` (its time does not depend on where two signatures differ), and, like the
reference, does not inspect the header; like the reference it asks only ``tid``, ``typ`` and ``exp`` (and
``v``), so a token without ``iat`` verifies. Revocation is the registry's: a token issued earlier than the
tenant's ``tokens_not_before_s`` is refused by the caller (the payload has no room for a generation claim);
one without ``iat`` counts as issued when the tenant was created (``amsg.http.tenant_gate``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
from dataclasses import dataclass
from typing import TypeGuard

from amsg import jsonio

TENANT = "tenant"
CRON = "cron"
DEFAULT_LIFETIME_S = 2_592_000  # 30 days, the reference's
MAX_TOKEN_CHARS = 2048  # far above a real token (~250 chars); anything longer is refused unread
_HEADER = '{"alg":"HS256","typ":"JWT"}'


@dataclass(frozen=True)
class TokenClaims:
    tenant_id: str
    token_type: str  # "tenant" | "cron"
    issued_at_s: int | None  # None: the token has no numeric ``iat`` (the reference does not require one)
    expires_at_s: int


class InvalidToken(Exception):
    """Malformed, badly signed, expired or of the wrong type (one message for all: the reference's)."""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    if not text or any(c not in _B64URL for c in text):
        raise InvalidToken("not base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise InvalidToken("not base64url") from exc
    if _b64url(data) != text:  # only the canonical spelling: no two tokens carry the same signature bytes
        raise InvalidToken("not canonical base64url")
    return data


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _sign(signing_key: str, message: str) -> bytes:
    return hmac.new(signing_key.encode("utf-8"), message.encode("ascii"), hashlib.sha256).digest()


def issue(signing_key: str, tenant_id: str, token_type: str, now_s: int, lifetime_s: int = DEFAULT_LIFETIME_S) -> str:
    """A token for ``tenant_id`` of ``token_type``, issued at ``now_s``."""
    payload = {"tid": tenant_id, "typ": token_type, "iat": now_s, "exp": now_s + lifetime_s, "v": 1}
    body = jsonio.dumps(payload)
    signing_input = _b64url(_HEADER.encode("utf-8")) + "." + _b64url(body.encode("utf-8"))
    return signing_input + "." + _b64url(_sign(signing_key, signing_input))


def verify(signing_key: str, token: str, now_s: int, allowed_types: frozenset[str]) -> TokenClaims:
    """The claims of a valid token, or :class:`InvalidToken` (the reference's checks, in its order)."""
    if len(token) > MAX_TOKEN_CHARS or not token.isascii():
        raise InvalidToken("malformed")
    parts = token.split(".")
    if len(parts) != 3:
        raise InvalidToken("malformed")
    given = _unb64url(parts[2])
    expected = _sign(signing_key, parts[0] + "." + parts[1])
    if not hmac.compare_digest(given, expected):
        raise InvalidToken("bad signature")
    return _claims(_unb64url(parts[1]), now_s, allowed_types)


def _claims(raw: bytes, now_s: int, allowed_types: frozenset[str]) -> TokenClaims:
    try:
        payload = jsonio.loads(raw)
    except ValueError as exc:
        raise InvalidToken("payload is not JSON") from exc
    if not isinstance(payload, dict) or payload.get("v") != 1 or isinstance(payload.get("v"), bool):
        raise InvalidToken("unknown version")
    tid, typ, exp, iat = payload.get("tid"), payload.get("typ"), payload.get("exp"), payload.get("iat")
    if not isinstance(tid, str) or not tid or not isinstance(typ, str) or not _is_number(exp):
        raise InvalidToken("missing claims")
    if not exp > now_s:
        raise InvalidToken("expired")
    if typ not in allowed_types:
        raise InvalidToken("wrong type")
    issued = int(iat) if _is_number(iat) else None
    return TokenClaims(tenant_id=tid, token_type=typ, issued_at_s=issued, expires_at_s=int(exp))


def _is_number(value: object) -> TypeGuard[int | float]:
    """A JSON number as JavaScript compares it: finite (``JSON.parse`` has no NaN or Infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
