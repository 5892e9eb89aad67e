"""JavaScript regex sources (``splitPattern``) translated to Python ``regex`` (see docs/compatibility.md).

Stored patterns are JavaScript regex *sources* compiled by the reference with ``new RegExp(source)`` — no
flags, so the web-compatibility grammar of ECMAScript Annex B applies. Python's ``re`` disagrees with that
dialect in syntax and in meaning (Unicode ``\\d``/``\\w``/``\\s``, ``$`` before a final newline, ``.``, group
syntax, backreferences to unset groups), so a pattern is parsed as JavaScript and re-emitted as Python.
Two rules of JavaScript's repeats are spelled out in the emitted pattern (:mod:`amsg.domain.jsregex_repeat`):
an iteration beyond the minimum that matches empty is refused (``(a??|b)?`` matches ``b``), and a repeated
group's captures are cleared at every iteration (:mod:`amsg.domain.jsregex_reset`). Look-behind of any width
runs as in JavaScript (right to left). Whatever cannot be reproduced faithfully raises ``ValueError``;
validation turns that into the documented 400 at schedule/update time, so a stored pattern never surprises
the engine at fire time. tests/unit/test_split_v8_differential.py holds all of it to V8.

Mapping (JS source → emitted Python):

=====================================  ==============================================================
``\\d`` / ``\\D``                      ``[0-9]`` / ``[^0-9]``
``\\w`` / ``\\W``                      ``[0-9A-Z_a-z]`` / its complement
``\\s`` / ``\\S``                      JS whitespace (``\\t\\n\\v\\f\\r``, space, U+00A0, U+1680,
                                       U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF)
                                       / its complement
``\\b`` / ``\\B``                      look-arounds over the ASCII word class (Python's are Unicode)
``.``                                  ``[^\\n\\r\\u2028\\u2029]``
``[^]`` / ``[]``                       any character / ``(?!)`` (never matches)
``^`` / ``$`` (no ``m`` flag)          ``\\A`` / ``\\Z`` (Python's ``$`` also matches before a final ``\\n``)
``(?<name>…)``                         ``(?P<name>…)`` (a name Python rejects, e.g. with ``$``, becomes a
                                       plain numbered group: numbering is unchanged)
``\\k<name>``, ``\\N`` (N ≤ groups)      ``(?:(?(N)\\N))`` — JS matches the empty string when the group has
                                       not participated, Python's bare ``\\N`` would fail; a reference
                                       that precedes its group's close (forward or self reference) can
                                       never be set in JS and becomes ``(?:)``
``(?:…)``, ``(?=…)``, ``(?!…)``,       same syntax
``(?<=…)``, ``(?<!…)``
``\\uXXXX``, ``\\xXX``, ``\\0``,           the character (a surrogate-pair escape becomes the astral character)
``\\0oo`` (legacy octal), ``\\cX``,
``\\f\\n\\r\\t\\v``, ``[\\b]``
``\\c`` without a letter               a literal backslash, then ``c`` (Annex B)
``\\/``, ``\\-``, ``\\a``, ``\\e``, ``\\z``…   identity escape: the character itself (``\\a`` is *not* BEL)
``{``, ``}``, ``]`` not in a           literal characters (Annex B); ``{2}`` with nothing to repeat is an
quantifier/class                       error, as in JS
``\\k`` without named groups           a literal ``k`` (Annex B)
=====================================  ==============================================================

Rejected (``ValueError``): JS syntax errors; ``\\p{…}``/``\\P{…}`` and ``\\u{…}`` (they need the ``u`` flag,
which cannot be given — without it JS silently reads them as literal text, never what the author meant);
``\\N`` with N above the group count (Annex B would read it as an octal escape); lone surrogate escapes;
named-group duplicates; inline modifiers ``(?i:…)``; quantified lookarounds; backreferences inside a
lookbehind, or inside a quantified group that can match empty; a repeated group's optional capture that can
match empty both where an iteration starts and where one ends, sits in a look-around, is referred back to, or
repeats inside a look-behind (``(?:(a?)|b)+``: JavaScript's per-iteration reset could not be followed
exactly); a pattern whose rewrite for the repeat rules
exceeds :data:`~amsg.domain.jsregex_repeat.MAX_REWRITTEN_NODES`; more than 99 backreferenced groups. The
backtracking safety walk (:mod:`amsg.domain.regex_safety`) refuses more.

Known, accepted difference: Python strings are code points, JS strings UTF-16 code units. An astral
character (emoji) is one character here and two in JS, so ``.`` or a negated class consumes the whole
emoji where V8 takes half of it (and a split can cut an emoji in two). A push never carries half an emoji
here, which is what a pattern author means, so it is kept (docs/decisions.md, "splitPattern runs as V8 runs").
"""

