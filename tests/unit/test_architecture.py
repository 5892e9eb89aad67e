"""The layering rules, enforced: domain/API/engine/http code never imports boto3, httpx, http_ece, pywebpush
or os; nothing but adapters talks to AWS or the network; API handlers never load the push or LLM stack."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers/shared/amsg"
FORBIDDEN = {"boto3", "botocore", "httpx", "http_ece", "pywebpush", "aiohttp", "requests", "os"}
PURE_PACKAGES = ["domain", "api", "engine", "http"]


def _tree(path: Path) -> ast.Module:
    """A file's syntax tree, parsed once per content: the checks below walk every module of the package, most
    of them in several tests (the trees are only read)."""
    stat = path.stat()
    return _parsed(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4096)
def _parsed(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def imported_modules(path: Path) -> set[str]:
    tree = _tree(path)
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
@pytest.mark.slow  # a fresh interpreter per handler
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


# ---- dependencies between the parts of the package -----------------------------------------------------------
#
# A "part" is a top-level module (``amsg.ports``) or subpackage (``amsg.engine``). Function-level (lazy) imports
# count too: they are dependencies all the same, only deferred.


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _part(module: str) -> str | None:
    pieces = module.split(".")
    return pieces[1] if pieces[0] == "amsg" and len(pieces) > 1 else None


def amsg_imports(path: Path) -> set[str]:
    """Absolute names of the ``amsg`` modules a file imports (relative imports resolved; ``from amsg import
    runtime`` is the module ``amsg.runtime``, ``from amsg import __version__`` the package ``amsg``)."""
    return _imports_of(_tree(path), path)


def _imports_of(tree: ast.Module, path: Path) -> set[str]:
    module = _module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:  # ``from amsg import runtime`` imports the module amsg.runtime
                candidate = f"{source}.{alias.name}"
                found.add(candidate if _is_module(candidate) else source)
    return {name for name in found if name == "amsg" or name.startswith("amsg.")}


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def part_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = _part(_module_name(path))
        if source is None:
            continue
        targets = {_part(name) for name in amsg_imports(path)} - {None, source}
        graph.setdefault(source, set()).update(t for t in targets if t)
    return graph


# The composition root wires every floor together; only the Lambda handlers (outside the package) import it.
FORBIDDEN_PARTS = {
    # the engine is driven by the API (instant) and by handlers, never the other way round
    "engine": {"api", "http", "runtime"},
    # pure rules: no I/O ports wiring, no HTTP, no engine
    "domain": {"api", "http", "engine", "adapters", "runtime", "context"},
    # the small interfaces depend on nothing of the package, so every layer can use them without a loop
    "ports": {"domain", "api", "http", "engine", "adapters", "runtime", "context"},
    "adapters": {"api", "http", "engine", "runtime", "context"},
    "http": {"api", "engine", "adapters", "runtime"},
    "api": {"adapters", "runtime"},
}


@pytest.mark.parametrize("part", sorted(FORBIDDEN_PARTS))
def test_forbidden_dependencies_between_parts(part):
    assert not (part_graph().get(part, set()) & FORBIDDEN_PARTS[part])


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_in_the_package_imports_the_composition_root(path):
    """Handlers pass what a floor needs (the context factory, the settings); a floor that reached up for
    ``amsg.runtime`` would hide a dependency on the environment and on every adapter."""
    if path.name != "runtime.py":
        assert "amsg.runtime" not in amsg_imports(path), path.relative_to(ROOT)


def test_the_import_reader_resolves_from_package_import_module():
    source = PACKAGE / "http" / "probe_for_the_test.py"
    tree = ast.parse("def later():\n    from amsg import runtime, __version__\n    from .. import jsonio\n")
    assert _imports_of(tree, source) == {"amsg.runtime", "amsg", "amsg.jsonio"}


def test_failure_types_are_a_leaf():
    """Ports, domain, engine and adapters all raise or read them (and name arbitrary JSON by the JSON module's
    alias); a leaf cannot close a loop."""
    assert amsg_imports(PACKAGE / "failures.py") == set()
    assert amsg_imports(PACKAGE / "jsonio.py") == set()
    assert amsg_imports(PACKAGE / "task_payload.py") <= {"amsg.jsonio"}  # the stored shapes: below every floor
    leaves = {"amsg.failures", "amsg.jsonio"}
    for path in (PACKAGE / "ports").glob("*.py"):  # the ports use nothing but each other and those leaves
        assert all(name in leaves or name.startswith("amsg.ports") for name in amsg_imports(path)), path.name


def test_the_parts_form_no_cycle():
    graph = part_graph()
    state: dict[str, str] = {}
    cycle: list[str] = []

    def visit(node: str, trail: list[str]) -> bool:
        state[node] = "open"
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycle.extend([*trail, node, target])
                return True
            if target not in state and visit(target, [*trail, node]):
                return True
        state[node] = "done"
        return False

    for node in sorted(graph):
        if node not in state and visit(node, []):
            break
    assert cycle == []


# ---- dependencies between modules ----------------------------------------------------------------------------
#
# No two modules import each other, directly or around a loop, in the shared package or in the tools. Every import
# counts: at module level, inside a function (lazy) and under ``if TYPE_CHECKING:`` (a loop hidden from the
# interpreter is still a loop in the design).

SOURCE_ROOTS = (PACKAGE.parent, ROOT / "tools")

# Loops that exist on this branch and are being removed on another one; each entry is the set of modules of one
# loop. Empty this set when those changes are merged: the test then holds the whole house to "no loop at all".


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in SOURCE_ROOTS:
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts and "__pycache__" not in parts:
                found[".".join(parts)] = path
    return found


def module_imports(path: Path, module: str, known: set[str] | dict[str, Path]) -> set[str]:
    """The known modules a file imports, wherever the import statement is. ``from a import b`` names the
    module ``a.b`` when there is one, else ``a`` (the package whose ``__init__`` provides ``b``)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                candidate = f"{source}.{alias.name}" if source else alias.name
                found.add(candidate if candidate in known else source)
    return {name for name in found if name in known and name != module}


