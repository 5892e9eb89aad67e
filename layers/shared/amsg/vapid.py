"""VAPID keys and the RFC 8292 ``Authorization`` header, with ``cryptography`` only.

Kept free of pywebpush/py_vapid on purpose: the API functions use this module (key generation for the local
stack, ``/vapid-public-key`` sanity checks), and pywebpush drags aiohttp into the import (slow cold starts).

Key formats are the ones the web-push JS libraries (and the reference) use:

* public key  = base64url (no padding) of the 65-byte uncompressed P-256 point (the browser's
  ``applicationServerKey``);
* private key = base64url (no padding) of the raw 32-byte P-256 scalar.
"""

from __future__ import annotations

import base64
import binascii
import time
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from amsg import jsonio

# The JWT lives 12 h, like the reference's (RFC 8292 caps it at 24 h).
VAPID_JWT_TTL_S = 12 * 60 * 60

_JWT_HEADER = {"typ": "JWT", "alg": "ES256"}
_DEFAULT_PORTS = {"http": 80, "https": 443}


class VapidConfigError(ValueError):
    """The configured VAPID material is unusable (never carries the key itself)."""


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Decode base64url or standard base64, padded or not (keys get pasted in both forms)."""
    cleaned = "".join(text.split()).replace("+", "-").replace("/", "_").rstrip("=")
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.urlsafe_b64decode(cleaned)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("invalid base64") from exc


def _public_point(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


def generate_vapid_keys() -> tuple[str, str]:
    """New P-256 key pair as ``(public_b64url_uncompressed_point, private_b64url_raw_scalar)``."""
    private = ec.generate_private_key(ec.SECP256R1())
    scalar = private.private_numbers().private_value.to_bytes(32, "big")
    return b64url_encode(_public_point(private.public_key())), b64url_encode(scalar)


def load_private_key(private_key: str) -> ec.EllipticCurvePrivateKey:
    """Parse the configured private key: raw 32-byte scalar (base64url); PEM and base64 DER are tolerated."""
    text = (private_key or "").strip()
    if not text:
        raise VapidConfigError("VAPID private key is empty")
    try:
        if text.startswith("-----BEGIN"):
            key = serialization.load_pem_private_key(text.encode("ascii"), password=None)
        else:
            raw = b64url_decode(text)
            if len(raw) == 32:
                return ec.derive_private_key(int.from_bytes(raw, "big"), ec.SECP256R1())
            key = serialization.load_der_private_key(raw, password=None)
    except VapidConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise VapidConfigError("VAPID private key is not P-256 (expected base64url raw scalar)") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise VapidConfigError("VAPID private key is not a P-256 key")
    return key


def load_public_key(public_key: str) -> ec.EllipticCurvePublicKey:
    """Parse a base64url uncompressed P-256 point (65 bytes, leading 0x04)."""
    try:
        raw = b64url_decode((public_key or "").strip())
        if len(raw) != 65 or raw[0] != 0x04:
            raise ValueError("not an uncompressed point")
        return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
    except ValueError as exc:
        raise VapidConfigError("VAPID public key is not a P-256 uncompressed point") from exc


def public_key_from_private(private_key: str) -> str:
    """The base64url uncompressed public point that belongs to ``private_key``."""
    return b64url_encode(_public_point(load_private_key(private_key).public_key()))


def normalize_subject(subject: str) -> str:
    """``mailto:`` prepended unless it already starts with ``mailto:``/``http(s):``, as the reference does."""
    text = (subject or "").strip()
    if not text:
        raise VapidConfigError("VAPID subject is empty")
    if text.lower().startswith(("mailto:", "http:", "https:")):
        return text
    return "mailto:" + text


def endpoint_origin(endpoint: str) -> str:
    """The JWT ``aud``: ``scheme://host[:port]`` like JS ``new URL(url).origin`` (default port omitted)."""
    parts = urlsplit(endpoint)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError("push endpoint must be an http(s) URL")
    host = parts.hostname  # already lower-cased, brackets stripped
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def sign_jwt(claims: dict[str, object], private_key: ec.EllipticCurvePrivateKey) -> str:
    """Compact ES256 JWS (raw ``r||s`` signature, JOSE style)."""
    signing_input = (
        b64url_encode(jsonio.dumps(_JWT_HEADER).encode()) + "." + b64url_encode(jsonio.dumps(claims).encode())
    )
    der = private_key.sign(signing_input.encode("ascii"), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    return signing_input + "." + b64url_encode(r.to_bytes(32, "big") + s.to_bytes(32, "big"))


def vapid_authorization(
    endpoint: str,
    private_key: ec.EllipticCurvePrivateKey,
    public_key_b64url: str,
    subject: str,
    *,
    now_s: float | None = None,
) -> str:
    """``vapid t=<jwt>, k=<publicKey>`` for one push endpoint (aud = its origin, exp = now + 12 h)."""
    issued = int(time.time() if now_s is None else now_s)
    claims = {
        "aud": endpoint_origin(endpoint),
        "exp": issued + VAPID_JWT_TTL_S,
        "sub": normalize_subject(subject),
    }
    return f"vapid t={sign_jwt(claims, private_key)}, k={public_key_b64url}"
