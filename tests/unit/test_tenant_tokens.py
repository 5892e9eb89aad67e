"""Tenant and cron tokens: the reference's test vector, its checks, tampering, bounds (docs/tenancy.md)."""

from __future__ import annotations

import json

import pytest
from amsg.tenancy import tokens
from hypothesis import given
from hypothesis import strategies as st

SECRET = "signing-secret"
TID = "11111111-1111-4111-8111-111111111111"
VECTOR = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJ0aWQiOiIxMTExMTExMS0xMTExLTQxMTEtODExMS0xMTExMTExMTExMTEiLCJ0eXAiOiJ0ZW5hbnQiLCJpYXQiOjE3MDAwMDAwMDAsImV4cCI6MTcwMjU5MjAwMCwidiI6MX0."
    "7YCeqOciivZpVcFIMsIGzj6n-KmLjaHfl2NbpLJhwUE"
)
TENANT_ONLY = frozenset({tokens.TENANT})


def test_issue_reproduces_the_reference_vector_with_the_default_lifetime():
    assert tokens.issue(SECRET, TID, tokens.TENANT, 1_700_000_000) == VECTOR


def test_the_vector_verifies_until_it_expires():
    claims = tokens.verify(SECRET, VECTOR, 1_702_591_999, TENANT_ONLY)
    assert (claims.tenant_id, claims.token_type, claims.issued_at_s, claims.expires_at_s) == (
        TID,
        "tenant",
        1_700_000_000,
        1_702_592_000,
    )
    with pytest.raises(tokens.InvalidToken):
        tokens.verify(SECRET, VECTOR, 1_702_592_000, TENANT_ONLY)  # exp > now, strictly


def test_wrong_type_wrong_key_and_wrong_shape_are_refused():
    with pytest.raises(tokens.InvalidToken):
        tokens.verify(SECRET, VECTOR, 1_700_000_001, frozenset({tokens.CRON}))
    with pytest.raises(tokens.InvalidToken):
        tokens.verify("another-secret", VECTOR, 1_700_000_001, TENANT_ONLY)
    for bad in ("", "a.b", "a.b.c.d", VECTOR + ".", "é" + VECTOR, VECTOR.replace(".", "..", 1)):
        with pytest.raises(tokens.InvalidToken):
            tokens.verify(SECRET, bad, 1_700_000_001, TENANT_ONLY)


def _signed(payload: dict | str) -> str:
    header = tokens._b64url(b'{"alg":"HS256","typ":"JWT"}')
    raw = payload if isinstance(payload, str) else json.dumps(payload)
    signing_input = header + "." + tokens._b64url(raw.encode())
    return signing_input + "." + tokens._b64url(tokens._sign(SECRET, signing_input))


@pytest.mark.parametrize(
    "payload",
    [
        {"tid": TID, "typ": "tenant", "iat": 1, "exp": 9_999_999_999, "v": 2},
        {"tid": TID, "typ": "tenant", "iat": 1, "exp": 9_999_999_999, "v": True},
        {"tid": TID, "typ": "tenant", "iat": 1, "exp": 9_999_999_999},
        {"typ": "tenant", "iat": 1, "exp": 9_999_999_999, "v": 1},
        {"tid": TID, "iat": 1, "exp": 9_999_999_999, "v": 1},
        {"tid": TID, "typ": "tenant", "iat": 1, "v": 1},
        {"tid": TID, "typ": "tenant", "iat": 1, "exp": "9999999999", "v": 1},
        {"tid": TID, "typ": "admin", "iat": 1, "exp": 9_999_999_999, "v": 1},
        "not json",
        "[1,2]",
        '{"tid":"t","typ":"tenant","iat":1,"exp":Infinity,"v":1}',
        '{"tid":"t","typ":"tenant","iat":1,"exp":NaN,"v":1}',
        '{"tid":"t","typ":"tenant","iat":1,"exp":1e400,"v":1}',
    ],
)
def test_correctly_signed_but_invalid_payloads_are_refused(payload):
    with pytest.raises(tokens.InvalidToken):
        tokens.verify(SECRET, _signed(payload), 1_700_000_000, TENANT_ONLY)


def test_a_correctly_signed_payload_in_any_key_order_verifies():
    token = _signed({"v": 1, "exp": 9_999_999_999, "typ": "cron", "tid": TID, "iat": 5})
    assert tokens.verify(SECRET, token, 1_700_000_000, frozenset({tokens.CRON})).tenant_id == TID


@pytest.mark.parametrize("iat", [None, "1700000000", [1]])
def test_a_token_without_a_numeric_iat_verifies_as_the_reference_does(iat):
    """The reference asks ``tid``, ``typ``, ``exp`` (and ``v``); no ``iat`` is ``issued_at_s`` None, which the
    edge reads as "issued when the tenant was created" (tests/handlers/test_tenancy_auth.py)."""
    payload = {"tid": TID, "typ": "tenant", "exp": 9_999_999_999, "v": 1}
    claims = tokens.verify(SECRET, _signed(payload if iat is None else {**payload, "iat": iat}), 1, TENANT_ONLY)
    assert (claims.tenant_id, claims.issued_at_s) == (TID, None)


def test_overlong_tokens_are_refused_before_any_decoding(monkeypatch):
    def never(*_args):
        raise AssertionError("decoded an overlong token")

    monkeypatch.setattr(tokens, "_unb64url", never)
    with pytest.raises(tokens.InvalidToken):
        tokens.verify(SECRET, "a" * (tokens.MAX_TOKEN_CHARS + 1), 1, TENANT_ONLY)


def test_signatures_are_compared_with_compare_digest(monkeypatch):
    """Timing independent of where two signatures differ: the comparison is hmac.compare_digest."""
    seen: list[tuple[bytes, bytes]] = []
    real = tokens.hmac.compare_digest

    def spy(a, b):
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(tokens.hmac, "compare_digest", spy)
    tokens.verify(SECRET, VECTOR, 1_700_000_001, TENANT_ONLY)
    assert len(seen) == 1 and len(seen[0][0]) == 32


@given(position=st.integers(min_value=0, max_value=len(VECTOR) - 1), replacement=st.characters(codec="ascii"))
def test_any_changed_character_fails(position, replacement):
    if VECTOR[position] == replacement:
        return
    tampered = VECTOR[:position] + replacement + VECTOR[position + 1 :]
    with pytest.raises(tokens.InvalidToken):
        tokens.verify(SECRET, tampered, 1_700_000_001, TENANT_ONLY)
