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
CASES = 400

# Why we may refuse what V8 accepts: the documented safety and faithfulness rules (jsregex.py, regex_safety.py).
DOCUMENTED_REFUSALS = re.compile(
    r"catastrophic|alternatives inside a repeat|optional captures|backreference inside|too complex"
    r"|backreference \\\d+ to a group that does not exist"
)

TEXT_ALPHABET = "ab1 ,。！？é_-\n好"
CHARS = ["a", "b", "1", " ", ",", "。", "！", "é", "_", "-", "\\n", "\\u3002", "\\x61", "\\.", "好"]
CLASSES = ["\\d", "\\s", "\\w", "\\S", "\\D", "\\W", ".", "[ab]", "[^\\s]", "[。！？]", "[\\s,]", "[^a]", "[^]"]
ASSERTIONS = ["^", "$", "\\b", "\\B"]
QUANTIFIERS = ["", "", "", "?", "*", "+", "??", "*?", "+?", "{2}", "{0,2}", "{1,3}", "{2,}", "{0,1}?", "{0,3}"]
GROUPS = ["(", "(?:", "(?<n>"]
LOOKAROUNDS = ["(?=", "(?!", "(?<=", "(?<!"]


def _alternation(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    term = st.one_of(
        st.tuples(inner, st.sampled_from(QUANTIFIERS)).map("".join),
        st.sampled_from(ASSERTIONS),
    )
    return st.lists(st.lists(term, max_size=3).map("".join), min_size=1, max_size=3).map("|".join)


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A group (quantified by the enclosing term) or a look-around (which JavaScript does not let us quantify)."""
    group = st.tuples(st.sampled_from(GROUPS), _alternation(inner)).map(lambda t: f"{t[0]}{t[1]})")
    lookaround = st.tuples(st.sampled_from(LOOKAROUNDS), _alternation(inner)).map(lambda t: f"{t[0]}{t[1]})")
    return st.one_of(group, group, lookaround.map(lambda s: f"(?:{s})"))


def _numbered(source: str) -> str:
    """Distinct group names, and backreferences only to groups that exist (so few cases are plain errors)."""
    count = iter(range(1, 100))
    source = re.sub(r"\(\?<n>", lambda _: f"(?<n{next(count)}>", source)
    groups = len(re.findall(r"\((?!\?)|\(\?<n", source))
    return source + ("\\1" if groups and source.endswith(")") and len(source) % 3 == 0 else "")


ATOMS = st.sampled_from(CHARS + CLASSES)
PATTERNS = _alternation(st.recursive(ATOMS, _extend, max_leaves=6)).map(_numbered)
TEXTS = st.text(alphabet=TEXT_ALPHABET, max_size=14)


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
@given(st.lists(PATTERNS, min_size=1, max_size=2), TEXTS)
def test_generated_patterns_split_as_v8_splits(v8: V8, patterns: list[str], text: str) -> None:
    assert difference(patterns, text, v8) is None, (patterns, text)


@pytest.mark.parametrize(
    ("patterns", "text"),
    [
        (["(?<=[。！？]+)"], "你好。再见！！好的"),  # variable-width look-behind
        (["(。??[\\s,]??|[^\\s]{0,3})?"], "é1_！-_"),  # an empty iteration is rejected, the next branch tried
        (["\\u3002|( ??\\u3002*\\d*)?"], "a。1 b"),  # the group does not take part: undefined, not ''
        (["(?:。{2}){2}"], "一。。。。二"),  # bounded fixed nesting
        (["(a|)+", "(,)"], "baab,ab"),
        (["([。！？!?]+)"], "你好。世界！再见？"),
    ],
)
def test_issue_cases_split_as_v8_splits(v8: V8, patterns: list[str], text: str) -> None:
    assert "error" not in python_split(patterns, text)
    assert difference(patterns, text, v8) is None
