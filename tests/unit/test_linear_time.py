"""Property: every check on a request body runs in time linear in its size. For generated hostile bodies (see
tests/support/hostile.py) the time per byte of the body path production runs — size limit, decoding, envelope
JSON with its depth check, envelope shape — stays flat from 4 KB to 4 MB. Ratios with wide margins, never
absolute times: a quadratic check would grow 1,000-fold over that range."""

from __future__ import annotations

import gc
import time

import pytest
from amsg.crypto import UserCodec
from amsg.domain import jsregex
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


# splitPattern sources, each grown from a unit: refused (nested or ambiguous repeats, an unterminated group) and
# accepted (look-behind of any width, the JS empty-repeat rewrite, fixed nesting). Validation refuses a source over
# 200 characters before compiling; the compile also runs at fire time on whatever was stored.
PATTERN_SHAPES = [
    ("(?:", "a+)+"),
    ("", "(?:a|a)+"),
    ("(?:", "(?:a?)?"),
    ("", "(?<=a+)"),
    ("", "(?:。{2}){2}"),
    ("", "a??"),
]
PATTERN_MAX_RATIO = 8.0  # 2K -> 50K characters: flat is near 1, quadratic ~25


def compile_cpu_per_char(source: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        jsregex.compile_js_pattern.cache_clear()
        jsregex.regex.purge()  # the regex package caches compiled sources too
        gc.disable()  # a collection of the whole test process's heap is no part of the compile
        start = time.process_time()
        try:
            jsregex.compile_js_pattern(source)
        except ValueError:
            pass
        finally:
            best = min(best, time.process_time() - start)
            gc.enable()
    return best / len(source)


@pytest.mark.parametrize("shape", PATTERN_SHAPES, ids=[unit for _, unit in PATTERN_SHAPES])
def test_split_pattern_checks_take_flat_time_per_character(shape: tuple[str, str]) -> None:
    """Parsing, the JS repeat rewrite, the safety walk and compiling a splitPattern are linear in its length."""
    small = compile_cpu_per_char(grow(shape, 2_000), repeats=5)
    large = compile_cpu_per_char(grow(shape, 50_000), repeats=2)
    assert large / small < PATTERN_MAX_RATIO, (shape, small, large)
