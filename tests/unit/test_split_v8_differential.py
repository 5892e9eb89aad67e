"""splitPattern against V8: generated patterns and BMP texts split by ``String.prototype.split`` in Node and by
:mod:`amsg.domain.splitting`, expecting no difference (docs/compatibility.md, "splitPattern").

One Node process serves the whole session (tests/support/js_split_oracle.mjs); it applies the project's
documented gluing rule to V8's split result, so both sides produce the same kind of answer. A case agrees when
both refuse the pattern, or both accept it and give the same raw ``split`` array (``undefined`` as ``None``) and
the same segments. Refusing what V8 accepts is allowed only for a documented reason (the safety rules);
accepting what V8 refuses never is. The text is BMP only: astral characters are a documented difference.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from amsg.domain.jsregex import compile_js_pattern
from amsg.domain.splitting import js_split, split_message
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow  # starts a Node process

ORACLE = Path(__file__).resolve().parents[1] / "support" / "js_split_oracle.mjs"
CASES = 500

# Why we may refuse what V8 accepts: the documented safety and faithfulness rules (jsregex.py, regex_safety.py).
DOCUMENTED_REFUSALS = re.compile(
    r"catastrophic|alternatives inside a repeat|optional captures|backreference inside|too complex"
    r"|backreference \\\d+ to a group that does not exist|needs? the u flag"
)

TEXT_ALPHABET = "ab1 ,。！？é_-\n好"
CHARS = ["a", "b", "1", " ", ",", "。", "！", "é", "_", "-", "\\n", "\\u3002", "\\x61", "\\.", "好"]
CLASSES = ["\\d", "\\s", "\\w", "\\S", "\\D", "\\W", ".", "[ab]", "[^\\s]", "[。！？]", "[\\s,]", "[^a]", "[^]"]
ASSERTIONS = ["^", "$", "\\b", "\\B"]
# optional and lazy quantifiers often: empty iterations are where engines differ
QUANTIFIERS = ["?", "?", "??", "??", "*", "+", "*?", "+?", "{2}", "{0,2}", "{1,3}", "{2,}", "{0,1}?", "{0,3}"]
GROUPS = ["(", "(", "(?:", "(?:", "(?<n>"]
LOOKAROUNDS = ["(?=", "(?!", "(?<=", "(?<!"]


class PatternMaker:
    """Random JavaScript regex sources over a small alphabet, weighted towards groups that can match empty.

    Driven by a ``random.Random`` seeded by Hypothesis: plain weights give far more of the shapes where engines
    differ than Hypothesis's own structure strategies (or its ``randoms()``), which favour the smallest values.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.names = 0
        self.groups = 0

    def pattern(self) -> str:
        source = self.alternation(depth=0)
        if self.groups and self.rng.random() < 0.15:
            source += f"\\{self.rng.randint(1, self.groups)}"
        return source

    def alternation(self, depth: int) -> str:
        count = self.rng.choice([1, 1, 2, 3] if depth else [1, 1, 1, 2])
        return "|".join(self.sequence(depth) for _ in range(count))

    def sequence(self, depth: int) -> str:
        if depth and self.rng.random() < 0.2:
            return ""
        return "".join(self.term(depth) for _ in range(self.rng.choice([1, 1, 2, 3])))

    def term(self, depth: int) -> str:
        roll = self.rng.random()
        if roll < 0.08:
            return self.rng.choice(ASSERTIONS)
        if roll < 0.4 and depth < 3:
            atom = self.group(depth + 1)
        else:
            atom = self.rng.choice(CHARS if self.rng.random() < 0.6 else CLASSES)
        return atom + (self.rng.choice(QUANTIFIERS) if self.rng.random() < 0.55 else "")

    def group(self, depth: int) -> str:
        if self.rng.random() < 0.15:
            return f"(?:{self.rng.choice(LOOKAROUNDS)}{self.alternation(depth)}))"  # quantifiable in a group
        opener = self.rng.choice(GROUPS)
        if opener == "(?<n>":
            self.names += 1
            opener = f"(?<n{self.names}>"
        if opener != "(?:":
            self.groups += 1
        return f"{opener}{self.alternation(depth)})"


# inserted now and then: JavaScript syntax errors, and Annex B's literal readings of near-syntax
MUTATIONS = ["(", ")", "*", "{2}", "[", "\\", "?", "(?<", "\\k<x>", "{1,", "]", "}", "(?<=", "\\u{61}", "\\p{L}", "\\c"]


def _mutated(rng: random.Random, source: str) -> str:
    at = rng.randint(0, len(source))
    return source[:at] + rng.choice(MUTATIONS) + source[at:]


