"""Message splitting (see docs/compatibility.md) and JS ``String.prototype.split``."""

from __future__ import annotations

import pytest
from amsg.domain import splitting
from amsg.domain.jsregex import compile_js_pattern
from amsg.domain.jsvalues import JS_WHITESPACE
from amsg.domain.splitting import DEFAULT_SPLIT_PATTERN, js_split, split_message
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples

# The reference's vectors; `a\nb\nc` uses the documented value (the reference glued it to `ab`, `c`).
SPEC_VECTORS = [
    ("你好。世界！再见？", None, ["你好。", "世界！", "再见？"]),
    ("行一\n行二\n行三", "([\n]+)", ["行一\n", "行二\n", "行三"]),
    ("段一句一。段一句二。\n\n段二句一。", ["(\n\n+)", "([。！？!?]+)"], ["段一句一。", "段一句二。", "段二句一。"]),
    ("Hello!! World?! ok", None, ["Hello!!", "World?!", "ok"]),
    ("  no punctuation  ", None, ["no punctuation"]),
    ("。。。", None, ["。。。"]),
    ("a, b; c", "([,;])", ["a,", "b;", "c"]),
    ("Hi. There", None, ["Hi. There"]),
    ("a\nb\nc", "\\n", ["a", "b", "c"]),
]


@pytest.mark.parametrize(("text", "pattern", "expected"), SPEC_VECTORS)
def test_spec_vectors(text: str, pattern: str | list[str] | None, expected: list[str]) -> None:
    assert split_message(text, pattern) == expected


@pytest.mark.parametrize(
    ("text", "pattern", "expected"),
    [
        # uncaptured separators vanish, including the empty pattern
        ("abc", "", ["a", "b", "c"]),
        ("one--two", "-+", ["one", "two"]),
        # a group that does not participate contributes nothing and never throws
        ("a-b_c", "(-)|(_)", ["a-", "b_", "c"]),
        ("1x 2 3", "(\\d)(x)?", ["1x 2 3"]),  # every piece blank: chunk kept whole
        ("a1b2x c", "(\\d)(x)?", ["a1", "b2x", "c"]),
        # every participating capture is glued, not only the first
        ("a, b", "(,)(\\s*)", ["a, ", "b"]),
        # named groups are captures too
        ("x!y", "(?<p>!)", ["x!", "y"]),
        # [] and None mean the default
        ("好。的", [], ["好。", "的"]),
        ("好。的", None, ["好。", "的"]),
        ("好。的", ("([。])",), ["好。", "的"]),
        # blank pieces are dropped together with their separator
        ("你好。 \n 世界", None, ["你好。", "世界"]),
        ("!!Hello", None, ["Hello"]),
        # trimming uses the JS whitespace set: U+FEFF trimmed, U+001C kept (str.strip would drop it)
        ("\ufeffhi。\u3000", None, ["hi。"]),
        ("\x1chi。", None, ["\x1chi。"]),
        # astral characters are whole characters
        ("😀！好", None, ["😀！", "好"]),
        # lookbehind sees text before the search position
        ("a1b2", "(?<=\\d)", ["a1", "b2"]),
        # a variable-width lookbehind: split after each run of punctuation, as V8 does
        ("你好。再见！！好的", "(?<=[。！？]+)", ["你好。", "再见！", "！", "好的"]),
        # ^ only matches at the start of the chunk
        ("abab", "^a", ["bab"]),
        # cascade: a chunk the first pattern leaves alone is still split by the next one
        ("一。二", ["(\n\n+)", "([。])"], ["一。", "二"]),
        # cascade applies every pattern to every chunk
        ("a;b,c;d", ["(;)", "(,)"], ["a;", "b,", "c;", "d"]),
        # no usable piece: the chunk is returned untrimmed
        ("  ", None, ["  "]),
        ("", None, [""]),
    ],
)
def test_split_message(text: str, pattern: str | list[str] | None, expected: list[str]) -> None:
    assert split_message(text, pattern) == expected