def module_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: module_imports(path, name, modules) for name, path in modules.items()}


def module_cycles() -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    graph = module_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(frozenset(component))
    return components


def test_no_module_imports_itself_around_a_loop():
    assert [sorted(cycle) for cycle in module_cycles()] == []


def test_the_module_graph_counts_lazy_and_type_only_imports(tmp_path):
    source = tmp_path / "a.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.b import B\n"
        "def later():\n    from pkg import c\n    import pkg.d\n",
        encoding="utf-8",
    )
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"}
    assert module_imports(source, "pkg.a", known) == {"pkg.b", "pkg.c", "pkg.d"}


def test_the_cycle_check_finds_a_loop(monkeypatch):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    monkeypatch.setattr(sys.modules[__name__], "module_graph", lambda: graph)
    assert module_cycles() == [frozenset({"a", "b", "c"})]


MAX_MODULE_LINES = 600
SOURCE_DIRS = ("layers", "functions", "tools", "bench", "scripts", "tests", "examples")


def python_sources() -> list[Path]:
    """Every Python file of the repository: ``*.py`` and the extensionless scripts that run under Python."""
    found = [path for name in SOURCE_DIRS for path in (ROOT / name).rglob("*.py") if "__pycache__" not in path.parts]
    for path in (ROOT / "scripts").iterdir():
        head = path.read_bytes()[:64] if path.is_file() and not path.suffix else b""
        if head.startswith(b"#!") and b"python" in head:
            found.append(path)
    return sorted(found)


def long_modules(paths: list[Path]) -> dict[str, int]:
    return {
        str(path.relative_to(ROOT)): lines
        for path in paths
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }


def test_no_module_anywhere_is_over_600_lines():
    """The layer, the handlers, the tools, the benchmarks, the scripts and the tests alike."""
    assert long_modules(python_sources()) == {}


def test_the_line_limit_sees_tools_scripts_and_tests():
    names = {str(path.relative_to(ROOT)) for path in python_sources()}
    assert {"tools/amsg_local/cli.py", "bench/capacity.py", "scripts/gen-openapi", "tests/conftest.py"} <= names


def test_the_graph_sees_lazy_and_relative_imports():
    assert "adapters" in part_graph()["runtime"]  # built lazily inside build_context
    assert "amsg.api.common" in amsg_imports(PACKAGE / "api/messages.py")  # ``from .common import``
