"""``PUT /push-subscription``'s bounds as properties: key lengths and formats, endpoint, expirationTime."""

from __future__ import annotations

import base64

import pytest
from amsg.domain.subscription import AUTH_BYTES, MAX_ENDPOINT_CHARS, P256DH_BYTES, normalize_subscription
from amsg.errors import ApiError
from hypothesis import given
from hypothesis import strategies as st

ENDPOINT = "https://push.example.test/x"


def b64url(data: bytes, *, padded: bool = False) -> str:
    text = base64.urlsafe_b64encode(data).decode()
    return text if padded else text.rstrip("=")


points = st.binary(min_size=P256DH_BYTES - 1, max_size=P256DH_BYTES - 1).map(lambda b: b"\x04" + b)
secrets = st.binary(min_size=AUTH_BYTES, max_size=AUTH_BYTES)


@given(points, secrets, st.booleans())
def test_well_formed_keys_are_kept(point: bytes, secret: bytes, padded: bool) -> None:
    keys = {"p256dh": b64url(point, padded=padded), "auth": b64url(secret, padded=padded)}
    stored = normalize_subscription({"endpoint": ENDPOINT, "keys": keys, "expirationTime": None, "x": 1})
    assert stored == {"endpoint": ENDPOINT, "expirationTime": None, "keys": keys}


@given(st.binary(max_size=120).filter(lambda b: len(b) != P256DH_BYTES or b[:1] != b"\x04"))
def test_any_other_p256dh_is_refused(raw: bytes) -> None:
    with pytest.raises(ApiError) as caught:
        normalize_subscription({"endpoint": ENDPOINT, "keys": {"p256dh": b64url(raw)}})
    assert caught.value.code == "INVALID_PUSH_SUBSCRIPTION"


@given(st.binary(max_size=80).filter(lambda b: len(b) != AUTH_BYTES))
def test_any_other_auth_length_is_refused(raw: bytes) -> None:
    with pytest.raises(ApiError):
        normalize_subscription({"endpoint": ENDPOINT, "keys": {"auth": b64url(raw)}})


@given(st.one_of(st.text(max_size=50), st.booleans(), st.lists(st.integers(), max_size=2), st.just(float("nan"))))
def test_expiration_time_must_be_null_or_a_finite_number(value: object) -> None:
    with pytest.raises(ApiError):
        normalize_subscription({"endpoint": ENDPOINT, "expirationTime": value})


@pytest.mark.parametrize("value", [None, 0, 1_700_000_000_000, 1.5])
def test_expiration_time_numbers_are_kept(value: object) -> None:
    assert normalize_subscription({"endpoint": ENDPOINT, "expirationTime": value})["expirationTime"] == value


def test_endpoint_length_bound() -> None:
    base = "https://push.example.test/"
    normalize_subscription({"endpoint": base + "x" * (MAX_ENDPOINT_CHARS - len(base))})
    with pytest.raises(ApiError):
        normalize_subscription({"endpoint": base + "x" * (MAX_ENDPOINT_CHARS - len(base) + 1)})
