"""The one JSON reader and the one JSON writer of the service.

Every request body, every decrypted envelope or stored value and every LLM reply is read with :func:`loads`;
every response, stored value, queue message and push payload is written with :func:`dumps`. Keeping both in one
place is what makes the wire rules hold everywhere:

* ``loads`` accepts what ``JSON.parse`` accepts and that a JavaScript client can read back unchanged: no
  ``NaN``/``Infinity`` literals, no number outside the double range (``1e400``, a 400-digit integer: JavaScript
  reads them as ``Infinity`` and writes them back as ``null``), and at most :data:`MAX_DEPTH` nested
  arrays/objects (deeper input would exhaust the parser's and our own recursion). Anything else raises
  :class:`JsonError`, a ``ValueError``; each route maps it to its documented 400 code.
* ``dumps`` is ``JSON.stringify``: compact, non-ASCII kept raw, lone surrogates escaped so the text always
  encodes as UTF-8, and it can never emit ``NaN``/``Infinity`` (non-finite numbers become ``null``, as in
  JavaScript).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

type JsonObject = dict[str, Any]
"""A JSON object as it crosses a boundary: a request or response body, a client's value, a hook's payload, an LLM
request or reply, a queue message, a push. Values read from one are checked (``isinstance``) before use; what our
own code stores and reads back has its own type instead (:mod:`amsg.task_payload`, the engine's summaries)."""

# Far deeper than any real payload (task metadata, client-state values are strings); far below the ~1,000 frames
# at which Python's parser, encoder and our recursive helpers would fail.
MAX_DEPTH = 64

_PLAIN_STRING_RE = re.compile(r'"[^"]*"')
_NON_BRACKET_BYTES = bytes(b for b in range(256) if b not in b"[]{}")
_INNERMOST_PAIR_RE = re.compile(r"\[\]|\{\}")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# 1.7976931348623157e308 has 309 digits: a shorter integer literal always fits a double
_MAX_SAFE_INT_DIGITS = 308


class JsonError(ValueError):
    """The text is not JSON a JavaScript client could read back unchanged (never carries the text)."""


def _reject_constant(name: str) -> Any:
    raise JsonError("NaN and Infinity are not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonError("number out of range")
    return value


def _bounded_int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > _MAX_SAFE_INT_DIGITS and not math.isfinite(_float_or_inf(text)):
        raise JsonError("number out of range")
    return int(text)


def _float_or_inf(text: str) -> float:
    try:
        return float(text)
    except OverflowError:
        return math.inf


def _brackets(text: str) -> str:
    """The array/object brackets of a JSON text outside its strings, in order.

    Each pass is linear: drop escape pairs (``\\\\`` first, so ``\\\\"`` still ends a string), then string
    literals, which no longer contain a quote. (A regex over literals with escapes rescanned the rest of the text
    from every quote of an unterminated string: quadratic.)
    """
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    outside = _PLAIN_STRING_RE.sub("", unescaped).encode("utf-8", errors="surrogatepass")
    # UTF-8 multi-byte sequences hold no ASCII byte, so deleting every other byte keeps exactly the brackets
    return outside.translate(None, _NON_BRACKET_BYTES).decode("ascii")


def _nested_deeper_than(text: str, max_depth: int) -> bool:
    """Whether the nesting exceeds ``max_depth``: peel innermost ``[]``/``{}`` pairs at most ``max_depth`` times
    (C-speed passes; a wide body empties in one). What is left was deeper, or unbalanced (not JSON either way)."""
    brackets = _brackets(text)
    for _ in range(max_depth):
        peeled = _INNERMOST_PAIR_RE.sub("", brackets)  # one level per pass: a new pair is not rematched
        if peeled == brackets:
            break
        brackets = peeled
    return bool(brackets)


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``JSON.parse`` with the limits above; raises :class:`JsonError` (a ``ValueError``) on anything else."""
    if isinstance(text, bytes | bytearray):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise JsonError("not UTF-8") from None
    if text.count("[") + text.count("{") > max_depth and _nested_deeper_than(text, max_depth):
        raise JsonError("nested too deeply")
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except JsonError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, int digit limits, pathological input
        raise JsonError("not JSON") from exc


def dumps(value: Any) -> str:
    """``JSON.stringify(value)``: compact, UTF-8 safe, never ``NaN``/``Infinity``."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _finite(value: Any) -> Any:
    """A copy with every non-finite float replaced by None (what ``JSON.stringify`` writes for them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
