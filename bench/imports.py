"""Import time of each Lambda handler from the dev venv (median of 5 fresh interpreters, bytecode cached), and
which heavy modules each one pulls in (API functions must never load the push/LLM stack). A quick proxy only:
the cold start a user meets is measured on the built artefact by ``python -m bench cold`` (docs/cold-start.md)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HANDLERS = {
    "api:get_user_key": "functions/get_user_key/get_user_key_handler.py",
    "api:schedule_message": "functions/schedule_message/schedule_message_handler.py",
    "api:messages": "functions/messages/messages_handler.py",
    "api:client_state": "functions/client_state/client_state_handler.py",
    "tick": "functions/tick/tick_handler.py",
    "run_task": "functions/run_task/run_task_handler.py",
}
PROBE = """
import importlib.util, json, sys, time
t = time.perf_counter()
spec = importlib.util.spec_from_file_location("h", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
elapsed = (time.perf_counter() - t) * 1000
heavy = [m for m in ("httpx", "http_ece", "pywebpush", "aiohttp", "requests", "pydantic", "boto3")
         if m in sys.modules]
print(json.dumps({"ms": elapsed, "heavy": heavy}))
"""


def measure(path: str, runs: int = 5) -> tuple[float, list[str]]:
    samples, heavy = [], []
    env = {"PYTHONPATH": f"{ROOT / 'layers/shared'}", "AWS_DEFAULT_REGION": "us-east-1", "PATH": "/usr/bin:/bin"}
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(ROOT / path)], capture_output=True, text=True, env=env, check=True
        ).stdout
        result = json.loads(out.strip().splitlines()[-1])
        samples.append(result["ms"])
        heavy = result["heavy"]
    return statistics.median(samples), heavy


def main() -> None:
    print("== import cost per handler (median of 5 fresh interpreters)")
    baseline = None
    for name, path in HANDLERS.items():
        if not (ROOT / path).exists():
            continue
        ms, heavy = measure(path)
        baseline = baseline or ms
        print(f"  {name:24s} {ms:7.1f} ms   x{ms / baseline:4.2f}   loads: {', '.join(heavy) or '-'}")
