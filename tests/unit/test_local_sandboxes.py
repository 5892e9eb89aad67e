"""Process sandboxes of the local stack: one process per concurrent invocation, Lambda's limits and log lines.

A throwaway template with handlers that report their PID, change their environment, sleep past their
``Timeout``, allocate past their ``MemorySize`` or die; driven through the same ``LambdaRuntime`` (and
gateway, and SQS drain) that ``amsg local`` uses.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from amsg_local.cli import start_local_stack
from amsg_local.lambda_runtime import LAMBDA_SYNC_PAYLOAD_LIMIT, LambdaRuntime
from amsg_local.template import load_template

from tests.support.tiny_stack import write_tiny_project

pytestmark = pytest.mark.slow  # sandboxes are processes: subprocesses, not for make unit

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Globals:
  Function:
    Runtime: python3.12
    Timeout: 5
    MemorySize: 256
    Environment:
      Variables:
        SANDBOX_KNOB: "from-template"
Resources:
  PidFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/pid/
      Handler: pid_handler.handler
  SleepyFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/sleepy/
      Handler: sleepy_handler.handler
      Timeout: 1
  HogFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/hog/
      Handler: hog_handler.handler
      MemorySize: 128
"""

HANDLERS = {
    "functions/pid/pid_handler.py": """
        import os
        import time

        def handler(event, context):
            if event.get("mark"):
                os.environ["SANDBOX_MARK"] = event["mark"]
            if event.get("exit"):
                os._exit(3)
            time.sleep(event.get("nap", 0))
            return {"pid": os.getpid(), "mark": os.environ.get("SANDBOX_MARK"),
                    "knob": os.environ.get("SANDBOX_KNOB"), "memory": context.memory_limit_in_mb}
    """,
    "functions/sleepy/sleepy_handler.py": """
        import time

        def handler(event, context):
            time.sleep(3)
            return "too late"
    """,
    "functions/hog/hog_handler.py": """
        import os
        import time

        hoard = []

        def handler(event, context):
            if event.get("mb"):
                hoard.append(b"x" * (event["mb"] * 1024 * 1024))  # written, so resident
                time.sleep(2)
            return {"pid": os.getpid()}
    """,
}


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LambdaRuntime]:
    root = tmp_path_factory.mktemp("sandboxes")
    (root / "template.yaml").write_text(TEMPLATE, encoding="utf-8")
    for relative, source in HANDLERS.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    saved = list(sys.path)
    lambdas = LambdaRuntime(load_template(root / "template.yaml"))
    yield lambdas
    lambdas.close()
    sys.path[:] = saved


def _both(runtime: LambdaRuntime, first: dict[str, Any], second: dict[str, Any]) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(2) as pool:
        invocations = list(pool.map(lambda event: runtime.invoke("PidFunction", event), [first, second]))
    assert all(invocation.ok for invocation in invocations), invocations
    return [invocation.value for invocation in invocations]


def test_two_concurrent_invocations_run_in_two_processes_neither_the_gateways(runtime: LambdaRuntime) -> None:
    values = _both(runtime, {"nap": 0.5}, {"nap": 0.5})
    pids = {value["pid"] for value in values}
    assert len(pids) == 2
    assert os.getpid() not in pids
    assert values[0]["knob"] == "from-template"  # the template's environment reaches the sandbox
    assert values[0]["memory"] == "256"
    again = runtime.invoke("PidFunction", {})
    assert again.value["pid"] in pids  # a warm sandbox is reused


def test_an_environment_change_in_one_sandbox_is_invisible_to_another(runtime: LambdaRuntime) -> None:
    marked, _plain = _both(runtime, {"nap": 0.5, "mark": "only-here"}, {"nap": 0.5})
    seen = _both(runtime, {"nap": 0.5}, {"nap": 0.5})
    by_pid = {value["pid"]: value["mark"] for value in seen}
    assert len(by_pid) == 2
    for pid, mark in by_pid.items():
        assert mark == ("only-here" if pid == marked["pid"] else None)
    assert "SANDBOX_MARK" not in os.environ  # nor does it reach the gateway


def test_timeout_ends_with_lambdas_error_and_kills_the_sandbox(runtime: LambdaRuntime) -> None:
    started = time.monotonic()
    invocation = runtime.invoke("SleepyFunction", {})
    assert invocation.error_type == "Sandbox.Timedout"
    assert invocation.error_message.endswith("Task timed out after 1.00 seconds")
    assert time.monotonic() - started < 2.5
    assert runtime.function("SleepyFunction").pids() == []  # the process is gone, not left running


def test_allocating_past_memory_size_kills_the_sandbox_and_the_next_one_is_fresh(runtime: LambdaRuntime) -> None:
    first = runtime.invoke("HogFunction", {})
    assert first.ok
    hog = runtime.invoke("HogFunction", {"mb": 300})  # MemorySize 128
    assert hog.error_type == "Runtime.OutOfMemory"
    assert "signal: killed" in (hog.error_message or "")
    with pytest.raises(ProcessLookupError):
        os.kill(first.value["pid"], 0)
    after = runtime.invoke("HogFunction", {})
    assert after.ok and after.value["pid"] != first.value["pid"]
    stats = runtime.stats()["functions"]["HogFunction"]
    assert stats["errors"]["Runtime.OutOfMemory"] == 1
    assert stats["coldStarts"] == 2


