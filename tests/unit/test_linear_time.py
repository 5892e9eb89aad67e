"""Property: every check on a request body runs in time linear in its size. For generated hostile bodies (see
tests/support/hostile.py) the time per byte of the body path production runs — size limit, decoding, envelope
JSON with its depth check, envelope shape — stays flat from 4 KB to 4 MB. Ratios with wide margins, never
absolute times: a quadratic check would grow 1,000-fold over that range."""

from __future__ import annotations

from amsg.crypto import UserCodec
from amsg.errors import ApiError
from amsg.http.body import read_body
from amsg.http.gates import decrypt_request_object
from amsg.http.request import ApiRequest
from hypothesis import HealthCheck, given, settings

from tests.support.hostile import SHAPES, grow, hostile_shapes, seconds_per_byte

USER_KEY = "11" * 32
SMALL, LARGE = 4_096, 4_000_000
# flat is a ratio near 1 (cache effects reach ~8 on a busy machine); quadratic would be ~1,000
MAX_RATIO = 50.0


def body_checks(text: str) -> None:
    request = ApiRequest("POST", "/schedule-message", headers={"x-payload-encrypted": "true"}, raw_body=text.encode())
    try:
        decrypt_request_object(read_body(request), UserCodec(USER_KEY))
    except ApiError:
        pass


def ratio(shape: tuple[str, str]) -> float:
    small = seconds_per_byte(body_checks, grow(shape, SMALL), repeats=5)
    large = seconds_per_byte(body_checks, grow(shape, LARGE), repeats=2)
    return large / small


def test_the_fuzzer_reproducer_is_linear() -> None:
    assert ratio(SHAPES[0]) < MAX_RATIO


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_shapes)
def test_body_checks_take_flat_time_per_byte(shape: tuple[str, str]) -> None:
    assert ratio(shape) < MAX_RATIO, shape
