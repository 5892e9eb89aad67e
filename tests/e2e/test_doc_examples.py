"""Every shell example of README.md and docs/ that targets the local stack runs as written against a started one
(docs/testing.md, "Examples in the docs"): each command succeeds and each ``curl`` answer is a 2xx, or the
error its line documents (``# answers 401``, ``# answers 401 INVALID_TENANT_AUTH``). Examples for deploying,
AWS or anything this stack does not start are skipped with the reason their marker (or the classification)
gives."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.doc_examples import ROOT, RUN, Example, all_examples, curl_shim, statuses_in

pytestmark = pytest.mark.e2e

EXAMPLES = all_examples()
TIMEOUT_S = 120


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.id for example in EXAMPLES])
def test_example_runs_as_written(example: Example, shared_stack: dict, tmp_path: Path) -> None:
    if example.action != RUN:
        pytest.skip(f"{example.id}: {example.reason}")
    real_curl = shutil.which("curl")
    assert real_curl is not None, "the examples call curl; install it"
    shims = curl_shim(tmp_path, real_curl)
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        # the stack's keys, as a developer's .env holds them (`amsg invoke` reads the master key there)
        **shared_stack["stack"].settings.environment(),
        "PATH": os.pathsep.join([str(shims), venv_bin, os.environ.get("PATH", "")]),
    }
    try:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", example.script_for(shared_stack["stack"].base_url)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"{example.id} ran longer than {TIMEOUT_S}s (a command that starts something and waits?): mark it "
            "<!-- example: skip <reason> --> (docs/testing.md)"
        )
    statuses, stderr = statuses_in(done.stderr)
    where = f"{example.id}\n--- example\n{example.text}--- stdout\n{done.stdout}--- stderr\n{stderr}"
    assert done.returncode == 0, f"exit status {done.returncode}: {where}"
    expected = example.expected_answers()
    assert len(statuses) == len(expected), f"{len(expected)} curl call(s) in the text, {len(statuses)} made: {where}"
    for got, (wanted, code) in zip(statuses, expected, strict=True):
        if wanted is None:
            assert 200 <= got < 300, (
                f"an answer was {got}, not a success (add '# answers {got}' if the text shows that error on "
                f"purpose): {where}"
            )
        else:
            assert got == wanted, f"an answer was {got}, the text says {wanted}: {where}"
            assert code is None or code in done.stdout, f"the text says {code}, the output does not: {where}"
