"""The ``.env`` reader shared by ``amsg local`` and ``amsg import`` (a leaf module: it imports nothing of ours,
so neither command has to import the other for it)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["read_env_file"]


def read_env_file(path: Path) -> dict[str, str]:
    """Minimal ``.env`` reader: ``KEY=VALUE`` lines, optional ``export``, quotes, ``#`` comments."""
    values: dict[str, str] = {}
    if not path.is_file():
        return values
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or "=" not in stripped:
            continue
        key, _, value = stripped.removeprefix("export ").partition("=")
        key, value = key.strip(), value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        else:
            value = value.split(" #", 1)[0].strip()
        if key:
            values[key] = value
    return values
