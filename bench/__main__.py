"""``python -m bench [imports|tick|requests|capacity|e2e|load|migration|local]`` — all but ``local`` by default.

Numbers are printed, never asserted."""

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

from bench import capacity, e2e, imports, load, local_stack, migration, requests, tick  # noqa: E402


def main(argv: list[str]) -> int:
    chosen = argv or ["imports", "tick", "requests", "capacity", "e2e", "load", "migration"]
    for name in chosen:
        runners = {"imports": imports, "tick": tick, "requests": requests, "e2e": e2e, "load": load}
        runners.update(capacity=capacity, migration=migration, local=local_stack)
        runners[name].main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