def test_a_sandbox_that_exits_or_is_killed_is_replaced(runtime: LambdaRuntime) -> None:
    crashed = runtime.invoke("PidFunction", {"exit": True})
    assert crashed.error_type == "Runtime.ExitError"
    assert "exit status 3" in (crashed.error_message or "")
    victim = runtime.invoke("PidFunction", {}).value["pid"]
    for pid in runtime.function("PidFunction").pids():
        os.kill(pid, signal.SIGKILL)  # every idle sandbox dies behind the runtime's back
    time.sleep(0.3)  # (the kernel delivers SIGKILL asynchronously)
    fresh = runtime.invoke("PidFunction", {})  # a dead idle sandbox is dropped, a new one starts
    assert fresh.ok and fresh.value["pid"] != victim


def test_payload_over_the_synchronous_limit_is_refused_before_any_sandbox(runtime: LambdaRuntime) -> None:
    invocation = runtime.invoke("PidFunction", {"blob": "x" * LAMBDA_SYNC_PAYLOAD_LIMIT})
    assert invocation.error_type == "RequestEntityTooLargeException"


def test_report_line_has_init_duration_only_on_a_cold_start(
    runtime: LambdaRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    function = runtime.function("PidFunction")
    function.close()  # no warm sandbox left: the next invocation is a cold start
    function._closed = False
    with caplog.at_level(logging.DEBUG, logger="local_stack.lambda"):
        cold = runtime.invoke("PidFunction", {})
        warm = runtime.invoke("PidFunction", {})
    reports = [r.getMessage() for r in caplog.records if r.getMessage().startswith("REPORT")]
    assert len(reports) == 2
    assert reports[0].startswith(f"REPORT RequestId: {cold.request_id}\tDuration: ")
    assert "\tBilled Duration: " in reports[0] and "\tMemory Size: 256 MB\tMax Memory Used: " in reports[0]
    assert "\tInit Duration: " in reports[0]
    assert reports[1].startswith(f"REPORT RequestId: {warm.request_id}\t")
    assert "Init Duration" not in reports[1]
    messages = [r.getMessage() for r in caplog.records]
    assert messages.index(f"START RequestId: {cold.request_id} Version: $LATEST") > 0  # after INIT_START
    assert messages[0].startswith("INIT_START")
    assert f"END RequestId: {warm.request_id}" in messages


def test_sqs_records_of_a_timed_out_batch_come_back_after_the_visibility_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = list(sys.path)
    template = write_tiny_project(tmp_path)
    text = template.read_text(encoding="utf-8")
    text = text.replace("VisibilityTimeout: 600", "VisibilityTimeout: 5").replace(
        "maxReceiveCount: 3", "maxReceiveCount: 50"
    )
    text = text.replace("Handler: run_task_handler.handler", "Handler: run_task_handler.handler\n      Timeout: 1")
    template.write_text(text, encoding="utf-8")
    (tmp_path / "functions/run_task/run_task_handler.py").write_text(
        "import time\n\ndef handler(event, context):\n    time.sleep(3)\n", encoding="utf-8"
    )
    monkeypatch.setenv("TINY_TICK_BODIES", json.dumps(["a", "b"]))
    try:
        with start_local_stack(template_path=template, dynamodb_local=False, consumer_concurrency=1) as stack:
            first = stack.tick()["runTask"]
            # every batch timed out, so nothing was deleted; a slow cold start may let a record come back within
            # the same drain (each timed-out sandbox is replaced), so count receptions, not batches
            assert first["deleted"] == 0 and first["received"] == first["failed"] >= 2
            assert {error["error"]["type"] for error in first["errors"]} == {"Sandbox.Timedout"}
            receptions = first["received"] // 2
            drained = time.monotonic()
            sqs = stack.client("sqs")
            back: list[dict[str, Any]] = []
            while len(back) < 2 and time.monotonic() < drained + 60:  # after the visibility timeout (5 s)
                back += sqs.receive_message(
                    QueueUrl=stack.queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
                ).get("Messages", [])
                time.sleep(0.5)
            assert sorted(m["Body"] for m in back) == ["a", "b"]
            assert {m["Attributes"]["ApproximateReceiveCount"] for m in back} == {str(receptions + 1)}
    finally:
        sys.path[:] = saved


def test_stats_route_counts_cold_starts_per_function(tmp_path: Path) -> None:
    saved = list(sys.path)
    try:
        with start_local_stack(template_path=write_tiny_project(tmp_path), dynamodb_local=False) as stack:
            import urllib.request

            for _ in range(3):
                urllib.request.urlopen(stack.base_url + "/plain", timeout=30).read()
            with urllib.request.urlopen(stack.base_url + "/_local/stats", timeout=30) as reply:
                stats = json.loads(reply.read())
    finally:
        sys.path[:] = saved
    assert stats["sandboxes"] == "process"
    misc = stats["functions"]["MiscFunction"]
    assert (misc["invocations"], misc["coldStarts"]) == (3, 1)
    assert misc["initMsAvg"] > 0
    assert misc["sandboxes"]["live"] == 1


def test_the_sandbox_killer_kills_only_a_busy_sandbox_and_its_invocation_ends_with_exit_error(
    runtime: LambdaRuntime,
) -> None:
    from amsg_local.sandbox_kills import SandboxKiller

    function = runtime.function("PidFunction")
    runtime.invoke("PidFunction", {})  # a warm, idle sandbox
    killer = SandboxKiller(function, seed=1)
    assert function.busy_pids() == [] and killer.kill_one() is None
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(runtime.invoke, "PidFunction", {"nap": 3})
        deadline = time.monotonic() + 5
        while not function.busy_pids() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # the event is in the sandbox's hands
        [busy] = function.busy_pids()
        assert killer.kill_one() == busy and killer.kills == 1
        killed = running.result()
    assert killed.error_type == "Runtime.ExitError" and "signal: killed" in (killed.error_message or "")
    assert runtime.invoke("PidFunction", {}).ok  # replaced by the next invocation
