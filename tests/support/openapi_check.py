"""Every response the real handlers give in tests is checked against docs/openapi.yaml: its status must be
documented for that route and method, and an error's ``code`` must be listed for that status. The in-process
transport (tests/support/inprocess.py) calls :func:`observe` on every response, so every handler test is also
a test of the document. ``AMSG_OPENAPI_RECORD=<file>`` additionally appends each observation as a JSON line
(used to review what the suite exercises)."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"


@cache
def document() -> dict[str, Any]:
    # libyaml's loader when present: the pure-Python one takes about a second per worker for this document
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(DOC_PATH.read_text(encoding="utf-8"), Loader=loader)


def error_code(body: bytes) -> str | None:
    try:
        parsed = json.loads(body or b"null")
    except ValueError:
        return None
    if isinstance(parsed, dict) and parsed.get("success") is False and isinstance(parsed.get("error"), dict):
        return parsed["error"].get("code")
    return None


def documented_codes(route_path: str, method: str, status: int) -> list[str] | None:
    """The codes documented for this response (``[]`` for a success), or None when the status is undocumented."""
    doc = document()
    if route_path == "$default":
        operation = doc["x-default-route"]
    else:
        operation = (doc["paths"].get(route_path) or {}).get(method.lower())
        if operation is None:
            return None
    response = operation["responses"].get(str(status))
    if response is None:
        return None
    if "$ref" in response:
        response = doc["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    return list(response.get("x-error-codes", []))


def observe(route_path: str, method: str, status: int, body: bytes) -> None:
    code = error_code(body)
    record = os.environ.get("AMSG_OPENAPI_RECORD")
    if record:
        with open(record, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"path": route_path, "method": method, "status": status, "code": code}) + "\n")
    if record and not DOC_PATH.exists():
        return
    codes = documented_codes(route_path, method, status)
    where = f"{method} {route_path} -> {status}{f' {code}' if code else ''}"
    assert codes is not None, f"undocumented response {where}: add it to docs/openapi.yaml (scripts/gen-openapi)"
    if code is not None:
        assert code in codes, f"undocumented error code {where}: add it to docs/openapi.yaml (scripts/gen-openapi)"
