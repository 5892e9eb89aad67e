"""JS regex source → Python translation: behaviour JS would show, and what must be rejected."""

from __future__ import annotations

import pytest
from amsg.domain.jsregex import compile_js_pattern, translate_js_pattern


def matches(source: str, text: str) -> str | None:
    m = compile_js_pattern(source).search(text)
    return None if m is None else m.group(0)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (r"\d", "[0-9]"),
        (r"(?<n>a)", "(?P<n>a)"),
        (r"^a$", r"\Aa\Z"),
        (r"[]", "(?!)"),
        (r"a{2,3}?", "a{2,3}?"),
        (r"\/", r"\x2f"),
    ],
)
def test_translation_table(source: str, expected: str) -> None:
    assert translate_js_pattern(source) == expected


# (source, text, what JavaScript's RegExp.prototype.exec finds: match text or None)
JS_BEHAVIOUR = [
    # ASCII-only classes
    (r"\d+", "٣4", "4"),
    (r"\w+", "café", "caf"),
    (r"\W", "é", "é"),
    (r"\D", "5x", "x"),
    # JS whitespace set: includes U+3000 / U+FEFF, excludes U+001C and U+0085 (Python's \s has both)
    (r"\s", "a\u3000b", "\u3000"),
    (r"\s", "a\ufeffb", "\ufeff"),
    (r"\s", "a\x1cb\x85", None),
    (r"\S+", " \x1c\x85 ", "\x1c\x85"),
    (r"[\s]", "\u2028", "\u2028"),
    (r"[^\s]", " \u00a0x", "x"),
    # dot excludes the four line terminators only
    (r"a.b", "a\u2028b", None),
    (r"a.b", "a\rb", None),
    (r"a.b", "a\x85b", "a\x85b"),
    (r"[^]", "\n", "\n"),
    (r"[]", "anything", None),
    (r"[^]*", "a\nb", "a\nb"),
    # anchors without the m flag
    (r"a$", "a\n", None),
    (r"a$", "ba", "a"),
    (r"^b", "a\nb", None),
    # ASCII word boundary
    (r"\bé", "café", "é"),  # é is not a JS word character, so "f" then "é" is a boundary
    (r"f\b", "café", "f"),
    (r"\Bx", "ax", "x"),
    # named groups and backreferences (unset group → empty)
    (r"(?<q>['\"])x\k<q>", "'x\"'x'", "'x'"),
    (r"(a)|\1b", "b", "b"),
    (r"\1(a)", "a", "a"),
    (r"(a\1)", "a", "a"),
    (r"(a)\1", "aa", "aa"),
    (r"(?<$d>x)\k<$d>", "xx", "xx"),
    # escapes
    (r"\cJ", "\n", "\n"),
    (r"\c1", "\\c1", "\\c1"),
    (r"[\c1]", "\x11", "\x11"),
    (r"[\c_]", "\x1f", "\x1f"),
    (r"\x41", "A", "A"),
    (r"\x4", "x4", "x4"),
    (r"\u00e9", "é", "é"),
    (r"\u12", "u12", "u12"),
    (r"\uD83D\uDE00", "a😀", "😀"),
    (r"[\uD83D\uDE00]", "😀", "😀"),
    (r"\0", "\x00", "\x00"),
    (r"\012", "\n", "\n"),
    (r"\08", "\x008", "\x008"),
    (r"[\1]", "\x01", "\x01"),
    (r"[\8]", "8", "8"),
    (r"[\b]", "\x08", "\x08"),
    (r"\a\e\z\-", "aez-", "aez-"),
    (r"\k", "k", "k"),
    (r"\/", "a/b", "/"),
    (r"\f\n\r\t\v", "\f\n\r\t\v", "\f\n\r\t\v"),
    # braces and brackets outside quantifiers/classes are literal (Annex B)
    (r"a{,3}", "a{,3}", "a{,3}"),
    (r"a{2}", "aaa", "aa"),
    (r"a{2,}", "aaaa", "aaaa"),
    (r"{", "{", "{"),
    (r"}]", "}]", "}]"),
    (r"x{a}", "x{a}", "x{a}"),
    # classes: ranges, dashes, class escapes next to a dash
    (r"[a-c]+", "xabcd", "abc"),
    (r"[a-]+", "a-b", "a-"),
    (r"[-a]+", "a-b", "a-"),
    (r"[\w-z]+", "é-z_", "-z_"),
    (r"[\d-z]+", "1-z", "1-z"),
    (r"[^a-z]+", "ab12cd", "12"),
    (r"[.]", "a.b", "."),
    (r"[\]]", "]", "]"),
    (r"[\\]", "\\", "\\"),
    # groups, lookarounds, quantifiers
    (r"(?:ab)+", "ababa", "abab"),
    (r"(?=a)a", "ba", "a"),
    (r"(?!a)\w", "ab", "b"),
    (r"(?<=\$)\d+", "$42", "42"),
    (r"(?<!\$)\b\d+", "$42 17", "17"),
    (r"a+?", "aaa", "a"),
    (r"a??b", "ab", "ab"),
    (r"((a)b)+", "abab", "abab"),
    (r"(a|b)+", "abba", "abba"),
    (r"(?:(a)|b)?c", "bc", "bc"),
    # variable-width lookbehind, matched right to left as in JavaScript
    (r"(?<=a+)b", "aab", "b"),
    (r"(?<=a|bc)d", "bcd", "d"),
    (r"(?<=[。！？]+)好", "你好。！好", "好"),
    # JavaScript refuses an iteration beyond the minimum that matches empty and tries the next alternative
    (r"(a??|b)?", "b", "b"),
    (r"(?:a??|b)+c", "bbc", "bbc"),
    (r"(。??[\s,]??|[^\s]{0,3})?", "é1_", "é1_"),
    (r"(?:x?)+y", "xxy", "xxy"),
    (r"(?:a??){2}b", "ab", "ab"),
    (r"(a|)+", "aab", "aa"),
    # bounded fixed nesting
    (r"(?:。{2}){2}", "一。。。。二", "。。。。"),
    (r"(?:\d{3},)+", "1,234,567,", "234,567,"),
    (r"", "abc", ""),
    (r"a|", "b", ""),
    (r"。|！", "你好！", "！"),
]


