"""Cold start on the built artefact, in Lambda's layout: ``python -m bench cold`` (also part of ``make bench``).

The layer is built by its own build step (``layers/shared/Makefile``, the one ``sam build`` runs) for this
machine's platform (its arm64 twin cannot be imported on x86_64), bytecode included; the function code is a
copy of ``functions/<name>/`` as ``sam build`` ships it (no bytecode). Each sample is a fresh interpreter with
``PYTHONPATH=<task>:<opt>/python`` as Lambda sets it, ``PYTHONDONTWRITEBYTECODE=1`` and, when we may, the
artefact mounted read-only (as /opt and /var/task are): it imports the handler module and calls
``handler(event, context)`` once with the sample event from ``events/``, timing both with ``perf_counter_ns``.
A route that reads the table reads DynamoDB Local. One more run with ``-X importtime`` says what dominates.

Env: AMSG_BENCH_COLD_RUNS (default 7), AMSG_BENCH_COLD_BYTECODE=0 (measure the layer without its .pyc, as
before the build step compiled it), AMSG_BENCH_COLD_SOURCE (another checkout to measure, e.g. an older commit),
AMSG_BENCH_COLD_KEEP=1 (keep the artefact; its path is printed), AMSG_BENCH_COLD_ONLY (comma-separated function
names: measure only those), AMSG_BENCH_COLD_AGAINST (an older checkout: both are built and their samples
alternate, so a shared machine's load weighs on both alike; CPU time still grows with the load).
Numbers are printed, never asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = "amsg-cold-bench"
MASTER_KEY = "cold-bench-master-key-0123456789abcdef"
VAPID_PUBLIC_KEY = "BKd0FOnmkngVtRSAbUrJmh7eNBM7DAyA-n9F8CjJ0pqsKzQrAU9yGxzCVWOsOmE9rfpy2r2kPmE8dtwXUBv9XHg"
# (function dir, sample event or None for import only, what its first request needs)
FUNCTIONS: list[tuple[str, str | None, str]] = [
    ("capabilities", "capabilities.json", "no storage"),
    ("vapid_public_key", "vapid_public_key.json", "no storage"),
    ("get_user_key", "get_user_key.json", "master key"),
    ("messages", "messages.json", "DynamoDB read"),
    ("outbox", "outbox.json", "DynamoDB read"),
    ("client_state", "client_state.get.json", "DynamoDB read"),
    ("schedule_message", None, "import only"),
    ("tick", None, "import only"),
    ("run_task", None, "import only"),
]
PROBE = r"""
import importlib, json, sys, time
t0, c0 = time.perf_counter_ns(), time.process_time_ns()
module = importlib.import_module(sys.argv[1])
t1, c1 = time.perf_counter_ns(), time.process_time_ns()
status = None
if sys.argv[2]:
    class Context:
        function_name = "cold"; memory_limit_in_mb = 512; aws_request_id = "cold-1"
        invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:cold"
        def get_remaining_time_in_millis(self): return 10_000
    with open(sys.argv[2]) as f:
        event = json.load(f)
    result = module.handler(event, Context())
    status = result.get("statusCode") if isinstance(result, dict) else None
t2, c2 = time.perf_counter_ns(), time.process_time_ns()
heavy = sorted(m for m in ("boto3", "botocore", "httpx", "cryptography", "pydantic", "aws_xray_sdk",
                           "aws_lambda_powertools.event_handler", "aws_lambda_powertools.metrics") if m in sys.modules)
sys.stderr.write("AMSG_COLD " + json.dumps({"import_ms": (t1 - t0) / 1e6, "first_ms": (t2 - t0) / 1e6,
                                            "import_cpu_ms": (c1 - c0) / 1e6, "first_cpu_ms": (c2 - c0) / 1e6,
                                            "status": status, "loaded": heavy}) + "\n")
"""


@dataclass
class Artefact:
    opt: Path  # the layer, as /opt
    task: Path  # one directory per function, each as /var/task
    read_only: bool


def build_artefact(work: Path, source: Path, bytecode: bool) -> Artefact:
    """The layer through its own build step for this machine's platform, and the functions as sam ships them."""
    opt, task = work / "opt", work / "task"
    python = Path(sys._base_executable)  # the venv's base interpreter has pip; the build step needs it
    makefile = ROOT / "layers/shared/Makefile"
    subprocess.run(
        ["make", "-s", "-f", str(makefile), "build-SharedLayer", f"ARTIFACTS_DIR={opt}", f"PYTHON={python}",
         "PLATFORM=manylinux2014_x86_64"],
        cwd=source / "layers/shared", check=True,
    )  # fmt: skip
    if not bytecode:
        for cache in list(opt.rglob("__pycache__")):
            shutil.rmtree(cache)
    for name, _, _ in FUNCTIONS:
        shutil.copytree(source / "functions" / name, task / name, ignore=shutil.ignore_patterns("__pycache__"))
    return Artefact(opt, task, _can_mount_read_only(work))


