"""Error-summary sanitization and credential redaction."""

from __future__ import annotations

import pytest
from amsg.domain.jsvalues import utf16_len
from amsg.domain.redaction import looks_like_model_id, redact_credentials, sanitize_error_summary

SPEC_VECTORS = [
    ("Incorrect API key provided: sk-9aBcDeFgHiJkLmNo_PqRsTu", "Incorrect API key provided: [redacted]"),
    ("Authorization: Bearer abcdefgh12345678", "Authorization: Bearer [redacted]"),
    ("The model gpt-4o-mini-2024-07-18 does not exist", "The model gpt-4o-mini-2024-07-18 does not exist"),
    ("model claude-3-5-sonnet-20241022 not found", "model claude-3-5-sonnet-20241022 not found"),
    ("key sk-550e8400-e29b-41d4-a716-446655440000 invalid", "key [redacted] invalid"),
    ("mixtral-8x7b-instruct overloaded", "mixtral-8x7b-instruct overloaded"),
    ("token eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9eyJzdWIiOiIxMjM0NTY3ODkwIn0abc", "token [redacted]"),
    ("  multi\n\nline\t error  ", "multi line error"),
]


@pytest.mark.parametrize(("raw", "expected"), SPEC_VECTORS)
def test_spec_vectors(raw: str, expected: str) -> None:
    assert sanitize_error_summary(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # rule 1: case-insensitive keyword, ≥ 8 token characters, any JS whitespace
        ("bearer   abcdefgh", "Bearer [redacted]"),
        ("BEARER\tab.cd~ef+g/h=", "Bearer [redacted]"),
        ("Bearer\u3000abcdefgh", "Bearer [redacted]"),
        ("Bearer abc1234", "Bearer abc1234"),
        ("Bearer", "Bearer"),
        # rule 2: needs a word boundary before the 2–6 letter prefix
        ("id=foo_sk-9aBcDeFgHiJkLmNoPq", "id=foo_sk-9aBcDeFgHiJkLmNoPq"),
        ("(sk-9aBcDeFgHiJkLmNoPq)", "([redacted])"),
        ("x sk-proj-abcdEFGH1234_-ijklMNOP y", "x [redacted] y"),
        ("xai-abcdefghijklmnopqrst", "[redacted]"),  # banned prefix even though lowercase
        ("gsk-abc-def-ghi-jkl-mno", "[redacted]"),
        # rule 2 only needs 16 tail characters: 15 is left alone
        ("abc-abcdefghijklmno", "abc-abcdefghijklmno"),
        # consecutive all-hex segments: 15 characters pass, 16 do not
        ("xyz-1234abcd-5678ef0", "xyz-1234abcd-5678ef0"),
        ("xyz-1234abcd-5678ef01", "[redacted]"),
        ("abc-1234abcd-5678ef0", "[redacted]"),  # `abc` is itself a hex segment: 18
        # letter/digit alternation: 2 changes pass, 3 do not (unless a MoE size)
        ("model-a1b-mini-largest", "model-a1b-mini-largest"),
        ("model-a1b2-mini-larger", "[redacted]"),
        ("mixtral-8x22b-instruct-v0.1", "mixtral-8x22b-instruct-v0.1"),
        # segments longer than 12 or upper case are not model ids
        ("llm-abcdefghijklmnop", "[redacted]"),
        ("abc-ABCDEFGHIJKLMNOP", "[redacted]"),
        # a UUID inside disqualifies
        ("run-550e8400-e29b-41d4-a716-446655440000", "[redacted]"),
        # uppercase model names without a 16-char tail are untouched
        ("model Meta-Llama-3.1-8B-Instruct missing", "model Meta-Llama-3.1-8B-Instruct missing"),
        # rule 3: long runs, spared when the stripped run is a model id (≤ 64)
        (
            "qwen2.5-coder-32b-instruct-preview-release-candidate busy",
            "qwen2.5-coder-32b-instruct-preview-release-candidate busy",
        ),
        (
            "/qwen2.5-coder-32b-instruct-preview-release-candidate.",
            "/qwen2.5-coder-32b-instruct-preview-release-candidate.",
        ),
        ("accounts/fireworks/models/llama-v3-405b-instruct-long", "[redacted]"),
        # rule 2 acts first: `v3p1` alternates 3 times, so the tail is taken for a key
        ("accounts/fireworks/models/llama-v3p1-405b-instruct-long", "accounts/fireworks/models/[redacted]"),
        ("a" * 47, "a" * 47),
        ("a" * 48, "[redacted]"),
        ("x " + "A1b2" * 12 + " y", "x [redacted] y"),
        # nothing to redact
        ("AI API error: 503 Service Unavailable", "AI API error: 503 Service Unavailable"),
        ("", ""),
    ],
)
def test_redaction_rules(raw: str, expected: str) -> None:
    assert sanitize_error_summary(raw) == expected


def test_redact_credentials_does_not_collapse_whitespace() -> None:
    assert redact_credentials("a\n\nBearer\tabcdefgh  b") == "a\n\nBearer [redacted]  b"


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("gpt-4o-mini-2024-07-18", True),
        ("claude-3-5-sonnet-20241022", True),
        ("mixtral-8x7b-instruct", True),
        ("llama3.1-70b", True),
        ("gpt", False),  # one segment
        ("4o-mini", False),  # must start with a letter
        ("sk-abc", False),
        ("token.abc", False),
        ("x" + "-y" * 32, False),  # 65 characters
        ("x" + "-y" * 31 + "z", True),  # 64 characters
        ("a" + "-b" * 31 + "c", False),  # `a`, `b`, `bc` are hex: a 32-character hex run
    ],
)
def test_looks_like_model_id(token: str, expected: bool) -> None:
    assert looks_like_model_id(token) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, ""), (42, "42"), (1.0, "1"), (1.5, "1.5"), (True, "true"), (False, "false"), (float("nan"), "NaN")],
)
def test_stringification(value: object, expected: str) -> None:
    assert sanitize_error_summary(value) == expected


def test_whitespace_is_the_javascript_set() -> None:
    # U+001C is whitespace to Python's str.split but not to JS \s
    assert sanitize_error_summary("\u3000a\ufeff\u2028b\x1cc ") == "a b\x1cc"


def test_exactly_500_units_is_kept() -> None:
    text = "ab " * 166 + "ab"
    assert len(text) == 500
    assert sanitize_error_summary(text) == text


def test_longer_text_keeps_497_units_and_an_ellipsis() -> None:
    text = "ab " * 200
    out = sanitize_error_summary(text)
    assert out == text.strip()[:497] + "…"
    assert len(out) == 498


def test_truncation_counts_utf16_units_and_never_splits_a_pair() -> None:
    out = sanitize_error_summary("😀" * 300)
    assert out == "😀" * 248 + "…"
    assert utf16_len(out) == 497
    # an odd offset: 497 units = 1 + 248 pairs exactly
    out = sanitize_error_summary("x" + "😀" * 300)
    assert out == "x" + "😀" * 248 + "…"
    assert utf16_len(out) == 498


def test_redaction_happens_before_truncation() -> None:
    secret = "sk-" + "Z9" * 20
    raw = "e " * 240 + secret + " tail"
    assert len(raw) > 500
    # redacted first, the text fits: nothing is cut
    assert sanitize_error_summary(raw) == "e " * 240 + "[redacted] tail"
