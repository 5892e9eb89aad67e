"""Keys and ciphers of the wire and of storage (see docs/compatibility.md), byte-compatible with the reference.

* user key      = hex(sha256(utf8(master_key + user_id)))  (the AES-256 key is its 32 raw bytes)
* transport v1  = AES-256-GCM, 12-byte IV, detached tag, each field standard base64 (``atob``-friendly)
* storage       = AES-256-GCM, 16-byte IV, ``hex(iv):hex(tag):hex(ct)``
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import secrets
from typing import Any, cast

from amsg.jsonio import dumps, loads
from amsg.task_payload import StoredPayload

compact_json = dumps  # the one JSON writer, re-exported for the codecs' callers


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


def _aesgcm(key: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


def _aead_iv(iv: bytes) -> bool:
    """Whether the one-shot AEAD takes this IV: 8 to 128 bytes, so the wire's 12 and storage's 16 both (one C
    call instead of a cipher context per value: a task's payload, subscription and outbox row each)."""
    return 8 <= len(iv) <= 128


def _gcm_decrypt(key: bytes, iv: bytes, tag: bytes, ciphertext: bytes, aead: Any = None) -> bytes:
    """``aead``: the key's AESGCM object when the caller keeps one (the full tag case)."""
    from cryptography.exceptions import InvalidTag

    if not 12 <= len(tag) <= 16:
        raise DecryptError("invalid tag length")
    if not iv:
        raise DecryptError("invalid iv")
    try:
        if len(tag) == 16 and _aead_iv(iv):
            plaintext: bytes = (aead or _aesgcm(key)).decrypt(iv, ciphertext + tag, None)
            return plaintext
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


def _gcm_encrypt(key: bytes, iv: bytes, plaintext: bytes, aead: Any = None) -> tuple[bytes, bytes]:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    if _aead_iv(iv):
        sealed = (aead or _aesgcm(key)).encrypt(iv, plaintext, None)
        return sealed[:-16], sealed[-16:]
    encryptor = Cipher(algorithms.AES(key), modes.GCM(iv)).encryptor()
    ct = encryptor.update(plaintext) + encryptor.finalize()
    return ct, encryptor.tag


class StoredPayloadUnreadable(Exception):
    """A stored task payload that does not decrypt to a JSON object (wrong key, corrupted or foreign data).
    The API answers it as an internal error of the whole request, as the reference does; the engine settles
    the task as failed."""

    code = "PAYLOAD_DECRYPT_FAILED"


class UserCodec:
    """One user's ciphers: the transport envelope and the storage format under the user key. Built once per
    request or record (``AppContext.codec``), so the key is derived, decoded and keyed into AES-GCM once
    instead of at every call site (see docs/architecture.md, "Times and the user codec").

    ``key_hex`` is the user key as the wire knows it (``GET /get-user-key``) and as the HMAC ids use it."""

    __slots__ = ("_aead", "_key", "key_hex")

    def __init__(self, key_hex: str) -> None:
        self.key_hex = key_hex
        self._key = key_bytes(key_hex)
        self._aead: Any = None

    @classmethod
    def derive(cls, master_key: str, user_id: str) -> UserCodec:
        return cls(derive_user_key(master_key, user_id))

    def __repr__(self) -> str:
        return "UserCodec(<redacted>)"  # key material never reaches a log line

    def _gcm(self) -> Any:
        if self._aead is None:
            self._aead = _aesgcm(self._key)
        return self._aead

    # ---- transport envelope (request bodies, encrypted responses) ------------------------------------------

    def seal(self, value: Any, *, iv: bytes | None = None) -> dict[str, str]:
        """``{iv, authTag, encryptedData}`` of a response value (JSON unless already text)."""
        plaintext = value if isinstance(value, str) else compact_json(value)
        iv = iv if iv is not None else secrets.token_bytes(12)
        ct, tag = _gcm_encrypt(self._key, iv, plaintext.encode("utf-8"), self._gcm())
        return {
            "iv": base64.b64encode(iv).decode("ascii"),
            "authTag": base64.b64encode(tag).decode("ascii"),
            "encryptedData": base64.b64encode(ct).decode("ascii"),
        }

    def open_text(self, envelope: dict[str, str]) -> str:
        """Decrypt an ``{iv, authTag, encryptedData}`` object to text (invalid UTF-8 replaced, like JS)."""
        iv = _b64decode_lenient(envelope["iv"])
        tag = _b64decode_lenient(envelope["authTag"])
        ct = _b64decode_lenient(envelope["encryptedData"])
        return self._open(iv, tag, ct)

    # ---- storage format ---------------------------------------------------------------------------------

    def encrypt(self, plaintext: str, *, iv: bytes | None = None) -> str:
        """Storage ciphertext ``hex(iv):hex(tag):hex(ct)`` (16-byte IV)."""
        iv = iv if iv is not None else secrets.token_bytes(16)
        ct, tag = _gcm_encrypt(self._key, iv, plaintext.encode("utf-8"), self._gcm())
        return f"{iv.hex()}:{tag.hex()}:{ct.hex()}"

    def decrypt(self, stored: str) -> str:
        parts = stored.split(":")
        if len(parts) != 3:
            raise DecryptError("invalid storage ciphertext")
        try:
            iv, tag, ct = (bytes.fromhex(p) for p in parts)
        except ValueError as exc:
            raise DecryptError("invalid hex") from exc
        return self._open(iv, tag, ct)

    def decrypt_payload(self, encrypted: str) -> StoredPayload:
        """A stored task payload (storage ciphertext of its JSON) as a plain object."""
        try:
            value = loads(self.decrypt(encrypted))
        except (DecryptError, ValueError) as exc:
            raise StoredPayloadUnreadable("stored task payload cannot be decrypted") from exc
        if not isinstance(value, dict):
            raise StoredPayloadUnreadable("stored task payload is not an object")
        return cast(StoredPayload, value)  # what schedule-message (or a follow-up) wrote

    def group_value(self, group_key: str) -> str:
        """:func:`serialize_group_value` under this user's key (serialize groups, per-user HMAC ids)."""
        return serialize_group_value(self.key_hex, group_key)

    def _open(self, iv: bytes, tag: bytes, ct: bytes) -> str:
        aead = self._gcm() if len(tag) == 16 and _aead_iv(iv) else None
        return _gcm_decrypt(self._key, iv, tag, ct, aead).decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=512)
