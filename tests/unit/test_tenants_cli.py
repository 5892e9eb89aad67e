"""``amsg tenants`` against moto (DynamoDB and KMS): create, list, rotate, disable/enable, delete."""

from __future__ import annotations

import json
import time
import uuid

import boto3
import pytest
from amsg.tenancy import tokens
from amsg_local.cli import main
from moto import mock_aws

from tests.conftest import TABLE, parsed_template
from tests.support.tenancy import SIGNING_KEY, multi_env


@pytest.fixture
def deployment(monkeypatch, tmp_path):
    from amsg_local.tables import create_tables_from_template

    with mock_aws():
        create_tables_from_template(boto3.client("dynamodb", region_name="us-east-1"), parsed_template(), TABLE)
        key = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["Arn"]
        for name, value in {"AMSG_TABLE_NAME": TABLE, **multi_env(key)}.items():
            monkeypatch.setenv(name, value)
        env_file = tmp_path / ".env"
        env_file.write_text("")
        yield env_file


def _run(capsys, env_file, *argv: str) -> tuple[int, object]:
    code = main(["tenants", "--env-file", str(env_file), *argv])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def test_the_lifecycle_from_the_command_line(deployment, capsys):
    tenant_id = str(uuid.uuid4())
    code, created = _run(capsys, deployment, "create", "--tenant-id", tenant_id)
    assert code == 0 and created["tenantId"] == tenant_id
    claims = tokens.verify(SIGNING_KEY, created["tenantToken"], int(time.time()), frozenset({tokens.TENANT}))
    assert claims.tenant_id == tenant_id

    code, listed = _run(capsys, deployment, "list")
    assert code == 0 and [(row["tenantId"], row["status"], row["tokenGeneration"]) for row in listed] == [
        (tenant_id, "active", 1)
    ]
    assert "wrapped" not in json.dumps(listed)

    code, rotated = _run(capsys, deployment, "rotate-tokens", tenant_id)
    assert code == 0 and rotated["tenantToken"] != created["tenantToken"]
    code, row = _run(capsys, deployment, "disable", tenant_id)
    assert code == 0 and row["status"] == "disabled" and row["tokenGeneration"] == 2
    code, row = _run(capsys, deployment, "enable", tenant_id)
    assert code == 0 and row["status"] == "active"

    code, usage = _run(capsys, deployment, "usage")
    assert code == 0 and usage == [{"tenantId": tenant_id, "status": "active", "pendingTasks": 0, "settledTasks": 0}]
    code, row = _run(capsys, deployment, "set-rate-limit", tenant_id, "5")
    assert code == 0 and row["rateLimitRps"] == 5
    code, row = _run(capsys, deployment, "set-rate-limit", tenant_id, "default")
    assert code == 0 and row["rateLimitRps"] is None

    code, row = _run(capsys, deployment, "delete", tenant_id)
    assert row["status"] == "deleting"
    assert _run(capsys, deployment, "list")[1][0]["status"] == "deleting"


def test_errors_are_reported_with_an_exit_code(deployment, capsys):
    assert main(["tenants", "--env-file", str(deployment), "rotate-tokens", str(uuid.uuid4())]) == 1
    assert "no tenant" in capsys.readouterr().err
    assert main(["tenants", "--env-file", str(deployment), "create", "--tenant-id", "nope"]) == 2
    tenant_id = str(uuid.uuid4())
    assert main(["tenants", "--env-file", str(deployment), "create", "--tenant-id", tenant_id]) == 0
    assert main(["tenants", "--env-file", str(deployment), "create", "--tenant-id", tenant_id]) == 1
    assert "exists already" in capsys.readouterr().err


def test_a_single_mode_deployment_has_no_tenants(deployment, capsys, monkeypatch):
    monkeypatch.setenv("AMSG_TENANCY", "single")
    assert main(["tenants", "--env-file", str(deployment), "list"]) == 2
    assert "multi-tenant line is off" in capsys.readouterr().err
