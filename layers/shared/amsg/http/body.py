"""Request body reading (see docs/compatibility.md): size limits, gzip, text decoding — before any route logic."""

from __future__ import annotations

import dataclasses
import zlib

from amsg.errors import api_error
from amsg.http.request import ApiRequest

# Lambda's synchronous invocation payload is 6 MB; a body has to fit in it after base64.
MAX_RAW_BODY_BYTES = 4_000_000
# The reference's cap on gzip-decompressed bodies.
MAX_DECOMPRESSED_BODY_BYTES = 32 * 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"


def read_body(request: ApiRequest, *, max_raw_bytes: int = MAX_RAW_BODY_BYTES) -> ApiRequest:
    """Return the request with ``text_body`` set, or raise the documented 413/415/400."""
    raw = request.raw_body
    if len(raw) > max_raw_bytes:
        raise api_error("REQUEST_BODY_TOO_LARGE", details={"maxBytes": max_raw_bytes})
    encoding = (request.header("content-encoding") or "").lower()
    if encoding in ("", "identity"):
        data = raw
    elif encoding in ("gzip", "x-gzip"):
        data = _gunzip(raw) if raw.startswith(GZIP_MAGIC) else raw  # a gateway may have inflated it already
    else:
        raise api_error("UNSUPPORTED_CONTENT_ENCODING", details={"supported": ["gzip"]})
    return dataclasses.replace(request, text_body=data.decode("utf-8", errors="replace"))


def _gunzip(raw: bytes) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    try:
        chunk = inflater.decompress(raw, MAX_DECOMPRESSED_BODY_BYTES + 1)
        out += chunk
        while inflater.unconsumed_tail and len(out) <= MAX_DECOMPRESSED_BODY_BYTES:
            out += inflater.decompress(inflater.unconsumed_tail, MAX_DECOMPRESSED_BODY_BYTES + 1 - len(out))
        if len(out) > MAX_DECOMPRESSED_BODY_BYTES:
            raise api_error("REQUEST_BODY_TOO_LARGE", details={"maxBytes": MAX_DECOMPRESSED_BODY_BYTES})
        out += inflater.flush()
    except zlib.error as exc:
        raise api_error("INVALID_CONTENT_ENCODING") from exc
    if not inflater.eof:
        raise api_error("INVALID_CONTENT_ENCODING")
    if len(out) > MAX_DECOMPRESSED_BODY_BYTES:
        raise api_error("REQUEST_BODY_TOO_LARGE", details={"maxBytes": MAX_DECOMPRESSED_BODY_BYTES})
    return bytes(out)