# String.prototype.split results, as JavaScript gives them (None = undefined).
@pytest.mark.parametrize(
    ("text", "source", "expected"),
    [
        ("abc", "", ["a", "b", "c"]),
        ("abc", "(?:)", ["a", "b", "c"]),
        ("", "a", [""]),
        ("", "", []),
        ("", "(?:)", []),
        ("a,b,", ",", ["a", "b", ""]),
        (",a", ",", ["", "a"]),
        ("ab", "a*?", ["a", "b"]),
        ("ab", "a*", ["", "b"]),
        ("abc", "$", ["abc"]),
        ("abc", "x*", ["a", "b", "c"]),
        (
            "A<B>bold</B>and<CODE>coded</CODE>",
            "<(\\/)?([^<>]+)>",
            ["A", None, "B", "bold", "/", "B", "and", None, "CODE", "coded", "/", "CODE", ""],
        ),
        ("a-b_c", "(-)|(_)", ["a", "-", None, "b", None, "_", "c"]),
        # as V8 splits: an empty iteration of the optional group is refused, so the second branch matches
        ("é1_！-_", "(。??[\\s,]??|[^\\s]{0,3})?", ["", "é1_", "", "！-_", ""]),
        # ... and a group whose only iteration would be empty stays undefined
        ("a。1 b", "\\u3002|( ??\\u3002*\\d*)?", ["a", None, "", "1", "", " ", "b"]),
        # a repeated group's capture holds its last iteration's value, undefined if that one skipped it
        ("x ab y ba z", "(?:(a)|b)+", ["x ", None, " y ", "a", " z"]),
    ],
)
def test_js_split(text: str, source: str, expected: list[str | None]) -> None:
    assert js_split(text, compile_js_pattern(source)) == expected


def test_default_pattern_is_the_reference_one() -> None:
    assert DEFAULT_SPLIT_PATTERN == "([。！？!?]+)"


@pytest.mark.parametrize("pattern", ["(", "\\p{L}", ["([。])", "(a+)+"]])
def test_untranslatable_pattern_raises_value_error(pattern: str | list[str]) -> None:
    with pytest.raises(ValueError):
        split_message("text", pattern)


@pytest.mark.parametrize("pattern", [42, {"a": 1}, ["ok", 3]])
def test_wrong_pattern_type_raises_value_error(pattern: object) -> None:
    with pytest.raises(ValueError):
        split_message("text", pattern)  # type: ignore[arg-type]


# texts made of the characters the default split cares about (its separators, JavaScript's whitespace, which
# trimming drops, a full stop it does not split on), mixed with anything else
_SPLIT_ALPHABET = st.sampled_from([*"。！？!?", *JS_WHITESPACE, ".", "a", "字", "\U0001f600", "\ud800"])
_SPLIT_TEXTS = st.one_of(st.text(_SPLIT_ALPHABET, max_size=40), st.text(max_size=40))


@settings(max_examples=examples(500), deadline=None)
@given(text=_SPLIT_TEXTS)
def test_the_default_split_is_the_general_paths(text: str) -> None:
    """The default split's own path (no splitPattern) gives exactly what the general path gives with the same
    pattern given explicitly: the translator, JavaScript's split loop and the trimming."""
    general = split_message(text, DEFAULT_SPLIT_PATTERN)
    assert split_message(text, None) == general
    assert split_message(text, []) == general
    assert split_message(text, [DEFAULT_SPLIT_PATTERN]) == general


def test_the_default_split_runs_without_the_translator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every delivery without a splitPattern splits: that path skips the JavaScript pattern's translation and
    split loop (and their budget clock), which cost it several times as much CPU."""

    def refused(source: str) -> None:
        raise AssertionError(f"the default split compiled {source!r}")

    monkeypatch.setattr(splitting, "compile_js_pattern", refused)
    assert split_message(" 你好。世界！！ 再见 ", None) == ["你好。", "世界！！", "再见"]
    assert split_message("。。。", []) == ["。。。"]
