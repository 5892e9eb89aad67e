"""``amsg tenants`` against moto (DynamoDB and KMS): create, list, rotate, disable/enable, delete."""

from __future__ import annotations

import json
import os
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


def test_an_upper_case_id_finds_the_tenant_init_tenant_stored_lower_cased(deployment, capsys):
    tenant_id = str(uuid.uuid4())
    assert _run(capsys, deployment, "create", "--tenant-id", tenant_id.upper())[1]["tenantId"] == tenant_id
    shouted = tenant_id.upper()
    code, rotated = _run(capsys, deployment, "rotate-tokens", shouted)
    assert code == 0 and rotated["tenantId"] == tenant_id
    assert _run(capsys, deployment, "disable", shouted)[1]["status"] == "disabled"
    assert _run(capsys, deployment, "enable", f" {shouted} ")[1]["status"] == "active"
    assert _run(capsys, deployment, "set-rate-limit", shouted, "7")[1]["rateLimitRps"] == 7
    assert _run(capsys, deployment, "usage", shouted)[1][0]["tenantId"] == tenant_id
    code, row = _run(capsys, deployment, "delete", shouted)
    assert code == 0 and (row["tenantId"], row["status"]) == (tenant_id, "deleting")


def test_a_moved_in_tenant_keeps_the_reference_spelling_of_its_id(deployment, capsys):
    """An id the reference wrote in upper case (its tokens carry it) is found as typed, not lower-cased."""
    from amsg import runtime
    from amsg.tenancy import lifecycle

    shouted = str(uuid.uuid4()).upper()
    lifecycle.create(runtime.build_context(dict(os.environ)), shouted, tokens_not_before_s=0)
    code, row = _run(capsys, deployment, "disable", shouted)
    assert code == 0 and row["tenantId"] == shouted
    assert main(["tenants", "--env-file", str(deployment), "disable", shouted.lower()]) == 1
    assert "no tenant" in capsys.readouterr().err


def test_rotate_tokens_never_prints_an_empty_webhook_url(deployment, capsys, monkeypatch):
    """Without AMSG_PUBLIC_BASE_URL the URL comes from the stack's ApiUrl output; when that cannot be read
    either, the field is left out and stderr says how to set it."""
    monkeypatch.delenv("AMSG_PUBLIC_BASE_URL")
    tenant_id = str(uuid.uuid4())
    code, created = _run(capsys, deployment, "create", "--tenant-id", tenant_id)  # no stack named amsg
    assert code == 0 and "cronWebhookUrl" not in created and created["cronToken"]
    main(["tenants", "--env-file", str(deployment), "rotate-tokens", tenant_id])
    printed = capsys.readouterr()
    assert '"cronWebhookUrl"' not in printed.out and "AMSG_PUBLIC_BASE_URL" in printed.err

    api_url = "https://abc123.execute-api.us-east-1.amazonaws.com"
    template = {
        "Resources": {"Q": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"ApiUrl": {"Value": api_url}},
    }
    boto3.client("cloudformation", region_name="us-east-1").create_stack(
        StackName="amsg-prod", TemplateBody=json.dumps(template)
    )
    code, rotated = _run(capsys, deployment, "--stack", "amsg-prod", "rotate-tokens", tenant_id)
    assert rotated["cronWebhookUrl"] == f"{api_url}/api/v1/send-notifications?token={rotated['cronToken']}"

    monkeypatch.setenv("AMSG_PUBLIC_BASE_URL", "https://push.example.com/")
    code, rotated = _run(capsys, deployment, "--stack", "amsg-prod", "rotate-tokens", tenant_id)
    assert rotated["cronWebhookUrl"].startswith("https://push.example.com/api/v1/send-notifications?token=")


def test_locally_the_base_url_is_not_looked_up_in_cloudformation(monkeypatch):
    """With a local DynamoDB endpoint there is no CloudFormation: nothing is asked, the hint explains."""
    from amsg_local import public_base_url

    def refuse(*_args, **_kw):
        raise AssertionError("CloudFormation asked for a local stack")

    monkeypatch.setattr(public_base_url, "stack_api_url", refuse)
    local = {"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000"}
    assert public_base_url.with_public_base_url(local, "amsg") == local
    given = {"AMSG_PUBLIC_BASE_URL": "https://x.example"}
    assert public_base_url.with_public_base_url(given, "amsg") == given
    assert "locally the base URL `amsg local` prints" in public_base_url.HOW_TO_SET
