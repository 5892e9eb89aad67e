"""``avatarUrl`` checks: any absolute URL (as the WHATWG URL parser the reference relies on would accept it),
never ``data:``, at most 2048 UTF-16 units. A bad avatar is soft-stripped by the callers, never an error."""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import unquote_to_bytes

from amsg.domain.jsvalues import utf16_len

AVATAR_URL_MAX_LENGTH = 2048

_C0_OR_SPACE = "".join(chr(c) for c in range(0x21))
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_SPECIAL_SCHEMES = frozenset({"http", "https", "ws", "wss", "ftp"})
_FORBIDDEN_HOST = frozenset("\x00\t\n\r #/:<>?@[\\]^|")
_FORBIDDEN_DOMAIN = _FORBIDDEN_HOST | frozenset(chr(c) for c in range(0x20)) | {"%", "\x7f"}
_HEX = frozenset("0123456789abcdefABCDEF")
_DEC = frozenset("0123456789")
_OCT = frozenset("01234567")


def _ipv4_part(part: str) -> int | None:
    if part[:2] in ("0x", "0X"):
        digits, base, allowed = part[2:], 16, _HEX
    elif len(part) > 1 and part[0] == "0":
        digits, base, allowed = part[1:], 8, _OCT
    else:
        digits, base, allowed = part, 10, _DEC
    if not digits:
        return 0
    if not set(digits) <= allowed:
        return None
    return int(digits, base)


def _ends_in_number(host: str) -> bool:
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    last = parts[-1]
    if last and set(last) <= _DEC:
        return True
    return last[:2] in ("0x", "0X") and set(last[2:]) <= _HEX


def _valid_ipv4(host: str) -> bool:
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4 or "" in parts:
        return False
    numbers = [_ipv4_part(p) for p in parts]
    if any(n is None for n in numbers):
        return False
    values = [n for n in numbers if n is not None]
    if any(n > 255 for n in values[:-1]):
        return False
    return bool(values[-1] < 256 ** (5 - len(values)))


def _valid_ipv6(text: str) -> bool:
    if "%" in text:
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _valid_authority(authority: str, *, special: bool) -> bool:
    host_port = authority.rsplit("@", 1)[-1]
    if host_port.startswith("["):
        end = host_port.find("]")
        if end < 0 or not _valid_ipv6(host_port[1:end]):
            return False
        rest = host_port[end + 1 :]
        if rest and not rest.startswith(":"):
            return False
        port = rest[1:]
    else:
        host, _, port = host_port.partition(":")
        if special:
            if not host:
                return False
            try:
                decoded = unquote_to_bytes(host).decode("utf-8")
            except UnicodeDecodeError:
                return False
            if any(ch in _FORBIDDEN_DOMAIN for ch in decoded):
                return False
            if _ends_in_number(decoded.lower()) and not _valid_ipv4(decoded.lower()):
                return False
        elif any(ch in _FORBIDDEN_HOST for ch in host):
            return False
    return not port or (set(port) <= _DEC and int(port) <= 65535)


def is_absolute_url(text: str) -> bool:
    """Whether WHATWG ``new URL(text)`` (no base) would succeed; a close approximation without IDNA mapping."""
    s = text.strip(_C0_OR_SPACE).replace("\t", "").replace("\n", "").replace("\r", "")
    colon = s.find(":")
    if colon <= 0 or not _SCHEME_RE.fullmatch(s[:colon]):
        return False
    scheme, rest = s[:colon].lower(), s[colon + 1 :]
    if scheme == "file":
        return True
    if scheme in _SPECIAL_SCHEMES:
        authority = re.split(r"[/\\?#]", rest.lstrip("/\\"), maxsplit=1)[0]
        return _valid_authority(authority, special=True)
    if rest.startswith("//"):
        authority = re.split(r"[/?#]", rest[2:], maxsplit=1)[0]
        return _valid_authority(authority, special=False)
    return True


def avatar_url_error(value: Any) -> str | None:
    """Why an ``avatarUrl`` would be soft-stripped, or None (absent/null is fine)."""
    if value is None:
        return None
    if not isinstance(value, str):
        return "avatarUrl 必须是字符串"
    if value.lstrip(_C0_OR_SPACE)[:5].lower() == "data:":
        return "头像不支持传入 data: URI，请改为公网可访问的 https:// 图片 URL"
    length = utf16_len(value)
    if length > AVATAR_URL_MAX_LENGTH:
        return f"头像 URL 长度 {length} 字符超过 {AVATAR_URL_MAX_LENGTH} 上限，请改为更短的图片 URL"
    if not is_absolute_url(value):
        return "avatarUrl 不是合法 URL"
    return None
