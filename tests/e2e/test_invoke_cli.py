"""``amsg invoke``: every sample event of events/ against its function, on a running local stack, without Docker.

The command is driven as a developer types it (``amsg invoke <LogicalId> -e events/<file>.json``): its stdout
must hold the response alone (so it pipes into ``jq``), its stderr Lambda's ``REPORT`` line.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from amsg_local.cli import LocalStack, main, start_local_stack

from tests.support.template import REPO_ROOT, function_dir, functions, project_template

pytestmark = pytest.mark.e2e

EVENTS = REPO_ROOT / "events"
# the sample events' encrypted bodies decrypt under this key (scripts/generate_events.py)
MASTER_KEY = "a" * 64
# a subscription first (scheduling needs one) and its deletion last
FIRST = ["push_subscription.json", "schedule_message.json"]
LAST = ["push_subscription.delete.json"]
# answers a sample event gets by design: the rest answer 2xx
NOT_2XX = {
    "not_found.json": 404,  # the $default route
    "send_notifications.json": 404,  # the multi-tenant line's route, on the single-tenant line
    "message.json": 404,  # the sample task id names no task of this fresh table
    "update_message.json": 404,
    "cancel_message.json": 404,
}
REPORT = re.compile(
    r"^REPORT RequestId: \S+\tDuration: [\d.]+ ms\tBilled Duration: \d+ ms\tMemory Size: (\d+) MB\t"
    r"Max Memory Used: \d+ MB",
    re.M,
)


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with start_local_stack(config={"AMSG_MASTER_KEY": MASTER_KEY}) as running:
        yield running


@pytest.fixture(scope="module")
def env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The developer's ``.env``, where ``amsg local`` saved the stack's master key."""
    path = tmp_path_factory.mktemp("invoke") / ".env"
    path.write_text(f"AMSG_MASTER_KEY={MASTER_KEY}\n", encoding="utf-8")
    return path


def event_files() -> list[str]:
    names = sorted(p.name for p in EVENTS.glob("*.json"))
    rest = [n for n in names if n not in FIRST and n not in LAST]
    return [*FIRST, *rest, *LAST]


def function_of(name: str) -> str:
    template = project_template()
    by_dir = {function_dir(template, fn): fn for fn in functions(template)}
    return by_dir[name.split(".", 1)[0]]


def invoke(capfd: pytest.CaptureFixture[str], *args: str, env_file: Path | None = None) -> tuple[int, str, str]:
    capfd.readouterr()
    code = main(["invoke", *args, "--env-file", str(env_file or "/nonexistent/.env")])
    out, err = capfd.readouterr()
    return code, out, err


