"""``amsg run-task <uuid>``: runTask from the command line, against the deployment the environment describes."""

from __future__ import annotations

import json
import uuid

from amsg_local.cli import main

from tests.conftest import base_env


def test_run_task_command_reports_the_reference_reasons(engine, monkeypatch, capsys, tmp_path):
    env = base_env(
        AMSG_VAPID_PUBLIC_KEY=engine.ctx.settings.vapid_public_key,
        AMSG_VAPID_PRIVATE_KEY=engine.ctx.secrets.vapid_private_key,
        AMSG_QUEUE_URL=engine.queue.url,
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["run-task", str(uuid.uuid4()), "--env-file", str(tmp_path / "none.env")]) == 1
    assert json.loads(capsys.readouterr().out) == {"ran": False, "reason": "not_found"}

    created = engine.api.schedule(
        {"contactName": "Rei", "messageType": "fixed", "userMessage": "cli", "firstSendTime": "2029-12-31T00:01:00Z"}
    ).data
    assert main(["run-task", created["uuid"], "--env-file", str(tmp_path / "none.env")]) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "not_due"

    monkeypatch.setenv("AMSG_VAPID_PRIVATE_KEY", "not-a-key")
    assert main(["run-task", created["uuid"], "--env-file", str(tmp_path / "none.env")]) == 1
    reply = json.loads(capsys.readouterr().out)
    assert (reply["ran"], reply["reason"]) == (False, "not_configured")
    assert reply["detail"].startswith("the VAPID keys are unusable")  # says what is wrong, never the key
    assert "not-a-key" not in reply["detail"]

    monkeypatch.delenv("AMSG_VAPID_PRIVATE_KEY")
    monkeypatch.delenv("AMSG_VAPID_EMAIL")
    assert main(["run-task", created["uuid"], "--env-file", str(tmp_path / "none.env")]) == 1
    assert json.loads(capsys.readouterr().out)["detail"] == (
        "missing AMSG_VAPID_EMAIL, AMSG_VAPID_PRIVATE_KEY (or AMSG_VAPID_PRIVATE_KEY_PARAM)"
    )
