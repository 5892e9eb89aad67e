"""Tracing is opt-in: without AMSG_TRACING=true the X-Ray SDK is never imported; with it, the first request
builds the Powertools Tracer, which patches botocore and httpx (subprocesses: patching is process-wide)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # fresh interpreters: tracing patches process-wide

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from amsg import observability
tracer = observability.start_tracing({"AMSG_TRACING": sys.argv[1]})
import botocore.client
with observability.traced("Web Push"):  # the real recorder's subsegment (or nothing with tracing off)
    traced = True
print(json.dumps({
    "tracer": tracer is not None,
    "xray_imported": "aws_xray_sdk" in sys.modules,
    "botocore_patched": "Wrapper" in type(botocore.client.BaseClient.__dict__["_make_api_call"]).__name__,
    "same_tracer_again": observability.start_tracing({"AMSG_TRACING": sys.argv[1]}) is tracer,
    "traced": traced,
}))
"""


def _probe(flag: str) -> dict[str, bool]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "layers/shared"),
        "LAMBDA_TASK_ROOT": "/var/task",  # the Tracer disables itself outside Lambda
        "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
    }
    out = subprocess.run([sys.executable, "-c", PROBE, flag], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tracing_off_imports_no_xray_sdk():
    assert _probe("false") == {
        "tracer": False,
        "xray_imported": False,
        "botocore_patched": False,
        "same_tracer_again": True,
        "traced": True,
    }


def test_tracing_on_patches_aws_and_http_calls_once():
    assert _probe("true") == {
        "tracer": True,
        "xray_imported": True,
        "botocore_patched": True,
        "same_tracer_again": True,
        "traced": True,
    }
