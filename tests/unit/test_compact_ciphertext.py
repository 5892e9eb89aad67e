"""The storage edge of ciphertext attributes: packed bytes read back as the exact hex text written."""

from __future__ import annotations

import pytest
from amsg.adapters.dynamo.compact import pack, unpack
from amsg.crypto import decrypt_from_storage, encrypt_for_storage
from boto3.dynamodb.types import Binary

KEY = "ab" * 32


def test_a_storage_ciphertext_packs_to_half_its_size_and_reads_back_exactly():
    text = encrypt_for_storage("早上好" * 40, KEY)
    packed = pack(text)
    assert isinstance(packed, bytes) and len(packed) < len(text) // 2 + 8
    assert unpack(packed) == text and unpack(Binary(packed)) == text
    assert decrypt_from_storage(unpack(packed), KEY) == "早上好" * 40


@pytest.mark.parametrize("text", ["AB:cd:ef", "ab:cd", "zz:00:11", "abc:00:11", "", "plain text", "00:11:22:33"])
def test_text_that_would_not_come_back_identical_is_stored_as_text(text):
    assert pack(text) == text and unpack(text) == text


def test_absent_reads_as_absent_and_unknown_bytes_are_refused():
    assert unpack(None) is None
    with pytest.raises(ValueError):
        unpack(b"\x09\x00\x00")
