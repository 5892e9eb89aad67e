"""``python -m bench [imports|tick|e2e]`` — all three by default. Numbers are printed, never asserted."""

from __future__ import annotations

import sys

from bench import e2e, imports, tick


def main(argv: list[str]) -> int:
    chosen = argv or ["imports", "tick", "e2e"]
    for name in chosen:
        {"imports": imports.main, "tick": tick.main, "e2e": e2e.main}[name]()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
