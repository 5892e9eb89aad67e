"""The layering rules, enforced: domain/API/engine/http code never imports boto3, httpx, http_ece, pywebpush
or os; nothing but adapters talks to AWS or the network; API handlers never load the push or LLM stack."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers/shared/amsg"
FORBIDDEN = {"boto3", "botocore", "httpx", "http_ece", "pywebpush", "aiohttp", "requests", "os"}
PURE_PACKAGES = ["domain", "api", "engine", "http"]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize(
    "path", sorted(p for pkg in PURE_PACKAGES for p in (PACKAGE / pkg).rglob("*.py")), ids=lambda p: p.name
)
def test_pure_layers_import_no_io_libraries(path):
    assert not (imported_modules(path) & FORBIDDEN), path.relative_to(ROOT)


def test_only_adapters_and_the_composition_root_import_boto3():
    offenders = [
        p.relative_to(ROOT)
        for p in PACKAGE.rglob("*.py")
        if "boto3" in imported_modules(p) and "adapters" not in p.parts
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "handler",
    sorted(p for p in (ROOT / "functions").glob("*/*_handler.py") if p.parent.name not in ("tick", "run_task")),
    ids=lambda p: p.parent.name,
)
def test_api_handlers_do_not_load_the_push_or_llm_stack_at_import(handler):
    probe = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('h', {str(handler)!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "heavy = ('httpx', 'http_ece', 'pywebpush', 'aiohttp', 'boto3')\n"
        "print(json.dumps(sorted(m for m in heavy if m in sys.modules)))"
    )
    env = {"PYTHONPATH": str(PACKAGE.parent), "AWS_DEFAULT_REGION": "us-east-1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