from __future__ import annotations

import functools
import re

import regex

from amsg.domain.jsregex_ast import Alt, Assert, BackRef, Char, Class, Group, Node, Quant, complement_ranges
from amsg.domain.jsregex_emit import emit
from amsg.domain.jsregex_repeat import Rewrite, apply_js_repeat_rule
from amsg.domain.jsregex_reset import JsPattern
from amsg.domain.regex_safety import check_backtracking

__all__ = ["compile_js_pattern", "translate_js_pattern"]

_Ranges = list[tuple[int, int]]

_DIGIT: _Ranges = [(0x30, 0x39)]
_WORD: _Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE: _Ranges = [
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
]
_LINE_TERMINATORS: _Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
_HEX = frozenset("0123456789abcdefABCDEF")
_OCTAL = frozenset("01234567")
_CONTROL_ESCAPES = {"f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_DECIMAL = re.compile(r"[0-9]+")
_NAMED_REF = re.compile(r"k<([^>]*)>")
_BRACED_QUANTIFIER = re.compile(r"\{([0-9]+)(?:(,)([0-9]*))?\}")
_PY_MAX_BACKREF = 99


_CLASS_ESCAPES: dict[str, _Ranges] = {
    "d": _DIGIT,
    "D": complement_ranges(_DIGIT),
    "w": _WORD,
    "W": complement_ranges(_WORD),
    "s": _SPACE,
    "S": complement_ranges(_SPACE),
}
_DOT: _Ranges = complement_ranges(_LINE_TERMINATORS)


class _Prescan:
    __slots__ = ("group_count", "names")

    def __init__(self) -> None:
        self.group_count = 0
        self.names: dict[str, int] = {}


# --- parsing -------------------------------------------------------------------------------------------------


def _prescan(src: str) -> _Prescan:
    """Count capturing groups and collect group names: Annex B decides what ``\\N`` and ``\\k`` mean from them."""
    info = _Prescan()
    i, n, in_class = 0, len(src), False
    while i < n:
        ch = src[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            # `[]` and `[^]` close at the first `]`.
        elif ch == "(":
            if not src.startswith("(?", i):
                info.group_count += 1
            elif src.startswith("(?<", i) and i + 3 < n and src[i + 3] not in "=!":
                info.group_count += 1
                end = src.find(">", i + 3)
                if end != -1:
                    name = src[i + 3 : end]
                    if name in info.names:
                        raise ValueError(f"duplicate group name {name!r}")
                    info.names[name] = info.group_count
        i += 1
    return info


def _valid_js_group_name(name: str) -> bool:
    # `$` is a JS identifier character Python lacks; escapes (`\\u0041`) in names are not supported.
    return bool(name) and "\\" not in name and name.replace("$", "_").isidentifier()


class _Parser:
    """Recursive-descent parser for the Annex B (no ``u`` flag) pattern grammar."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.info = _prescan(src)
        self.closed: set[int] = set()
        self.lookbehind_depth = 0
        self.next_group = 0

    # - helpers
    def _peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.src[i] if i < len(self.src) else ""

    def _error(self, what: str) -> ValueError:
        return ValueError(f"{what} at position {self.pos}")

    def parse(self) -> Alt:
        alt = self._disjunction()
        if self.pos < len(self.src):
            raise self._error("unmatched ')'")
        return alt

    def _disjunction(self) -> Alt:
        branches = [self._alternative()]
        while self._peek() == "|":
            self.pos += 1
            branches.append(self._alternative())
        return Alt(branches)

    def _alternative(self) -> list[Node]:
        items: list[Node] = []
        while self.pos < len(self.src) and self._peek() not in "|)":
            items.append(self._term())
        return items

    def _term(self) -> Node:
        ch = self._peek()
        quantifiable = True
        atom: Node
        if ch == "^":
            self.pos += 1
            atom, quantifiable = Assert("start"), False
        elif ch == "$":
            self.pos += 1
            atom, quantifiable = Assert("end"), False
        elif ch == "\\" and self._peek(1) in ("b", "B"):
            self.pos += 2
            atom, quantifiable = Assert(self.src[self.pos - 1]), False
        elif ch == "(":
            atom = self._group()
            if atom.kind in ("lb", "nlb"):
                quantifiable = False
            elif atom.kind in ("la", "nla") and self._quantifier_ahead():
                # Annex B allows it, but repeating an assertion has engine-specific capture effects.
                raise self._error("quantified lookahead is not supported")
        else:
            atom = self._atom()
        quant = self._quantifier(atom)
        if quant is None:
            return atom
        if not quantifiable:
            raise self._error("nothing to repeat")
        return quant

    def _quantifier_ahead(self) -> bool:
        ch = self._peek()
        return ch in ("*", "+", "?") or (ch == "{" and _BRACED_QUANTIFIER.match(self.src, self.pos) is not None)

    def _quantifier(self, atom: Node) -> Quant | None:
        ch = self._peek()
        if ch == "*":
            lo, hi = 0, None
            self.pos += 1
        elif ch == "+":
            lo, hi = 1, None
            self.pos += 1
        elif ch == "?":
            lo, hi = 0, 1
            self.pos += 1
        elif ch == "{":
            m = _BRACED_QUANTIFIER.match(self.src, self.pos)
            if m is None:
                return None  # Annex B: a `{` that is no quantifier is a literal
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
            if hi is not None and hi < lo:
                raise self._error("numbers out of order in {} quantifier")
            self.pos = m.end()
        else:
            return None
        lazy = self._peek() == "?"
        if lazy:
            self.pos += 1
        return Quant(atom, lo, hi, lazy)

    def _group(self) -> Group:
        start = self.pos
        self.pos += 1  # (
        kind, name = self._group_kind()
        index = 0
        if kind == "cap":
            self.next_group += 1
            index = self.next_group
        lookbehind = kind in ("lb", "nlb")
        if lookbehind:
            self.lookbehind_depth += 1
        body = self._disjunction()
        if lookbehind:
            self.lookbehind_depth -= 1
        if self._peek() != ")":
            self.pos = start
            raise self._error("unterminated group")
        self.pos += 1
        if kind == "cap":
            self.closed.add(index)
        return Group(kind, body, index, name)

    def _group_kind(self) -> tuple[str, str | None]:
        """The group's kind (and name) from what follows ``(``; ``self.pos`` moves to the body."""
        if self._peek() != "?":
            return "cap", None
        nxt = self._peek(1)
        simple = {":": "nc", "=": "la", "!": "nla"}
        if nxt in simple:
            self.pos += 2
            return simple[nxt], None
        if nxt == "<" and self._peek(2) in ("=", "!"):
            self.pos += 3
            return ("lb" if self.src[self.pos - 1] == "=" else "nlb"), None
        if nxt == "<":
            end = self.src.find(">", self.pos + 2)
            name = self.src[self.pos + 2 : end] if end != -1 else ""
            if end == -1 or not _valid_js_group_name(name):
                raise self._error("invalid capture group name")
            self.pos = end + 1
            return "cap", name
        raise self._error("invalid group (inline modifiers are not supported)")

    def _atom(self) -> Node:
        ch = self._peek()
        if ch in ("*", "+", "?"):
            raise self._error("nothing to repeat")
        if ch == "{" and _BRACED_QUANTIFIER.match(self.src, self.pos):
            raise self._error("nothing to repeat")
        if ch == ".":
            self.pos += 1
            return Class(_DOT)
        if ch == "[":
            return self._class()
        if ch == "\\":
            return self._atom_escape()
        self.pos += 1
        return Char(self._literal_cp(ch))

    def _literal_cp(self, ch: str) -> int:
        cp = ord(ch)
        if 0xD800 <= cp <= 0xDFFF:
            raise self._error("lone surrogate in pattern")
        return cp

    def _atom_escape(self) -> Node:
        self.pos += 1  # backslash
        ch = self._peek()
        if not ch:
            raise self._error("\\ at end of pattern")
        if ch in _CLASS_ESCAPES:
            self.pos += 1
            return Class(_CLASS_ESCAPES[ch])
        if ch in "123456789":
            m = _DECIMAL.match(self.src, self.pos)
            assert m is not None
            number = int(m.group())
            if number > self.info.group_count:
                raise self._error(f"backreference \\{number} to a group that does not exist")
            self.pos = m.end()
            return self._backref(number)
        if ch == "k" and self.info.names:
            m = _NAMED_REF.match(self.src, self.pos)
            if m is None or m.group(1) not in self.info.names:
                raise self._error("invalid named reference")
            self.pos = m.end()
            return self._backref(self.info.names[m.group(1)])
        if ch == "c":
            letter = self._peek(1)
            if letter and letter in _ASCII_LETTERS:
                self.pos += 2
                return Char(ord(letter) % 32)
            return Char(0x5C)  # Annex B: `\c` without a letter is a backslash; `c` is read next
        return Char(self._character_escape(in_class=False))

    def _backref(self, index: int) -> BackRef:
        if self.lookbehind_depth:
            raise self._error("backreference inside a lookbehind is not supported")
        if index > _PY_MAX_BACKREF:
            raise self._error("backreference to a group above 99 is not supported")
        return BackRef(index, settable=index in self.closed)

    def _character_escape(self, *, in_class: bool) -> int:
        """Escapes shared by atoms and classes; ``self.pos`` is on the character after the backslash."""
        ch = self._peek()
        if ch in _CONTROL_ESCAPES:
            self.pos += 1
            return _CONTROL_ESCAPES[ch]
        if ch in _OCTAL:
            return self._legacy_octal() if (ch != "0" or self._peek(1) in _OCTAL) else self._nul()
        if ch == "x":
            digits = self.src[self.pos + 1 : self.pos + 3]
            if len(digits) == 2 and all(d in _HEX for d in digits):
                self.pos += 3
                return int(digits, 16)
            self.pos += 1
            return ord("x")
        if ch == "u":
            return self._unicode_escape()
        if ch in ("p", "P") and self._peek(1) == "{":
            raise self._error("unicode property escapes need the u flag")
        if ch == "k" and self.info.names and in_class:
            raise self._error("invalid escape \\k in class")
        self.pos += 1
        return self._literal_cp(ch)  # identity escape

    def _nul(self) -> int:
        self.pos += 1
        return 0

    def _legacy_octal(self) -> int:
        first = self._peek()
        max_len = 3 if first in "0123" else 2
        end = self.pos + 1
        while end < len(self.src) and end - self.pos < max_len and self.src[end] in _OCTAL:
            end += 1
        value = int(self.src[self.pos : end], 8)
        self.pos = end
        return value

    def _read_u4(self, at: int) -> int | None:
        digits = self.src[at : at + 4]
        if len(digits) == 4 and all(d in _HEX for d in digits):
            return int(digits, 16)
        return None

    def _unicode_escape(self) -> int:
        if self._peek(1) == "{":
            raise self._error("\\u{...} needs the u flag; use \\uXXXX")
        unit = self._read_u4(self.pos + 1)
        if unit is None:
            self.pos += 1
            return ord("u")  # Annex B identity escape
        self.pos += 5
        if 0xD800 <= unit <= 0xDBFF and self.src.startswith("\\u", self.pos):
            low = self._read_u4(self.pos + 2)
            if low is not None and 0xDC00 <= low <= 0xDFFF:
                self.pos += 6
                return 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
        if 0xD800 <= unit <= 0xDFFF:
            raise self._error("lone surrogate escape")
        return unit

    def _class(self) -> Class:
        start = self.pos
        self.pos += 1  # [
        negated = self._peek() == "^"
        if negated:
            self.pos += 1
        ranges: _Ranges = []
        while True:
            ch = self._peek()
            if not ch:
                self.pos = start
                raise self._error("unterminated character class")
            if ch == "]":
                self.pos += 1
                return Class(ranges, negated)
            first = self._class_atom()
            if self._peek() == "-" and self._peek(1) not in ("]", ""):
                self.pos += 1
                second = self._class_atom()
                if isinstance(first, list) or isinstance(second, list):
                    # Annex B: a class escape on either side makes the dash a literal.
                    for part in (first, ord("-"), second):
                        ranges.extend(part if isinstance(part, list) else [(part, part)])
                    continue
                if first > second:
                    raise self._error("range out of order in character class")
                ranges.append((first, second))
            else:
                ranges.extend(first if isinstance(first, list) else [(first, first)])

    def _class_atom(self) -> int | _Ranges:
        ch = self._peek()
        if ch != "\\":
            self.pos += 1
            return self._literal_cp(ch)
        self.pos += 1
        ch = self._peek()
        if not ch:
            raise self._error("\\ at end of pattern")
        if ch in _CLASS_ESCAPES:
            self.pos += 1
            return _CLASS_ESCAPES[ch]
        if ch == "b":
            self.pos += 1
            return 0x08
        if ch == "c":
            letter = self._peek(1)
            if letter and (letter in _ASCII_LETTERS or (letter.isdigit() and letter.isascii()) or letter == "_"):
                self.pos += 2
                return ord(letter) % 32
            return 0x5C  # backslash; `c` is the next class atom
        if ch in "89":
            self.pos += 1
            return ord(ch)
        return self._character_escape(in_class=True)


def _parse(source: str) -> tuple[Alt, _Prescan]:
    if not isinstance(source, str):
        raise ValueError("pattern source must be a string")
    parser = _Parser(source)
    try:
        return parser.parse(), parser.info
    except RecursionError as exc:
        raise ValueError("pattern nests too deeply") from exc


def _rewritten(tree: Alt, info: _Prescan) -> Rewrite:
    """``tree`` with JavaScript's repeat rules spelled out (:mod:`amsg.domain.jsregex_repeat`)."""
    try:
        return apply_js_repeat_rule(tree, info.group_count)
    except RecursionError as exc:
        raise ValueError("pattern nests too deeply") from exc


def _check_backtracking(tree: Alt) -> None:
    try:
        check_backtracking(tree)
    except RecursionError as exc:
        raise ValueError("pattern nests too deeply") from exc


def _emitted(rewrite: Rewrite, info: _Prescan) -> str:
    try:
        return emit(rewrite.tree, rewrite.group_count + rewrite.markers, info.names, named=rewrite.markers > 0)
    except RecursionError as exc:
        raise ValueError("pattern nests too deeply") from exc


def translate_js_pattern(source: str) -> str:
    """Python ``regex`` source equivalent to the JavaScript regex ``source`` (no flags); ``ValueError`` if none."""
    tree, info = _parse(source)
    return _emitted(_rewritten(tree, info), info)


@functools.lru_cache(maxsize=256)
def compile_js_pattern(source: str) -> JsPattern:
    """Compile a JavaScript regex source (no flags) to an equivalent pattern, or raise ``ValueError``.

    Patterns that backtrack catastrophically are refused (:mod:`amsg.domain.regex_safety`), judged on the tree
    as written and as it actually runs. The pattern runs in ``regex``, so every match can run under a CPU budget
    (``timeout=``) and a variable-width look-behind runs as in JavaScript (right to left); its matches report
    captures as JavaScript does. Cached: the same stored patterns are compiled at validation time and again at
    every fire.
    """
    tree, info = _parse(source)
    _check_backtracking(tree)
    rewrite = _rewritten(tree, info)
    _check_backtracking(rewrite.tree)
    translated = _emitted(rewrite, info)
    try:
        compiled = regex.compile(translated)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise ValueError(f"pattern cannot be compiled: {exc}") from exc
    return JsPattern(compiled, info.group_count, rewrite.resets)