def _make_read_only(work: Path, builds: list[Build]) -> None:
    """Without a read-only bind mount, make the artefacts read-only the ordinary way (root could still write)."""
    if not all(b.art.read_only for b in builds):
        for build in builds:
            build.art.read_only = False
        subprocess.run(["chmod", "-R", "a-w", str(work)], check=True)


def _can_mount_read_only(path: Path) -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run([*_ro_prefix(path), "true"], capture_output=True)
    return probe.returncode == 0


def _ro_prefix(path: Path) -> list[str]:
    """Run a command in its own mount namespace where ``path`` is a read-only bind mount of itself."""
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, str(path)]


def lambda_env(art: Artefact, function: str, endpoint: str | None, *, init: bool = False) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONPATH": f"{art.task / function}:{art.opt / 'python'}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "cold",
        "AWS_SECRET_ACCESS_KEY": "cold",
        "AWS_LAMBDA_FUNCTION_NAME": f"amsg-{function}",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
        "AMSG_TABLE_NAME": TABLE,
        "AMSG_QUEUE_URL": "http://127.0.0.1:9/000000000000/cold",
        "AMSG_MASTER_KEY": MASTER_KEY,  # on AWS: an SSM parameter, read on first use (docs/cold-start.md)
        "AMSG_VAPID_PUBLIC_KEY": VAPID_PUBLIC_KEY,
        "AMSG_VAPID_EMAIL": "mailto:cold@example.com",
        "AMSG_TRACING": "false",
        "POWERTOOLS_SERVICE_NAME": "amsg",
        "POWERTOOLS_METRICS_NAMESPACE": "amsg",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    if endpoint:
        env["AWS_ENDPOINT_URL_DYNAMODB"] = endpoint
    if init:  # as Lambda sets it: the handler module's runtime.prepare() does its init-phase work
        env["AWS_LAMBDA_INITIALIZATION_TYPE"] = "on-demand"
    return env


