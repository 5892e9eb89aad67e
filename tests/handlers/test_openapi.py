"""docs/openapi.yaml is a valid OpenAPI 3.1 document of every route at both prefixes, is what
scripts/gen-openapi writes, lists every error code of the catalogue with its status, and (through
tests/support/openapi_check.py, which the in-process transport calls on every response) documents every status
and code the real handlers give anywhere in the suite. This module also drives each route once through the
checked transport, including the $default 404 and the gates every route shares."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
from pathlib import Path

import pytest
from amsg.errors import CATALOGUE, CLOUD_GUARD_CODES
from amsg_local.template import http_routes, load_template

from tests.conftest import fast_tests
from tests.support import openapi_check
from tests.support.template import REPO_ROOT


def _generator():
    loader = importlib.machinery.SourceFileLoader("gen_openapi", str(REPO_ROOT / "scripts" / "gen-openapi"))
    spec = importlib.util.spec_from_loader("gen_openapi", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_document_is_valid_openapi_3_1():
    doc = openapi_check.document()
    assert doc["openapi"].startswith("3.1")
    proof = _validated_marker()
    if fast_tests() and proof.exists():
        return  # these very bytes passed this very validator before (below)
    from openapi_spec_validator import validate

    validate(doc)
    if fast_tests():
        proof.parent.mkdir(parents=True, exist_ok=True)
        proof.touch()


def _validated_marker() -> Path:
    """Validating the document costs ~3 s of CPU (the validator resolves its meta-schema references again and
    again), the same answer for the same bytes and validator. Under `make unit` a pass is remembered in .cache,
    keyed by both; the full suite always validates."""
    from importlib.metadata import version

    content = openapi_check.DOC_PATH.read_bytes()
    versions = "/".join(version(name) for name in ("openapi-spec-validator", "jsonschema", "referencing"))
    key = hashlib.sha256(content + versions.encode()).hexdigest()
    return REPO_ROOT / ".cache" / "openapi-valid" / key


def test_the_document_is_what_the_generator_writes():
    assert openapi_check.DOC_PATH.read_text(encoding="utf-8") == _generator().render(), (
        "docs/openapi.yaml is stale: run .venv/bin/python scripts/gen-openapi"
    )


def test_every_route_is_documented_at_both_prefixes():
    doc = openapi_check.document()
    routes = {(r.method.lower(), r.path) for r in http_routes(load_template()) if r.path != "$default"}
    documented = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert documented == routes
    assert {p.removeprefix("/api/v1") for _, p in routes} == {p for _, p in routes if not p.startswith("/api/v1")}
    assert doc["x-default-route"]["responses"]["404"]


def test_every_catalogue_code_is_documented_with_its_status():
    doc = openapi_check.document()
    seen: dict[str, set[int]] = {}
    for ops in doc["paths"].values():
        for operation in ops.values():
            for status, response in operation["responses"].items():
                for code in response.get("x-error-codes", []):
                    seen.setdefault(code, set()).add(int(status))
    for code, (status, _) in CATALOGUE.items():
        if code == "NOT_FOUND":
            continue
        assert seen.get(code) == {status}, (code, seen.get(code))
    for code in CLOUD_GUARD_CODES:
        # INVALID_CLOUD_OWNER is also the /cloud-data routes' own 400 (a bad owner in a management request)
        assert seen.get(code) == ({400, 409} if code == "INVALID_CLOUD_OWNER" else {409}), code


def test_an_undocumented_response_fails():
    with pytest.raises(AssertionError, match="undocumented error code"):
        openapi_check.observe(
            "/messages", "GET", 400, json.dumps({"success": False, "error": {"code": "NOPE"}}).encode()
        )
    with pytest.raises(AssertionError, match="undocumented response"):
        openapi_check.observe("/messages", "GET", 418, b"{}")
    openapi_check.observe("/messages", "GET", 400, b'{"success":false,"error":{"code":"INVALID_PARAMETERS"}}')


@pytest.mark.parametrize("prefix", ["", "/api/v1"])
def test_every_route_answers_as_documented(api, prefix):
    """One request per route and method (most answer 2xx; the rest a documented 4xx), checked by the transport."""
    for method, path in sorted({(r.method, r.path) for r in api.transport.routes if r.path != "$default"}):
        if prefix and not path.startswith(prefix):
            continue
        if not prefix and path.startswith("/api/v1"):
            continue
        resp = api.request(method, path, body=b"{}" if method in ("POST", "PUT", "DELETE") else None)
        assert resp.status < 500, (method, path, resp.status, resp.text)
    assert api.request("GET", prefix + "/definitely-not-a-route").status == 404
    assert (
        api.request("GET", prefix + "/messages", headers={"X-User-Id": "not-a-uuid"}).code == "INVALID_USER_ID_FORMAT"
    )
