"""The per-user codec: byte-for-byte the ciphers the hex-key functions produced before it existed (fixed
vectors captured from them), values stored before it decrypt with it, and the key is keyed into AES-GCM once."""

from __future__ import annotations

import pytest
from amsg import crypto
from amsg.crypto import (
    DecryptError,
    StoredPayloadUnreadable,
    UserCodec,
    decrypt_envelope_text,
    decrypt_from_storage,
    derive_user_key,
    encrypt_envelope,
    encrypt_for_storage,
)
from hypothesis import given, settings
from hypothesis import strategies as st

MASTER, USER = "master-key-for-vectors", "user-1"
KEY = "5082de272614dd460c136f6f76464d8859ee7977c480cf13c42e89a7ea219f84"
PAYLOAD = '{"contactName":"Rei","message":"早上好"}'
# written by encrypt_for_storage(PAYLOAD, KEY, iv=bytes(range(16))) before the codec existed
PAYLOAD_STORED = (
    "000102030405060708090a0b0c0d0e0f:e82f1824f1420d50cfbbb176051eefa2:"
    "a5617be4c467d74f575dce0e9029709b131541143f5880d5fe2293e5781b7e19233a3ab9814ea59113c295"
)
# a value stored with a random IV before the codec existed
LEGACY_STORED = "61b4d39dc9877a9167be4f551048838c:f19989543b727b0270b2cf503afa47ff:eb41882bec8c"
ENVELOPE = {
    "iv": "AAECAwQFBgcICQoL",
    "authTag": "Im5nm88Hmx+gk15JEePMJA==",
    "encryptedData": "P0valgIRUMl4MZBToGYOMMQ=",
}


def test_the_codec_derives_the_reference_user_key():
    codec = UserCodec.derive(MASTER, USER)
    assert codec.key_hex == KEY == derive_user_key(MASTER, USER)
    assert KEY not in repr(codec)


def test_storage_and_transport_vectors_are_unchanged():
    codec = UserCodec(KEY)
    assert codec.encrypt(PAYLOAD, iv=bytes(range(16))) == PAYLOAD_STORED
    assert codec.seal({"ok": True, "n": 1}, iv=bytes(range(12))) == ENVELOPE
    assert codec.group_value("charId:abc") == "0wQi67DUKQLTCCzKV8nY5m-FHUKvF9NpkrizMU7CA9g"


def test_values_stored_before_the_codec_decrypt_with_it():
    codec = UserCodec(KEY)
    assert codec.decrypt(LEGACY_STORED) == "legacy"
    assert codec.decrypt(PAYLOAD_STORED) == PAYLOAD
    assert codec.decrypt_payload(PAYLOAD_STORED) == {"contactName": "Rei", "message": "早上好"}
    assert codec.open_text(ENVELOPE) == '{"ok":true,"n":1}'


def test_unreadable_values_raise_as_before():
    codec = UserCodec(KEY)
    with pytest.raises(DecryptError):
        codec.decrypt("not:a:value")
    with pytest.raises(DecryptError):
        UserCodec("0" * 64).decrypt(LEGACY_STORED)
    with pytest.raises(StoredPayloadUnreadable):
        codec.decrypt_payload(LEGACY_STORED)  # decrypts, but not to a JSON object
    with pytest.raises(StoredPayloadUnreadable):
        codec.decrypt_payload("zz")


def test_the_aes_gcm_object_is_built_once_per_codec(monkeypatch):
    built = []
    real = crypto._aesgcm
    monkeypatch.setattr(crypto, "_aesgcm", lambda key: built.append(key) or real(key))
    codec = UserCodec(KEY)
    for _ in range(3):
        codec.decrypt(codec.encrypt("x"))
        codec.open_text(codec.seal("y"))
    assert len(built) == 1


@settings(deadline=None)
@given(text=st.text(max_size=200), iv=st.binary(min_size=12, max_size=16))
def test_the_codec_and_the_hex_functions_agree(text: str, iv: bytes):
    codec = UserCodec(KEY)
    stored = codec.encrypt(text, iv=iv)
    assert stored == encrypt_for_storage(text, KEY, iv=iv)
    assert decrypt_from_storage(stored, KEY) == text == codec.decrypt(stored)
    envelope = codec.seal(text, iv=iv)
    assert envelope == encrypt_envelope(text, KEY, iv=iv)
    assert decrypt_envelope_text(envelope, KEY) == text == codec.open_text(envelope)


def test_storage_values_take_the_one_shot_aead_not_a_cipher_context(monkeypatch):
    """Storage's 16-byte IVs go through the key's AESGCM object (a task's payload, its subscription and its
    outbox rows are three such values per delivery), with the same bytes as the cipher context wrote."""
    monkeypatch.setattr(crypto, "_gcm_any", lambda *args: pytest.fail("a cipher context was built"))
    codec = UserCodec(KEY)
    assert codec.encrypt(PAYLOAD, iv=bytes(range(16))) == PAYLOAD_STORED
    assert codec.decrypt(PAYLOAD_STORED) == PAYLOAD
    assert codec.decrypt(LEGACY_STORED) == "legacy"


@settings(deadline=None)
@given(text=st.text(max_size=200), iv=st.binary(min_size=8, max_size=32))
def test_the_aead_and_the_cipher_context_agree_for_any_iv(text: str, iv: bytes):
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    encryptor = Cipher(algorithms.AES(bytes.fromhex(KEY)), modes.GCM(iv)).encryptor()
    ct = encryptor.update(text.encode()) + encryptor.finalize()
    stored = f"{iv.hex()}:{encryptor.tag.hex()}:{ct.hex()}"
    codec = UserCodec(KEY)
    assert codec.encrypt(text, iv=iv) == stored
    assert codec.decrypt(stored) == text
