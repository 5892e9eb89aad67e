"""Hostile request bodies and patterns: time per byte of the body checks from 4 KB to 4 MB for every shape in
tests/support/hostile.py (flat = linear; the old quadratic check showed ~1,000x), and how long the fuzzer's
catastrophic ``splitPattern``s take now (refused when compiled; a slow match stops at the split budget).

``python -m bench hostile``. Numbers are printed, never asserted (tests/unit/test_linear_time.py asserts)."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = (4_096, 65_536, 1_048_576, 4_000_000)
PATTERNS = ["(?:a+)+b", "(a+)+b", "(a|aa)+$", "(.*a){20}", "(x+x+)+y"]


def _body_checks():
    from amsg.errors import ApiError
    from amsg.http.body import read_body
    from amsg.http.gates import decrypt_request_object
    from amsg.http.request import ApiRequest

    def check(text: str) -> None:
        request = ApiRequest("POST", "/schedule-message", raw_body=text.encode())
        with contextlib.suppress(ApiError):
            decrypt_request_object(read_body(request), "11" * 32)

    return check


def bodies() -> None:
    from tests.support.hostile import SHAPES, grow, seconds_per_byte

    check = _body_checks()
    print("body checks, ns per byte (best of 3) and the 4 MB / 4 KB ratio")
    print(f"{'shape':28}" + "".join(f"{size:>12,}" for size in SIZES) + f"{'ratio':>8}")
    for shape in SHAPES:
        per_byte = [seconds_per_byte(check, grow(shape, size)) * 1e9 for size in SIZES]
        label = repr(shape[0][:4] + "…" + shape[1] if len(shape[0]) > 4 else shape[0] + shape[1])[:27]
        print(f"{label:28}" + "".join(f"{v:12.2f}" for v in per_byte) + f"{per_byte[-1] / per_byte[0]:8.2f}")


def patterns() -> None:
    from amsg.domain.splitting import SplitPatternFailure, split_message

    print("\nsplitPattern reproducers on 'a' * 30 + '!' (was up to 43.7 s)")
    for pattern in PATTERNS:
        start = time.perf_counter()
        try:
            split_message("a" * 30 + "!", pattern)
            outcome = "split"
        except SplitPatternFailure as failure:
            outcome = str(failure).split(":", 1)[0] + " (permanent)"
        print(f"  {pattern:12} {(time.perf_counter() - start) * 1000:8.2f} ms  {outcome}")


def main() -> None:
    for path in (ROOT, ROOT / "layers/shared"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    bodies()
    patterns()


if __name__ == "__main__":
    main()
