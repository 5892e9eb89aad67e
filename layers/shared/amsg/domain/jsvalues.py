"""JavaScript value semantics the reference's checks rely on, expressed for decoded JSON values.

The wire contract was written against JS: ``if (payload.x)`` truthiness, ``String.prototype.length``
(UTF-16 code units, for parity with the reference) and ``String.prototype.trim``. Python's ``bool()``, ``len()`` and
``str.strip()`` all differ at the edges (``[]``/``{}`` are truthy in JS, emoji count 2, ``\\ufeff`` is trimmed),
so every rule that mirrors the reference goes through these helpers.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

from amsg.jsonio import JsonObject

# ECMAScript WhiteSpace + LineTerminator: what String.prototype.trim removes and what \s matches.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_truthy(value: Any) -> bool:
    """JS truthiness: ``undefined``/``null``/``false``/``0``/``NaN``/``""`` are falsy; ``[]`` and ``{}`` are not."""
    if value is None or value is False:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return value != 0
    if isinstance(value, float):
        return not (value == 0 or math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def utf16_len(text: str) -> int:
    """``String.prototype.length``: UTF-16 code units (astral characters count 2, lone surrogates 1)."""
    return len(text.encode("utf-16-le", errors="surrogatepass")) // 2


def js_trim(text: str) -> str:
    """``String.prototype.trim`` (JS whitespace set, unlike ``str.strip``)."""
    return text.strip(JS_WHITESPACE)


def is_plain_object(value: Any) -> TypeGuard[JsonObject]:
    """A decoded JSON object (``typeof === 'object'``, not null, not an array)."""
    return isinstance(value, dict)


def is_js_number(value: Any) -> bool:
    """``typeof value === 'number'`` for decoded JSON (booleans are not numbers)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """``typeof === 'number' && Number.isFinite``; integers too large for a double count as Infinity, as in JS."""
    if not is_js_number(value):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def is_positive_integer(value: Any) -> TypeGuard[int | float]:
    """``Number.isInteger(v) && v > 0`` (``5.0`` qualifies, ``true`` does not)."""
    if not is_finite_number(value):
        return False
    return float(value).is_integer() and value > 0


def is_well_formed(text: str) -> bool:
    """``String.prototype.isWellFormed``: no lone surrogates (JSON ``"\\ud800"`` escapes can produce them).
    Such a string cannot be stored as a DynamoDB key or string attribute, so it can name nothing stored."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def has_control_chars(text: str) -> bool:
    """Whether ``text`` contains U+0000–U+001F or U+007F (the credId / purpose rule)."""
    return any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text)


def is_header_safe(text: str) -> bool:
    """Whether ``text`` can travel in an HTTP header value as is: printable ASCII, space and tab only (an API key
    with anything else is accepted by nobody's HTTP stack, so it could never be sent)."""
    return text.isascii() and all(ch == "\t" or " " <= ch <= "~" for ch in text)
