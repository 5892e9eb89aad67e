"""``amsg status`` on a running multi-tenant local stack with due work, a delivered push, a dead letter and a
tenant deletion in progress: every figure is checked against what the test made happen."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from amsg.timeutil import iso_from_ms
from amsg_local.cli import LocalStack, main

from tests.support.e2e_stack import stack_with_push
from tests.support.tenants_stack import INIT_SECRET, SIGNING_KEY, v1
from tests.support.wire_client import WireClient, http_transport

pytestmark = pytest.mark.e2e

MINUTE = 60_000


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[LocalStack, Any]]:
    config = {"AMSG_TENANCY": "multi", "AMSG_TENANT_TOKEN_SIGNING_KEY": SIGNING_KEY, "AMSG_INIT_SECRET": INIT_SECRET}
    with stack_with_push("a" * 64, **config) as (stack, push):
        yield stack, push  # type: ignore[misc]


def new_tenant(stack: LocalStack) -> dict[str, Any]:
    client = WireClient(v1(http_transport(stack.base_url)), user_id="-")
    headers = {"Content-Type": "application/json", "X-Init-Secret": INIT_SECRET}
    created = client.request("POST", "/init-tenant", headers=headers, body="{}", user=False)
    assert created.status == 201, created.text
    return created.data


def subscribed_user(stack: LocalStack, push: Any, token: str) -> WireClient:
    transport = v1(http_transport(stack.base_url))
    user = WireClient(transport, str(uuid.uuid4()), extra_headers={"Authorization": f"Bearer {token}"})
    user.init()
    assert user.put_subscription(push.subscribe().to_json()).status == 200
    return user


def schedule_at(user: WireClient, at_ms: int) -> None:
    created = user.schedule(
        {"contactName": "Rei", "messageType": "fixed", "userMessage": "hi", "firstSendTime": iso_from_ms(at_ms)}
    )
    assert created.status == 201, created.text


def operator_env(stack: LocalStack, tmp_path: Path) -> str:
    """An ``.env`` describing the stack to the operator's commands (``amsg tenants``): its table, endpoints, keys."""
    env = stack.function_environment()
    lines = [f"{k}={v}" for k, v in env.items() if k.startswith(("AMSG_", "AWS_")) and "\n" not in v]
    path = tmp_path / ".env"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["status", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_status_reports_tick_backlog_lateness_dlq_and_deletions(
    world: tuple[LocalStack, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stack, push = world
    busy, leaving = new_tenant(stack), new_tenant(stack)
    user = subscribed_user(stack, push, busy["tenantToken"])
    t0 = stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"]  # tenant tokens live for days: stay near now
    schedule_at(user, t0 + MINUTE)
    stack.post_local("/_local/clock", {"nowMs": t0 + 3 * MINUTE})  # two minutes late
    summary = stack.tick()
    assert summary["runTask"]["deleted"] == 1, summary
    for minute in (4, 5):  # due work no tick has seen: one and two minutes overdue at t0 + 6 min
        schedule_at(user, t0 + minute * MINUTE)
    stack.post_local("/_local/clock", {"nowMs": t0 + 6 * MINUTE})
    sqs = stack.client("sqs")
    assert stack.queue.dead_letter_url
    sqs.send_message(QueueUrl=stack.queue.dead_letter_url, MessageBody=json.dumps({"uuid": "a-dead-letter"}))
    assert main(["tenants", "--env-file", operator_env(stack, tmp_path), "delete", leaving["tenantId"]]) == 0

    code, out, err = status(capsys, "--stack-url", stack.base_url, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["stack"] == {"kind": "local", "name": stack.base_url, "table": stack.table_name}
    assert report["lastTick"]["summary"]["claimedTasks"] == 1
    assert report["lastTick"]["summary"]["runTaskRecords"] == 1
    assert report["dueBacklog"][busy["tenantId"]] == {"0": 2}
    assert report["dueTasks"] == 2
    assert 119 <= report["oldestDueAgeSeconds"] < 200
    assert report["deliveriesLastHour"] == 1
    assert 2 * MINUTE <= report["latenessP99Ms"] < 3 * MINUTE
    assert report["deadLetterMessages"] == 1
    assert report["cleanupOperations"] == 0
    assert [d["tenantId"] for d in report["tenantDeletions"]] == [leaving["tenantId"]]

    code, out, err = status(capsys, "--stack-url", stack.base_url)
    assert code == 0, err
    assert "due backlog       2 tasks across" in out
    assert f"{busy['tenantId']}  2 (shard 0: 2)" in out
    assert "dead letters      1" in out
    assert f"tenant deletions  1: {leaving['tenantId']}" in out
    assert "claimed 1" in out


def test_status_without_a_stack_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = status(capsys, "--stack-url", "http://127.0.0.1:9", "--json")
    assert code == 2 and out == ""
    assert "no local stack at http://127.0.0.1:9" in err and "make run" in err


def test_tenants_delete_waits_for_the_purge_quietly_in_a_pipe(
    world: tuple[LocalStack, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``amsg tenants delete --wait`` returns once the ticks removed the tenant's items and record; its stderr
    is not a terminal here, so it shows no progress line, and stdout holds only the outcome."""
    stack, push = world
    tenant = new_tenant(stack)
    user = subscribed_user(stack, push, tenant["tenantToken"])
    schedule_at(user, stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"] + 10 * MINUTE)
    capsys.readouterr()
    outcome: dict[str, int] = {}
    env_file = operator_env(stack, tmp_path)
    args = ["tenants", "--env-file", env_file, "delete", tenant["tenantId"], "--wait", "--timeout", "120"]
    waiting = threading.Thread(target=lambda: outcome.setdefault("code", main(args)))
    waiting.start()
    stack.post_local("/_local/clock", {"advanceMs": 16 * MINUTE})  # past the grace for running deliveries
    for _ in range(5):
        if not waiting.is_alive():
            break
        stack.tick()
        waiting.join(3)
    waiting.join(30)
    assert outcome == {"code": 0}
    out, err = capsys.readouterr()
    answer = json.loads(out)
    assert answer["tenantId"] == tenant["tenantId"] and answer["deletion"] == "finished"
    assert err == ""
    code, out, _ = status(capsys, "--stack-url", stack.base_url, "--json")
    assert code == 0 and tenant["tenantId"] not in json.dumps(json.loads(out)["tenantDeletions"])