@pytest.mark.parametrize(("source", "text", "expected"), JS_BEHAVIOUR)
def test_matches_like_javascript(source: str, text: str, expected: str | None) -> None:
    assert matches(source, text) == expected


def test_capture_groups_keep_javascript_numbering() -> None:
    pattern = compile_js_pattern(r"(?<a>x)(?:y)(z)(?=(w))")
    m = pattern.search("xyzw")
    assert m is not None
    assert m.groups() == ("x", "z", "w")
    assert pattern.groups == 3


@pytest.mark.parametrize(
    ("source", "text", "groups"),
    [
        # the optional group's only iteration would be empty: JS leaves it undefined, not ''
        (r"\u3002|( ??\u3002*\d*)?", "x", (None,)),
        (r"(a|)+", "aab", ("a",)),
        (r"(a?)+", "b", ("",)),  # the first (mandatory) iteration may be empty
        (r"(?:(?=(a)))?b", "ab", (None,)),  # an iteration that is always empty never counts
        (r"(?:(x)|(y)?)?z", "z", (None, None)),
        # JS clears a repeated group's captures at every iteration: the last iteration's values only
        (r"(?:(a)|b)+", "ab", (None,)),
        (r"((a)|b)*", "ab", ("b", None)),
        (r"(?:(a)?b){2}", "abb", (None,)),
        (r"(?:(a)|b)+", "ba", ("a",)),
        (r"(?:(?:(a)|b)c)+", "acbc", (None,)),
        (r"(?:(x)|y(z)?)+", "xyzy", (None, None)),
        # in a look-behind JavaScript matches right to left, so the later group takes the character first
        (r"(?<=(?:([ab]?)([ab]?))?)z", "az", ("", "a")),
        (r"(?<=(?=(?:([ab]?)([ab]?))?)..)z", "abz", ("a", "b")),  # a look-ahead in it runs left to right
        # an empty capture at the last iteration's start: the tree says whose it is
        (r"(?:b(a?)|c)+", "bc", (None,)),  # only an iteration's end: the previous one's
        (r"(?:(a?)b|c)+", "bc", (None,)),
        (r"(?:(a?)b|c)+", "cb", ("",)),  # only an iteration's start: the last one's
    ],
)
def test_captures_follow_javascripts_repeat_rules(source: str, text: str, groups: tuple[str | None, ...]) -> None:
    m = compile_js_pattern(source).search(text)
    assert m is not None
    assert m.groups() == groups


