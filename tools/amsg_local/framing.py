"""The local gateway's request-line check: what API Gateway refuses with a 400 never reaches a route.

A request line is ``METHOD SP request-target SP HTTP/1.x``. Any method that is a valid token is routed (an
unknown one, ``TRACE`` or a lower-case ``get`` reaches ``$default`` as on API Gateway); everything else is
a 400 ``{"message":"Bad Request"}``: other protocol versions (``HTTP/9.9``, the HTTP/2 preface
``PRI * HTTP/2.0``), HTTP/0.9's two-word line, control or non-ASCII bytes, a target that is neither a path nor
an absolute URL.
"""

from __future__ import annotations

import re

__all__ = ["MAX_LEADING_BLANK_LINES", "BadFraming", "check_request_line"]

MAX_LEADING_BLANK_LINES = 8  # empty lines tolerated before a request line (a client's stray CRLF)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(r"[\x21-\x7e]+")
_ABSOLUTE = re.compile(r"https?://[^/?#]*", re.IGNORECASE)
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")


class BadFraming(ValueError):
    """The request line cannot be served; ``str(exc)`` says why (logged, not sent)."""


def check_request_line(line: str) -> tuple[str, str, str]:
    """``(method, origin-form target, version)`` of a request line (without its line ending)."""
    parts = line.split(" ")
    if len(parts) != 3:
        raise BadFraming(f"a request line has three parts, got {len(parts)}")
    method, target, version = parts
    if version not in _VERSIONS:
        raise BadFraming(f"unsupported protocol {version[:16]!r}")
    if not _TOKEN.fullmatch(method):
        raise BadFraming("the method is not an HTTP token")
    if not _TARGET.fullmatch(target):
        raise BadFraming("the target has control, space or non-ASCII characters")
    if target.startswith("/"):
        return method, target, version
    absolute = _ABSOLUTE.match(target)
    if absolute is None:
        raise BadFraming("the target is neither a path nor an absolute http URL")
    rest = target[absolute.end() :]
    return method, rest if rest.startswith("/") else "/" + rest, version
