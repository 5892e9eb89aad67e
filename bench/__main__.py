"""``python -m bench [NAME ...]``: imports, cold, tick, requests, capacity, e2e, load, migration and hostile
(all by default); moto-memory, local, tenants, spike, cost, chaos, pushcpu and transport on request.

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

from bench import (  # noqa: E402
    capacity,
    chaos,
    cold,
    cost,
    e2e,
    hostile,
    imports,
    load,
    local_stack,
    migration,
    moto_memory,
    pushcpu,
    requests,
    spike,
    tenants,
    tick,
    transport,
)


def main(argv: list[str]) -> int:
    chosen = argv or ["imports", "cold", "tick", "requests", "capacity", "e2e", "load", "migration", "hostile"]
    for name in chosen:
        runners = {"imports": imports, "tick": tick, "requests": requests, "e2e": e2e, "load": load}
        runners.update(capacity=capacity, migration=migration, cold=cold, hostile=hostile)
        runners["moto-memory"] = moto_memory
        runners["local"] = local_stack
        runners["tenants"] = tenants
        runners["spike"] = spike
        runners["cost"] = cost
        runners["chaos"] = chaos
        runners["pushcpu"] = pushcpu
        runners["transport"] = transport
        runners[name].main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