def run_once(art: Artefact, work: Path, function: str, event: str | None, env: dict[str, str], *flags: str) -> dict:
    module = f"{function}_handler"
    event_path = str(ROOT / "events" / event) if event else ""
    # -S: none of this machine's site-packages (or their .pth files); Lambda's path is PYTHONPATH + stdlib
    cmd = [sys._base_executable, "-S", *flags, "-c", PROBE, module, event_path]
    if art.read_only:
        cmd = _ro_prefix(work) + cmd
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    line = next((ln for ln in done.stderr.splitlines() if ln.startswith("AMSG_COLD ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"{function}: probe failed\n{done.stderr[-2000:]}")
    result = json.loads(line.removeprefix("AMSG_COLD "))
    result["importtime"] = done.stderr if "-X" in flags else ""
    return result


def dominant(importtime: str, top: int = 4) -> str:
    """Self time of every import, summed per package (amsg per sub-package), largest first."""
    totals: dict[str, float] = defaultdict(float)
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        parts = name.split(".")
        depth = 2 if parts[0] in ("amsg", "aws_lambda_powertools") and len(parts) > 1 else 1
        totals[".".join(parts[:depth])] += int(self_us) / 1000
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:top]
    return f"all {sum(totals.values()):.0f}: " + ", ".join(f"{name} {ms:.0f}" for name, ms in ranked)


def _medians(samples: list[dict], has_event: bool) -> dict:
    def median(key: str) -> float | None:
        return statistics.median(s[key] for s in samples) if has_event or key.startswith("import") else None

    keys = ("import_ms", "first_ms", "import_cpu_ms", "first_cpu_ms")
    return {key: median(key) for key in keys} | {"status": samples[-1]["status"], "loaded": samples[-1]["loaded"]}


def prepares_storage(source: Path, function: str) -> bool:
    return "storage=True" in (source / "functions" / function / f"{function}_handler.py").read_text()


@dataclass
class Build:
    label: str  # "" when one tree is measured
    art: Artefact
    source: Path


def measure(builds: list[Build], work: Path, endpoint: str | None, runs: int) -> list[dict]:
    """Per function: imported as in a test (work on first use), and, for a function whose module prepares its
    storage, as in a Lambda init (``init`` = import + that preparation, then the first invoke). With two builds
    their samples alternate, so that the machine's load weighs on both alike."""
    rows = []
    only = {name for name in os.environ.get("AMSG_BENCH_COLD_ONLY", "").split(",") if name}
    for function, event, needs in FUNCTIONS:
        if only and function not in only:
            continue
        endpoint_for = endpoint if needs == "DynamoDB read" else None
        plain = _alternate(builds, work, function, event, runs, lambda b: lambda_env(b.art, function, endpoint_for))
        prepared = _alternate(
            [b for b in builds if prepares_storage(b.source, function)],
            work, function, event, runs,
            lambda b: lambda_env(b.art, function, endpoint_for, init=True),
        )  # fmt: skip
        for build in builds:
            label = f"{function} [{build.label}]" if build.label else function
            row = {"function": label, "needs": needs} | _medians(plain[build.label], event is not None)
            env = lambda_env(build.art, function, endpoint_for)
            row["dominant"] = dominant(
                run_once(build.art, work, function, event, env, "-X", "importtime")["importtime"]
            )
            if build.label in prepared:
                row["init"] = _medians(prepared[build.label], event is not None)
            rows.append(row)
    return rows


def _alternate(
    builds: list[Build], work: Path, function: str, event: str | None, runs: int, env_of: Callable[[Build], dict]
) -> dict[str, list[dict]]:
    samples: dict[str, list[dict]] = {b.label: [] for b in builds}
    for _ in range(runs):
        for build in builds:
            samples[build.label].append(run_once(build.art, work, function, event, env_of(build)))
    return samples


VCPU_512MB = 512 / 1769  # Lambda's CPU share at 512 MB (1,769 MB = one vCPU); init runs with a full vCPU


def aws_model_ms(import_cpu: float, first_cpu: float) -> float:
    """What the CPU work would take on Lambda at 512 MB: the module's import (init) at full speed, the rest of
    the first request at the invocation's CPU share. A model: network time and the runtime's own start are out."""
    return import_cpu + (first_cpu - import_cpu) / VCPU_512MB


def print_rows(rows: list[dict], runs: int, bytecode: bool) -> None:
    layout = "layer with bytecode" if bytecode else "layer WITHOUT bytecode"
    print(f"== cold start on the built artefact ({layout}; median of {runs} fresh interpreters; ms, wall / CPU)")
    print("   work on first use: the module imported as tests do, everything else built by the first request")
    print("   init-phase: AWS_LAMBDA_INITIALIZATION_TYPE set, runtime.prepare() builds the clients during import")
    print("   AWS model: CPU ms on Lambda 512 MB if init runs at a full vCPU and the invoke at 512/1769 of one")
    print(f"  {'function':17s} {'first request':14s} {'import':>11s} {'import+invoke':>13s} {'AWS model':>9s}  status")
    for row in rows:
        _print_row(row["function"], row["needs"], row)
        print(f"  {'':17s} imports (self ms, one run) {row['dominant']}")
        print(f"  {'':17s} loaded: {', '.join(row['loaded']) or '-'}")
        if "init" in row:
            _print_row("  init-phase", "", row["init"])
    print(f"  (load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


def _print_row(label: str, needs: str, m: dict) -> None:
    imported = f"{m['import_ms']:4.0f} / {m['import_cpu_ms']:<4.0f}"
    if m["first_ms"] is None:
        first, model = "-", f"{m['import_cpu_ms']:9.0f}"
    else:
        first = f"{m['first_ms']:5.0f} / {m['first_cpu_ms']:<5.0f}"
        model = f"{aws_model_ms(m['import_cpu_ms'], m['first_cpu_ms']):9.0f}"
    print(f"  {label:17s} {needs:14s} {imported:>11s} {first:>13s} {model}  {m['status'] or '-'}")


def main() -> None:
    from bench.ddb import dynamodb_local_table

    runs = int(os.environ.get("AMSG_BENCH_COLD_RUNS", "7"))
    bytecode = os.environ.get("AMSG_BENCH_COLD_BYTECODE", "1") != "0"
    source = Path(os.environ.get("AMSG_BENCH_COLD_SOURCE") or ROOT).resolve()
    against = os.environ.get("AMSG_BENCH_COLD_AGAINST")
    work = Path(tempfile.mkdtemp(prefix="amsg-cold-"))
    try:
        if against:
            sources = [("before", Path(against).resolve()), ("after", source)]
            builds = [Build(label, build_artefact(work / label, src, bytecode), src) for label, src in sources]
        else:
            builds = [Build("", build_artefact(work, source, bytecode), source)]
        _make_read_only(work, builds)
        mode = "read-only bind mount" if builds[0].art.read_only else "chmod a-w"
        print(f"artefact: {work} ({mode}, PYTHONDONTWRITEBYTECODE=1, source {source}, against {against or '-'})")
        with dynamodb_local_table(TABLE) as endpoint:
            _warm_up(endpoint)
            rows = measure(builds, work, endpoint, runs)
        print_rows(rows, runs, bytecode)
    finally:
        if os.environ.get("AMSG_BENCH_COLD_KEEP") == "1":
            print(f"kept: {work}")
        else:
            subprocess.run(["chmod", "-R", "u+w", str(work)], check=False)
            shutil.rmtree(work, ignore_errors=True)


def _warm_up(endpoint: str) -> None:
    """DynamoDB Local is a JVM: its first queries are slow for reasons DynamoDB does not share."""
    import boto3

    client = boto3.client(
        "dynamodb", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    for _ in range(20):
        client.query(
            TableName=TABLE,
            KeyConditionExpression="PK = :p",
            ExpressionAttributeValues={":p": {"S": "warm"}},
        )


if __name__ == "__main__":
    main()
