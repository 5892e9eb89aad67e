"""User-supplied regexes never run unbounded: catastrophic shapes are refused when compiled (so at
schedule/update time), and every match at split time runs under a CPU budget whose exhaustion is a permanent
delivery failure."""

from __future__ import annotations

import time

import pytest
import regex
from amsg.domain import splitting
from amsg.domain.jsregex import compile_js_pattern
from amsg.domain.splitting import SplitPatternFailure, js_split, split_message
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples

# the fuzzer's reproducers, and the classic shapes around them
CATASTROPHIC = [
    "(?:a+)+b",
    "(a+)+b",
    "(a|aa)+$",
    "(.*a){20}",
    "(x+x+)+y",
    "(\\w|_)*!",
    "(?:a*b*)*c",
    "(?:\\s+\\S*)+$",
    # ambiguous only once JavaScript's empty-repeat rule is spelled out: (?:a?a?)+ runs as (?:a?a?)(?:aa?|a)*
    "(?:a?a?)+b",
    "(?:(?:a?){2})+b",
]
# shapes that must stay accepted: the default, real-world separators, bounded inner repeats
ACCEPTED = [
    "([。！？!?]+)",
    "\\n",
    "(?:\\r?\\n)+",
    "([,;])",
    "(?:\\r\\n|\\n)+",
    "[.!?]\\s+",
    "(-)|(_)",
    "(?:ab?)+",
    "(\\d{1,3}),",
    "\\s*\\s*x",
    # bounded fixed nesting matches its text one way only
    "(?:。{2}){2}",
    "(?:\\d{3},)+",
    "(?:(?:ab){2}c)+",
    # JavaScript accepts these, and so do we now
    "(a|)+",
    "(?<=[。！？]+)",
    "(。??[\\s,]??|[^\\s]{0,3})?",
]


@pytest.mark.parametrize("source", CATASTROPHIC)
def test_catastrophic_patterns_are_refused_when_compiled(source: str) -> None:
    with pytest.raises(ValueError, match=r"repeat|alternatives"):
        compile_js_pattern(source)


@pytest.mark.parametrize("source", ACCEPTED)
def test_ordinary_patterns_stay_accepted(source: str) -> None:
    compile_js_pattern(source)


inner = st.sampled_from(["a+", "a*", "(?:ab)+", ".*a", "\\w+", "[ab]{2,}", "x+x+"])
outer = st.sampled_from(["(?:{})+", "({})*", "(?:{}){{3,}}", "({}){{20}}", "(?:c|{})+"])


@settings(max_examples=examples(60), deadline=None)
@given(inner, outer)
def test_generated_nested_repeats_are_refused(inner_src: str, outer_src: str) -> None:
    with pytest.raises(ValueError):
        compile_js_pattern(outer_src.format(inner_src))


@pytest.mark.parametrize("size", [10_000, 200_000])
def test_static_check_is_fast_on_long_patterns(size: int) -> None:
    """The checks walk the tree once: a long (over-limit) pattern is refused or accepted in well under a second."""
    start = time.perf_counter()
    with pytest.raises(ValueError):
        compile_js_pattern("(?:" + "a" * size + "+)+")
    assert time.perf_counter() - start < 5


def test_a_slow_match_stops_at_the_budget() -> None:
    slow = regex.compile("(a|aa)+$")  # what the static check refuses, run unguarded to exercise the budget
    start = time.perf_counter()
    with pytest.raises(TimeoutError):
        js_split("a" * 40 + "!", slow, splitting._Deadline(0.05))
    assert time.perf_counter() - start < 5


def test_budget_exhaustion_is_a_permanent_delivery_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(splitting, "compile_js_pattern", lambda source: regex.compile("(a|aa)+$"))
    with pytest.raises(SplitPatternFailure) as caught:
        split_message("a" * 40 + "!", "(a|aa)+$", budget_s=0.05)
    assert caught.value.permanent is True
    assert caught.value.code == "SPLIT_PATTERN_FAILED"
    assert "CPU time" in str(caught.value)


def test_a_stored_pattern_we_no_longer_accept_fails_permanently() -> None:
    with pytest.raises(SplitPatternFailure) as caught:
        split_message("aaaa!", "(?:a+)+b")
    assert caught.value.permanent is True


def test_the_fuzzer_reproducer_no_longer_holds_a_split() -> None:
    start = time.perf_counter()
    with pytest.raises(SplitPatternFailure):
        split_message("a" * 30 + "!", "(?:a+)+b")
    assert time.perf_counter() - start < 1
