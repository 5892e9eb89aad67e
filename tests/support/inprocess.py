"""Invoke the real Lambda handlers in process with API Gateway v2 events, routed from template.yaml.

This is the handler-test transport for :class:`tests.support.wire_client.WireClient`: same events as API
Gateway would send, no sockets. (The local stack's gateway does the same over HTTP.)
"""

from __future__ import annotations

import base64
import importlib.util
import sys
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

from amsg_local.gateway import Router, build_v2_event, fold_headers
from amsg_local.template import Route, http_routes, load_template

from tests.support import openapi_check

ROOT = Path(__file__).resolve().parents[2]
_modules: dict[Path, ModuleType] = {}


def load_handler_module(handler_file: Path) -> ModuleType:
    """Import a function's handler file under a unique module name (every function dir has its own file)."""
    handler_file = handler_file.resolve()
    if handler_file not in _modules:
        name = "fn_" + handler_file.parent.name + "_" + handler_file.stem
        spec = importlib.util.spec_from_file_location(name, handler_file)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _modules[handler_file] = module
    return _modules[handler_file]


@dataclass
class LambdaContext:
    function_name: str = "test"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:000000000000:function:test"
    aws_request_id: str = ""
    remaining_ms: int = 29_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@cache
def _routing(template_path: Path) -> tuple[tuple[Route, ...], Router]:
    """The routes of a template and their router, once per process: neither changes after it is built, and
    parsing template.yaml again for every client was a large part of each handler test's setup."""
    routes = tuple(http_routes(load_template(template_path)))
    return routes, Router(routes)  # API Gateway's selection: exact, then {param} / {proxy+}, else $default


class InProcessApi:
    """A transport: ``(method, path, headers, body) -> (status, headers, body)``."""

    def __init__(self, template_path: Path = ROOT / "template.yaml") -> None:
        routes, self.router = _routing(template_path.resolve())
        self.routes = list(routes)
        self.default = next(r for r in self.routes if r.path == "$default")

    def route_for(self, method: str, path: str) -> Route:
        return self.router.match(method, path)[0] or self.default

    def __call__(self, method: str, path: str, headers: dict[str, str], body: bytes | None):
        parts = urlsplit(path)
        found, params = self.router.match(method, parts.path)
        route = found or self.default
        module = load_handler_module(route.code_uri / (route.handler.rsplit(".", 1)[0] + ".py"))
        folded = fold_headers(list(headers.items()))
        event = build_v2_event(route, method, parts.path, parts.query, folded, body or b"", params or None)
        result = module.handler(event, LambdaContext(aws_request_id=str(uuid.uuid4())))
        out_body = result.get("body") or ""
        raw = base64.b64decode(out_body) if result.get("isBase64Encoded") else out_body.encode("utf-8")
        openapi_check.observe(route.path, method, int(result["statusCode"]), raw)  # the API document stays true
        return int(result["statusCode"]), {k.lower(): v for k, v in (result.get("headers") or {}).items()}, raw
