"""``python -m bench [imports|tick|e2e|load]`` — all four by default. Numbers are printed, never asserted."""

from __future__ import annotations

import os
import sys

# dummy credentials and a region: benchmarks only ever talk to loopback emulators
for _key, _value in {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
}.items():
    os.environ.setdefault(_key, _value)

from bench import e2e, imports, load, tick  # noqa: E402


def main(argv: list[str]) -> int:
    chosen = argv or ["imports", "tick", "e2e", "load"]
    for name in chosen:
        {"imports": imports.main, "tick": tick.main, "e2e": e2e.main, "load": load.main}[name]()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
