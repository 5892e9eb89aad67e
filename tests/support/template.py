"""template.yaml access for tests.

The CloudFormation-tag-aware loader lives in the local stack (``tools/amsg_local/template.py``); tests reuse it
so the template is parsed one way everywhere: ``!Ref X`` becomes ``{"Ref": "X"}``, ``!GetAtt A.B`` becomes
``{"Fn::GetAtt": ["A", "B"]}``, every other ``!Fn`` becomes ``{"Fn::Fn": ...}``. This module only adds small,
test-oriented helpers on top of the raw (unresolved) template.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from amsg_local.template import NO_VALUE, http_routes, load_template, resolve

__all__ = [
    "NO_VALUE",
    "REPO_ROOT",
    "TEMPLATE_PATH",
    "function_dir",
    "function_property",
    "functions",
    "http_routes",
    "load_template",
    "project_template",
    "ref_target",
    "resolve",
    "resources_of_type",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"


@cache
def _cached(path: str) -> dict[str, Any]:
    return load_template(path)


def project_template() -> dict[str, Any]:
    """The repository's template.yaml, parsed once per test session (treat it as read-only)."""
    return _cached(str(TEMPLATE_PATH))


def resources_of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        name: res for name, res in template["Resources"].items() if isinstance(res, dict) and res.get("Type") == kind
    }


def functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return resources_of_type(template, "AWS::Serverless::Function")


def function_property(template: dict[str, Any], logical_id: str, key: str, default: Any = None) -> Any:
    """A function property, falling back to Globals.Function (unresolved)."""
    props = template["Resources"][logical_id].get("Properties") or {}
    if key in props:
        return props[key]
    return ((template.get("Globals") or {}).get("Function") or {}).get(key, default)


def function_dir(template: dict[str, Any], logical_id: str) -> str:
    """``functions/<name>/`` -> ``<name>`` (the naming key for events/ and handler modules)."""
    code_uri = str(function_property(template, logical_id, "CodeUri"))
    return Path(code_uri.rstrip("/")).name


def ref_target(value: Any) -> str | None:
    """Logical id named by ``{"Ref": X}`` or ``{"Fn::GetAtt": [X, attr]}``, else None."""
    if isinstance(value, dict) and len(value) == 1:
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            return str(target[0] if isinstance(target, list) else str(target).split(".", 1)[0])
    return None