def test_non_participating_group_is_none() -> None:
    m = compile_js_pattern(r"(-)|(_)").search("_")
    assert m is not None
    assert m.groups() == (None, "_")


def test_compile_is_cached() -> None:
    assert compile_js_pattern(r"([,;])") is compile_js_pattern(r"([,;])")


@pytest.mark.parametrize(
    "source",
    [
        # JavaScript syntax errors
        "(",
        ")",
        "a)",
        "[a",
        "*a",
        "+",
        "?",
        "a**",
        "a{2}{3}",
        "{2}",
        "x|{1,}",
        "[z-a]",
        "a{3,2}",
        "\\",
        "[\\",
        "^*",
        "$+",
        "\\b+",
        "(?<=a)+",
        "(?<!a)*",
        "(?P<n>a)",
        "(?#comment)",
        "(?<>a)",
        "(?<1a>a)",
        "(?<a>x)(?<a>y)",
        "\\k<x>(?<y>a)",
        "(?<y>a)[\\k]",
        # u-flag syntax: without the flag JS reads these as literal text, never the author's intent
        "\\p{L}",
        "\\P{Lu}",
        "[\\p{L}]",
        "\\u{1F600}",
        "[\\u{41}]",
        # inline modifiers
        "(?i:a)",
        "(?i)a",
        # backreference to a group that does not exist (Annex B would read an octal escape)
        "\\1",
        "\\2(a)",
        "(a)\\10",
        # lone surrogates
        "\\uD83D",
        "\\uDE00",
        "[\\uD83D]",
        "\ud83d",
        # quantified lookahead (Annex B allows it; capture effects differ)
        "(?=a)*",
        "(?!a)+",
        # a backreference inside a lookbehind
        "(a)(?<=\\1)b",
        # a backreference inside a quantified group that can match empty
        "(a)(?:\\1|b)?",
        # a repeated group's optional capture we cannot follow through JS's per-iteration reset: one that can
        # match empty where an iteration starts and where one ends, one inside a look-around, one referred back
        # to, a repeat inside a look-behind
        "(?:(a?)|b)+",
        "(?:(?!(a))b)+",
        "(?:(?=(a))a|b)+",
        "(?:(a)|b)+\\1",
        "(?<=(?:(a)|b)+)c",
        # Python cannot repeat that often
        "a{4294967295}",
        # the rewrite for JavaScript's empty-repeat rule would be too large
        "(?:(?:a?){99}){99}",
    ],
)
def test_rejected(source: str) -> None:
    with pytest.raises(ValueError):
        compile_js_pattern(source)


def test_non_string_rejected() -> None:
    with pytest.raises(ValueError):
        translate_js_pattern(42)  # type: ignore[arg-type]


def test_deep_nesting_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        compile_js_pattern("(" * 5000 + "a" + ")" * 5000)


@pytest.mark.parametrize(
    "source",
    [
        r"([。！？!?]+)",
        r"([\n]+)",
        r"(\n\n+)",
        r"([,;])",
        r"\n",
        r"(\d)(x)?",
        r"(-)|(_)",
        r"(?<sep>[.!?])\s+",
        r"(?:\r?\n)+",
        r"(~{3,})",
        r"(\s*[;；]\s*)",
        r"(?<=[。！？])",
        r"(?<=[。！？]+)",
        r"([，,]\s*|\s+)?",
    ],
)
def test_typical_split_patterns_compile(source: str) -> None:
    compile_js_pattern(source)
