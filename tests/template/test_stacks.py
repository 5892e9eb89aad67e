"""A stack that survives its second deployment (docs/operations.md): two stacks in one account and region share
no physical name, the table resists deletion, the Scheduler's role trusts only this stack's schedules, the
access log says why an integration failed, and SnapStart is one parameter whose versions and alias are what
every event source invokes.

The physical-name test resolves the raw template with two stack names; the wiring test reads the template as
SAM expands it (scripts/expand_template.py, run with the tools venv that ``make tools`` installs).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from functools import cache
from typing import Any

import pytest
from amsg_local import template as cfn

from tests.support.template import REPO_ROOT, project_template, ref_target, resources_of_type

STACKS = ("amsg", "amsg-staging")

# every resource type the template declares -> the properties that name it account/region-wide (a type with
# no such property has an empty tuple: a new type must be classified here before the test passes)
NAME_PROPERTIES: dict[str, tuple[str, ...]] = {
    "AWS::Serverless::Function": ("FunctionName",),
    "AWS::Serverless::LayerVersion": ("LayerName",),
    "AWS::Serverless::HttpApi": (),  # API names need not be unique; the id is generated
    "AWS::Logs::LogGroup": ("LogGroupName",),
    "AWS::SQS::Queue": ("QueueName",),
    "AWS::DynamoDB::Table": ("TableName",),
    "AWS::IAM::Role": ("RoleName",),
    "AWS::IAM::ManagedPolicy": ("ManagedPolicyName",),
    "AWS::CloudWatch::Alarm": ("AlarmName",),
    "AWS::CloudWatch::Dashboard": ("DashboardName",),
    "AWS::Scheduler::ScheduleGroup": ("Name",),
    "AWS::Scheduler::Schedule": ("Name",),
    "AWS::SSM::Parameter": ("Name",),
    "AWS::SNS::Topic": ("TopicName",),
    "AWS::KMS::Key": (),  # no name; an alias would be one
}
# account-wide names a stack uses without creating them: the SSM secrets it reads, and the service dimension
# of its custom metrics (the namespace is shared; the dashboard and DeliveryLatencyAlarm read this dimension)
ACCOUNT_WIDE_VARIABLES = ("AMSG_MASTER_KEY_PARAM", "AMSG_VAPID_PRIVATE_KEY_PARAM", "POWERTOOLS_SERVICE_NAME")


@pytest.fixture(scope="module")
def tpl() -> dict[str, Any]:
    return project_template()


def resolve_in_stack(value: Any, template: dict[str, Any], stack: str, parameters: dict[str, Any] | None = None) -> Any:
    """``value`` with its intrinsics evaluated as CloudFormation would in a stack called ``stack``."""
    scope = cfn._scope(template, parameters)
    scope.stack_name = stack
    return cfn._resolve(value, scope)


def physical_names(template: dict[str, Any], stack: str) -> dict[str, str]:
    """Every account/region-unique name the stack would take: ``"<type> <logical id>" -> name``."""
    names: dict[str, str] = {}
    for logical_id, res in template["Resources"].items():
        kind = res["Type"]
        assert kind in NAME_PROPERTIES, f"{kind} ({logical_id}): classify its name property in NAME_PROPERTIES"
        props = res.get("Properties") or {}
        for key in NAME_PROPERTIES[kind]:
            if key in props:
                names[f"{kind} {logical_id}"] = str(resolve_in_stack(props[key], template, stack))
        for event_id, event in (props.get("Events") or {}).items() if kind == "AWS::Serverless::Function" else ():
            names.update(_event_names(template, stack, logical_id, event_id, event))
    env = resolve_in_stack(template["Globals"]["Function"]["Environment"]["Variables"], template, stack)
    names.update({f"env {variable}": env[variable] for variable in ACCOUNT_WIDE_VARIABLES})
    return names


def _event_names(template: dict[str, Any], stack: str, function: str, event_id: str, event: dict) -> dict[str, str]:
    """Names SAM gives the resources it generates for an event: a schedule is named after the event's logical id
    unless OmitName is set (ScheduleV2), an EventBridge rule takes ``Name`` when given."""
    props = event.get("Properties") or {}
    if event["Type"] == "ScheduleV2" and not props.get("OmitName"):
        name = props.get("Name", f"{function}{event_id}")
        return {f"AWS::Scheduler::Schedule {function}{event_id}": str(resolve_in_stack(name, template, stack))}
    if event["Type"] in ("Schedule", "EventBridgeRule") and "Name" in props:
        return {f"AWS::Events::Rule {function}{event_id}": str(resolve_in_stack(props["Name"], template, stack))}
    return {}


def test_two_stacks_in_one_account_share_no_physical_name(tpl):
    first, second = (physical_names(tpl, stack) for stack in STACKS)
    assert first.keys() == second.keys()
    assert "env AMSG_MASTER_KEY_PARAM" in first  # the secrets are part of what must not collide
    collisions = {key: first[key] for key in first if first[key] == second[key]}
    assert collisions == {}, f"the same name in two stacks: {collisions}"
    assert len(set(first.values())) == len(first), "two resources of one stack share a name"


def test_secret_names_are_the_stacks_own_unless_given(tpl):
    env = resolve_in_stack(tpl["Globals"]["Function"]["Environment"]["Variables"], tpl, "amsg-staging")
    assert env["AMSG_MASTER_KEY_PARAM"] == "/amsg/amsg-staging/master-key"
    assert env["AMSG_VAPID_PRIVATE_KEY_PARAM"] == "/amsg/amsg-staging/vapid-private-key"
    given = {"MasterKeyParameterName": "/amsg/master-key", "VapidPrivateKeyParameterName": "/amsg/vapid-private-key"}
    env = resolve_in_stack(tpl["Globals"]["Function"]["Environment"]["Variables"], tpl, "amsg-staging", given)
    assert env["AMSG_MASTER_KEY_PARAM"] == "/amsg/master-key"  # an existing stack keeps its secrets
    assert env["AMSG_VAPID_PRIVATE_KEY_PARAM"] == "/amsg/vapid-private-key"


def test_the_tick_schedule_has_no_fixed_name(tpl):
    (event,) = [
        e["Properties"]
        for e in tpl["Resources"]["TickFunction"]["Properties"]["Events"].values()
        if e["Type"] == "ScheduleV2"
    ]
    assert event["OmitName"] is True and "Name" not in event
    group = tpl["Resources"][ref_target(event["GroupName"])]
    assert group["Type"] == "AWS::Scheduler::ScheduleGroup" and "Name" not in (group.get("Properties") or {})


def test_a_second_stack_is_what_the_operations_page_deploys():
    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    assert "STACK=amsg-staging" in text
    assert "/amsg/<stack>/master-key" in text or "/amsg/<stack name>/master-key" in text


# ------------------------------------------------------------------------------------------- table, IAM, logs


def test_the_table_has_deletion_protection_on_by_default(tpl):
    table = tpl["Resources"]["Table"]
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Retain"
    props = table["Properties"]
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert resolve_in_stack(props["DeletionProtectionEnabled"], tpl, "amsg") is True
    off = {"TableDeletionProtection": "false"}
    assert resolve_in_stack(props["DeletionProtectionEnabled"], tpl, "amsg", off) is False
    assert tpl["Parameters"]["TableDeletionProtection"]["Default"] == "true"


def test_the_scheduler_role_trusts_only_this_accounts_schedule_group(tpl):
    (event,) = [
        e["Properties"]
        for e in tpl["Resources"]["TickFunction"]["Properties"]["Events"].values()
        if e["Type"] == "ScheduleV2"
    ]
    role = tpl["Resources"][ref_target(event["RoleArn"])]
    assert role["Type"] == "AWS::IAM::Role"
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"} and trust["Action"] == "sts:AssumeRole"
    assert trust["Condition"]["StringEquals"]["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}
    assert trust["Condition"]["ArnEquals"]["aws:SourceArn"] == {"Fn::GetAtt": [ref_target(event["GroupName"]), "Arn"]}
    statements = [s for p in role["Properties"]["Policies"] for s in p["PolicyDocument"]["Statement"]]
    granted = {(s["Action"], json.dumps(r, sort_keys=True)) for s in statements for r in _list(s["Resource"])}
    assert ("lambda:InvokeFunction", json.dumps({"Fn::Sub": "${TickFunction.Arn}:*"})) in granted  # the alias
    dlq = {"Fn::GetAtt": [ref_target(event["DeadLetterConfig"]["Arn"]), "Arn"]}
    assert ("sqs:SendMessage", json.dumps(dlq, sort_keys=True)) in granted
    assert {action for action, _ in granted} == {"lambda:InvokeFunction", "sqs:SendMessage"}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_the_access_log_says_why_an_integration_failed(tpl):
    (api,) = resources_of_type(tpl, "AWS::Serverless::HttpApi").values()
    fields = json.loads(api["Properties"]["AccessLogSettings"]["Format"])
    assert fields["status"] == "$context.status" and fields["requestId"] == "$context.requestId"
    assert fields["integrationStatus"] == "$context.integration.status"
    assert fields["integrationError"] == "$context.integration.error"
    assert fields["integrationErrorMessage"] == "$context.integrationErrorMessage"
    assert fields["error"] == "$context.error.message" and fields["errorType"] == "$context.error.responseType"


# ------------------------------------------------------------------------------------------------- SnapStart


def test_snapstart_is_one_parameter_off_by_default(tpl):
    param = tpl["Parameters"]["SnapStart"]
    assert param["Default"] == "None" and set(param["AllowedValues"]) == {"None", "PublishedVersions"}
    glob = tpl["Globals"]["Function"]
    assert glob["SnapStart"] == {"ApplyOn": {"Ref": "SnapStart"}}
    assert glob["AutoPublishAlias"] == "live"  # SAM cannot make the alias conditional: it is always published
    for name, res in resources_of_type(tpl, "AWS::Serverless::Function").items():
        props = res["Properties"]
        assert "SnapStart" not in props and "AutoPublishAlias" not in props, f"{name} overrides the global"


TOOLS_PYTHON = REPO_ROOT / ".venv-tools" / "bin" / "python"


@cache
def _expanded() -> dict[str, Any]:
    result = subprocess.run(
        [str(TOOLS_PYTHON), str(REPO_ROOT / "scripts" / "expand_template.py"), str(REPO_ROOT / "template.yaml")],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "AWS_DEFAULT_REGION": "us-east-1"},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def expanded() -> dict[str, Any]:
    if not TOOLS_PYTHON.exists():
        pytest.skip("needs the tools venv with the SAM translator (make tools)")
    return _expanded()


def _aliases(expanded: dict[str, Any]) -> dict[str, str]:
    """alias logical id -> function logical id"""
    return {
        name: ref_target(res["Properties"]["FunctionName"])
        for name, res in expanded["Resources"].items()
        if res["Type"] == "AWS::Lambda::Alias"
    }


@pytest.mark.slow  # a subprocess
def test_every_function_publishes_a_snapstart_version_behind_its_alias(expanded):
    resources = expanded["Resources"]
    functions = {n for n, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    aliases = _aliases(expanded)
    assert sorted(aliases.values()) == sorted(functions)
    for alias, function in aliases.items():
        props = resources[alias]["Properties"]
        assert props["Name"] == "live"
        version = resources[ref_target({"Fn::GetAtt": props["FunctionVersion"]["Fn::GetAtt"]})]
        assert version["Type"] == "AWS::Lambda::Version"
        assert resources[function]["Properties"]["SnapStart"] == {"ApplyOn": {"Ref": "SnapStart"}}


@pytest.mark.slow  # a subprocess
def test_api_queue_and_schedule_invoke_the_alias(expanded):
    resources = expanded["Resources"]
    aliases = _aliases(expanded)
    body = next(r for r in resources.values() if r["Type"] == "AWS::ApiGatewayV2::Api")["Properties"]["Body"]
    uris = [
        op["x-amazon-apigateway-integration"]["uri"]["Fn::Sub"]
        for path in body["paths"].values()
        for op in path.values()
        if isinstance(op, dict) and "x-amazon-apigateway-integration" in op
    ]
    assert len(uris) >= 30
    for uri in uris:
        (target,) = re.findall(r"/functions/\$\{([^}]+)\}/invocations", uri)
        assert target in aliases, uri
    mappings = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert mappings and all(ref_target(m["FunctionName"]) in aliases for m in mappings)
    schedules = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Scheduler::Schedule"]
    assert schedules and all(ref_target(s["Target"]["Arn"]) in aliases for s in schedules)
    assert all("Name" not in s for s in schedules)
    permissions = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::Permission"]
    assert permissions and all(ref_target(p["FunctionName"]) in aliases for p in permissions)