def test_every_sample_event_invokes_its_function(
    stack: LocalStack, env_file: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    url = stack.base_url
    answers: dict[str, Any] = {}
    for name in event_files():
        function = function_of(name)
        code, out, err = invoke(capfd, function, "-e", str(EVENTS / name), "--stack-url", url, env_file=env_file)
        assert code == 0, f"{name}: {out}{err[-2000:]}"
        lines = out.strip().splitlines()
        assert len(lines) == 1, f"{name}: stdout must hold the response alone: {out[:500]}"
        response = json.loads(lines[0])
        assert "errorType" not in response, f"{name}: {response}"
        report = REPORT.search(err)
        assert report, f"{name}: no REPORT line in {err[-1000:]}"
        assert int(report.group(1)) == _memory_size(function), name
        if "statusCode" in response:
            status = response["statusCode"]
            assert status == NOT_2XX[name] if name in NOT_2XX else 200 <= status < 300, f"{name}: {response}"
        answers[name] = response
    scheduled = json.loads(answers["schedule_message.json"]["body"])
    assert scheduled["success"] is True
    assert answers["tick.json"]["scheduledTime"] == "2029-12-31T00:00:00Z"
    assert answers["run_task.json"] == {"batchItemFailures": []}
    assert len(answers) == len(list(EVENTS.glob("*.json")))


def _memory_size(function: str) -> int:
    from amsg_local.template import function_spec

    return function_spec(project_template(), function).memory_size


def test_env_vars_file_overrides_declared_variables_only(
    stack: LocalStack, env_file: Path, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The file ``sam local invoke --env-vars`` reads: Parameters for all, the function's own entries win."""
    overrides = tmp_path / "env-vars.json"
    overrides.write_text(
        json.dumps(
            {
                "Parameters": {"AMSG_VAPID_PUBLIC_KEY": "from-parameters", "NOT_IN_TEMPLATE": "x"},
                "VapidPublicKeyFunction": {"AMSG_VAPID_PUBLIC_KEY": "BOverriddenKey"},
            }
        )
    )
    code, out, err = invoke(
        capfd,
        "VapidPublicKeyFunction",
        "-e",
        str(EVENTS / "vapid_public_key.json"),
        "--env-vars",
        str(overrides),
        "--stack-url",
        stack.base_url,
        env_file=env_file,
    )
    assert code == 0, err
    assert json.loads(json.loads(out)["body"])["publicKey"] == "BOverriddenKey"
    assert "ignored: NOT_IN_TEMPLATE" in err


def test_timeout_is_the_functions_and_the_error_is_lambdas(
    stack: LocalStack, env_file: Path, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "fn").mkdir()
    (tmp_path / "fn" / "slow.py").write_text("import time\n\ndef handler(event, context):\n    time.sleep(30)\n")
    (tmp_path / "template.yaml").write_text(
        textwrap.dedent(
            """\
            Resources:
              SlowFunction:
                Type: AWS::Serverless::Function
                Properties: {CodeUri: fn/, Handler: slow.handler, Timeout: 1, MemorySize: 128}
            """
        )
    )
    template = str(tmp_path / "template.yaml")
    code, out, err = invoke(
        capfd, "SlowFunction", "--template", template, "--stack-url", stack.base_url, env_file=env_file
    )
    assert code == 1
    assert json.loads(out)["errorType"] == "Sandbox.Timedout"
    assert "Task timed out after 1.00 seconds" in out
    assert "Memory Size: 128 MB" in err


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command in a process of its own (its environment must differ from the in-process stack's)."""
    amsg = Path(sys.executable).with_name("amsg")
    return subprocess.run(
        [str(amsg), "invoke", *args, "--env-file", "/nonexistent/.env"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_own_dynamodb_endpoint_without_a_stack(stack: LocalStack) -> None:
    """``--dynamodb-endpoint``: a DynamoDB you run (here the stack's), a table of its own made from the template."""
    assert stack.dynamodb_endpoint
    done = run_cli(
        "TickFunction",
        "-e",
        str(EVENTS / "tick.json"),
        "--dynamodb-endpoint",
        stack.dynamodb_endpoint,
        AMSG_TABLE_NAME="invoke-own-table",
        AMSG_MASTER_KEY=MASTER_KEY,
    )
    code, out, err = done.returncode, done.stdout, done.stderr
    assert code == 0, err
    assert json.loads(out)["dueTasks"] == 0
    tables = stack.client("dynamodb").list_tables()["TableNames"]
    assert "invoke-own-table" in tables


def test_no_stack_is_a_clear_message(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = invoke(capfd, "CapabilitiesFunction", "--stack-url", "http://127.0.0.1:9")
    assert code == 2 and out == ""
    assert "no local stack at http://127.0.0.1:9" in err and "make run" in err


def test_a_master_key_other_than_the_stacks_is_refused(stack: LocalStack) -> None:
    done = run_cli("CapabilitiesFunction", "--stack-url", stack.base_url, AMSG_MASTER_KEY="b" * 64)
    assert done.returncode == 2 and done.stdout == ""
    assert "is not the running stack's" in done.stderr


def test_unknown_function_is_named(capfd: pytest.CaptureFixture[str]) -> None:
    code, _out, err = invoke(capfd, "NoSuchFunction")
    assert code == 2
    assert "NoSuchFunction is not an AWS::Serverless::Function" in err