def make_case(rng: random.Random, *, behind: bool = False) -> tuple[list[str], str]:
    """Patterns and a text; ``behind``: one look-behind (JavaScript matches its body right to left)."""
    if behind:
        body = PatternMaker(rng).alternation(depth=1)
        return [f"(?<={body}){rng.choice(['', '', 'a', ',', '。'])}"], "".join(
            rng.choice("ab, 。") for _ in range(rng.randint(0, 12))
        )
    patterns = [PatternMaker(rng).pattern() for _ in range(rng.choice([1, 1, 1, 2]))]
    if rng.random() < 0.15:
        patterns[-1] = _mutated(rng, patterns[-1])
    alphabet = TEXT_ALPHABET if rng.random() < 0.3 else "ab, 。"  # a small one makes the pattern match more
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
    return patterns, text


class V8:
    """The Node process answering split cases, one JSON line each way."""

    def __init__(self, node: str) -> None:
        self.process = subprocess.Popen(
            [node, str(ORACLE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8"
        )

    def split(self, patterns: list[str], text: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"patterns": patterns, "text": text}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the V8 oracle exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


@pytest.fixture(scope="session")
def v8() -> Iterator[V8]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node not found on PATH: the V8 differential test of splitPattern needs Node.js (CI has it)")
    oracle = V8(node)
    yield oracle
    oracle.close()


def python_split(patterns: list[str], text: str) -> dict[str, Any]:
    """The same answer as the oracle's, from the production split."""
    try:
        compiled = compile_js_pattern(patterns[0])
        for source in patterns[1:]:
            compile_js_pattern(source)
    except ValueError as exc:
        return {"error": str(exc)}
    return {"raw": js_split(text, compiled), "segments": split_message(text, patterns)}


def difference(patterns: list[str], text: str, v8: V8) -> str | None:
    """Why Python and V8 disagree on this case, or None."""
    ours, theirs = python_split(patterns, text), v8.split(patterns, text)
    if "error" in theirs:
        return None if "error" in ours else f"V8 refuses ({theirs['error']}), we accept"
    if "error" in ours:
        return None if DOCUMENTED_REFUSALS.search(ours["error"]) else f"we refuse ({ours['error']}), V8 accepts"
    if ours != theirs:
        return f"V8 {theirs}, we {ours}"
    return None


@seed(20261204)
@settings(max_examples=CASES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32))
def test_generated_patterns_split_as_v8_splits(v8: V8, case_seed: int) -> None:
    patterns, text = make_case(random.Random(case_seed))
    assert difference(patterns, text, v8) is None, (patterns, text)


@seed(20261205)
@settings(max_examples=CASES // 2, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32))
def test_generated_look_behinds_split_as_v8_splits(v8: V8, case_seed: int) -> None:
    patterns, text = make_case(random.Random(case_seed), behind=True)
    assert difference(patterns, text, v8) is None, (patterns, text)


@pytest.mark.parametrize(
    ("patterns", "text"),
    [
        (["(?<=[。！？]+)"], "你好。再见！！好的"),  # variable-width look-behind
        (["(。??[\\s,]??|[^\\s]{0,3})?"], "é1_！-_"),  # an empty iteration is rejected, the next branch tried
        (["\\u3002|( ??\\u3002*\\d*)?"], "a。1 b"),  # the group does not take part: undefined, not ''
        (["(?:。{2}){2}"], "一。。。。二"),  # bounded fixed nesting
        (["(a|)+", "(,)"], "baab,ab"),
        (["(?:(a)|b)+"], "x ab y ba z"),  # JS clears a repeated group's captures at every iteration
        (["(?<=(?:([ab]?)([ab]?))?)z"], "az baz"),  # look-behind runs right to left
        (["([。！？!?]+)"], "你好。世界！再见？"),
    ],
)
def test_issue_cases_split_as_v8_splits(v8: V8, patterns: list[str], text: str) -> None:
    assert "error" not in python_split(patterns, text)
    assert difference(patterns, text, v8) is None


def test_astral_text_splits_by_code_point_where_v8_splits_by_utf16_unit(v8: V8) -> None:
    """The documented difference (docs/decisions.md #34): V8 cuts an emoji into two lone surrogates, we never do."""
    theirs = v8.split([""], "a😀")
    assert theirs["raw"] == ["a", "\ud83d", "\ude00"]
    assert python_split([""], "a😀") == {"raw": ["a", "😀"], "segments": ["a", "😀"]}
    # text without a character the pattern can cut in two splits alike
    assert difference(["([。！？!?]+)"], "好😀。再见！", v8) is None