def user_codec(master_key: str, user_id: str) -> UserCodec:
    """The codec of a user under a master key, kept for the next request or record of the same user (a rotated
    master key is a different cache key)."""
    return UserCodec.derive(master_key, user_id)


# ---- the same for a hex key: one-off callers and the fixed test vectors ----------------------------------


def encrypt_envelope(value: Any, user_key_hex: str, *, iv: bytes | None = None) -> dict[str, str]:
    return UserCodec(user_key_hex).seal(value, iv=iv)


def decrypt_envelope_text(envelope: dict[str, str], user_key_hex: str) -> str:
    """Decrypt an ``{iv, authTag, encryptedData}`` object to text (invalid UTF-8 replaced, like JS)."""
    return UserCodec(user_key_hex).open_text(envelope)


def encrypt_for_storage(plaintext: str, user_key_hex: str, *, iv: bytes | None = None) -> str:
    return UserCodec(user_key_hex).encrypt(plaintext, iv=iv)


def decrypt_from_storage(stored: str, user_key_hex: str) -> str:
    return UserCodec(user_key_hex).decrypt(stored)


def decrypt_payload(encrypted: str, user_key_hex: str) -> StoredPayload:
    """A stored task payload (storage ciphertext of its JSON) as a plain object."""
    return UserCodec(user_key_hex).decrypt_payload(encrypted)


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
