"""Keys and ciphers of the wire and of storage (see docs/compatibility.md), byte-compatible with the reference.

* user key      = hex(sha256(utf8(master_key + user_id)))  (the AES-256 key is its 32 raw bytes)
* transport v1  = AES-256-GCM, 12-byte IV, detached tag, each field standard base64 (``atob``-friendly)
* storage       = AES-256-GCM, 16-byte IV, ``hex(iv):hex(tag):hex(ct)``
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import Any

from amsg.jsonio import dumps as compact_json  # the one JSON writer, re-exported for the codecs' callers
from amsg.jsonio import loads


class DecryptError(Exception):
    """Ciphertext could not be decoded or authenticated (never carries key or plaintext material)."""


def derive_user_key(master_key: str, user_id: str) -> str:
    return hashlib.sha256((master_key + user_id).encode("utf-8")).hexdigest()


def key_bytes(user_key_hex: str) -> bytes:
    return bytes.fromhex(user_key_hex[:64])


def _b64decode_lenient(text: str) -> bytes:
    cleaned = text.strip().replace("-", "+").replace("_", "/")
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DecryptError("invalid base64") from exc


# cryptography is imported by the functions that cipher, not at import: routes that never cipher
# (capabilities, vapid-public-key, get-user-key) skip its load at cold start (docs/cold-start.md)


def _gcm_decrypt(key: bytes, iv: bytes, tag: bytes, ciphertext: bytes) -> bytes:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if not 12 <= len(tag) <= 16:
        raise DecryptError("invalid tag length")
    if not iv:
        raise DecryptError("invalid iv")
    try:
        if len(tag) == 16 and len(iv) == 12:
            return AESGCM(key).decrypt(iv, ciphertext + tag, None)
        return _gcm_any(key, iv, tag, ciphertext)
    except InvalidTag as exc:
        raise DecryptError("authentication failed") from exc
    except ValueError as exc:
        raise DecryptError("invalid ciphertext") from exc


def _gcm_any(key: bytes, iv: bytes, tag: bytes, ciphertext: bytes) -> bytes:
    """GCM with any IV length and a 12..16-byte (possibly truncated) tag."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    decryptor = Cipher(algorithms.AES(key), modes.GCM(iv, tag, min_tag_length=len(tag))).decryptor()
    return decryptor.update(ciphertext) + decryptor.finalize()


def _gcm_encrypt(key: bytes, iv: bytes, plaintext: bytes) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if len(iv) == 12:
        sealed = AESGCM(key).encrypt(iv, plaintext, None)
        return sealed[:-16], sealed[-16:]
    encryptor = Cipher(algorithms.AES(key), modes.GCM(iv)).encryptor()
    ct = encryptor.update(plaintext) + encryptor.finalize()
    return ct, encryptor.tag


# ---- transport envelope (request bodies, encrypted responses) ----------------------------------------------


def encrypt_envelope(value: Any, user_key_hex: str, *, iv: bytes | None = None) -> dict[str, str]:
    plaintext = value if isinstance(value, str) else compact_json(value)
    iv = iv if iv is not None else secrets.token_bytes(12)
    ct, tag = _gcm_encrypt(key_bytes(user_key_hex), iv, plaintext.encode("utf-8"))
    return {
        "iv": base64.b64encode(iv).decode("ascii"),
        "authTag": base64.b64encode(tag).decode("ascii"),
        "encryptedData": base64.b64encode(ct).decode("ascii"),
    }


def decrypt_envelope_text(envelope: dict[str, str], user_key_hex: str) -> str:
    """Decrypt an ``{iv, authTag, encryptedData}`` object to text (invalid UTF-8 replaced, like JS)."""
    iv = _b64decode_lenient(envelope["iv"])
    tag = _b64decode_lenient(envelope["authTag"])
    ct = _b64decode_lenient(envelope["encryptedData"])
    return _gcm_decrypt(key_bytes(user_key_hex), iv, tag, ct).decode("utf-8", errors="replace")


# ---- storage format -----------------------------------------------------------------------------------------


def encrypt_for_storage(plaintext: str, user_key_hex: str, *, iv: bytes | None = None) -> str:
    iv = iv if iv is not None else secrets.token_bytes(16)
    ct, tag = _gcm_encrypt(key_bytes(user_key_hex), iv, plaintext.encode("utf-8"))
    return f"{iv.hex()}:{tag.hex()}:{ct.hex()}"


def decrypt_from_storage(stored: str, user_key_hex: str) -> str:
    parts = stored.split(":")
    if len(parts) != 3:
        raise DecryptError("invalid storage ciphertext")
    try:
        iv, tag, ct = (bytes.fromhex(p) for p in parts)
    except ValueError as exc:
        raise DecryptError("invalid hex") from exc
    return _gcm_decrypt(key_bytes(user_key_hex), iv, tag, ct).decode("utf-8", errors="replace")


class StoredPayloadUnreadable(Exception):
    """A stored task payload that does not decrypt to a JSON object (wrong key, corrupted or foreign data).
    The API answers it as an internal error of the whole request, as the reference does; the engine settles
    the task as failed."""

    code = "PAYLOAD_DECRYPT_FAILED"


def decrypt_payload(encrypted: str, user_key_hex: str) -> dict[str, Any]:
    """A stored task payload (storage ciphertext of its JSON) as a plain object."""
    try:
        value = loads(decrypt_from_storage(encrypted, user_key_hex))
    except (DecryptError, ValueError) as exc:
        raise StoredPayloadUnreadable("stored task payload cannot be decrypted") from exc
    if not isinstance(value, dict):
        raise StoredPayloadUnreadable("stored task payload is not an object")
    return value


def storage_size(plaintext_bytes: int) -> int:
    return 2 * plaintext_bytes + 66


# ---- other derivations ------------------------------------------------------------------------------------


def serialize_group_value(user_key_hex: str, group_key: str) -> str:
    """Stored form of a serialize-by group: base64url(HMAC-SHA256(utf8(user key hex), group)), no padding."""
    digest = hmac.new(user_key_hex.encode("utf-8"), group_key.encode("utf-8"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


_COMPARE_KEY = secrets.token_bytes(32)


def constant_time_equals(a: str, b: str) -> bool:
    """Compare secrets without leaking length or prefix timing (HMAC both sides, compare digests)."""
    da = hmac.new(_COMPARE_KEY, a.encode("utf-8"), hashlib.sha256).digest()
    db = hmac.new(_COMPARE_KEY, b.encode("utf-8"), hashlib.sha256).digest()
    return hmac.compare_digest(da, db)
