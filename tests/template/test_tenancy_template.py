"""The multi-tenant line in template.yaml (docs/tenancy.md): the Tenancy switch, the KMS key and least privilege.

``functions/permissions.toml`` lists, under ``tenant``, the multi-tenant policies each function gets; the template
must attach exactly those, each only with ``Tenancy=multi``; only init-tenant may encrypt with the key, and only
the functions that need a tenant's master key may decrypt with it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.template import functions, project_template
from tests.template.test_iam import load_permissions

TENANT_POLICIES = {
    "TenantAuthPolicy",
    "TenantInitPolicy",
    "TenantDirectoryPolicy",
    "TenantCronPolicy",
    "TenantSweepPolicy",
    "TenantPendingCountPolicy",
}


def _attached(tpl: dict[str, Any], function: str) -> list[Any]:
    props = tpl["Resources"][function]["Properties"]
    if "Role" in props:
        return list(tpl["Resources"][props["Role"]["Fn::GetAtt"][0]]["Properties"].get("ManagedPolicyArns") or [])
    return [p for p in props.get("Policies") or [] if not (isinstance(p, dict) and "Statement" in p)]


def _tenant_policies(tpl: dict[str, Any], function: str) -> set[str]:
    found = set()
    for ref in _attached(tpl, function):
        if isinstance(ref, dict) and "Fn::If" in ref:
            cond, yes, no = ref["Fn::If"]
            if isinstance(yes, dict) and yes.get("Ref") in TENANT_POLICIES:
                assert cond == "MultiTenant" and no == {"Ref": "AWS::NoValue"}, (function, ref)
                found.add(yes["Ref"])
        elif isinstance(ref, dict):
            assert ref.get("Ref") not in TENANT_POLICIES, f"{function} attaches {ref} in single mode too"
    return found


def _actions(tpl: dict[str, Any], policy: str) -> set[str]:
    statements = tpl["Resources"][policy]["Properties"]["PolicyDocument"]["Statement"]
    out: set[str] = set()
    for statement in statements:
        actions = statement["Action"]
        out |= set(actions if isinstance(actions, list) else [actions])
    return out


def test_the_switch_defaults_to_single_and_reaches_every_function():
    tpl = project_template()
    parameter = tpl["Parameters"]["Tenancy"]
    assert parameter["Default"] == "single" and parameter["AllowedValues"] == ["single", "multi"]
    assert tpl["Conditions"]["MultiTenant"] == {"Fn::Equals": [{"Ref": "Tenancy"}, "multi"]}
    env = tpl["Globals"]["Function"]["Environment"]["Variables"]
    assert env["AMSG_TENANCY"] == {"Ref": "Tenancy"}
    for name in ("AMSG_KMS_KEY_ID", "AMSG_TENANT_TOKEN_SIGNING_KEY_PARAM", "AMSG_INIT_SECRET_PARAM"):
        assert env[name]["Fn::If"][0] == "MultiTenant" and env[name]["Fn::If"][2] == "", name


def test_the_kms_key_exists_only_in_multi_mode_with_rotation_and_an_account_admin_policy():
    tpl = project_template()
    key = tpl["Resources"]["TenantKey"]
    assert key["Type"] == "AWS::KMS::Key" and key["Condition"] == "MultiTenant"
    assert key["DeletionPolicy"] == "Retain"
    props = key["Properties"]
    assert props["EnableKeyRotation"] is True
    (statement,) = props["KeyPolicy"]["Statement"]
    assert statement["Principal"]["AWS"] == {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:root"}
    for policy in TENANT_POLICIES:
        assert tpl["Resources"][policy]["Condition"] == "MultiTenant", policy


@pytest.mark.parametrize("function", sorted(load_permissions()))
def test_each_function_gets_exactly_its_tenant_policies(function):
    tpl = project_template()
    expected = set(load_permissions()[function].get("tenant", []))
    assert _tenant_policies(tpl, function) == expected


def test_the_table_names_every_template_function():
    assert set(load_permissions()) == set(functions(project_template()))


def test_only_init_tenant_encrypts_and_only_key_users_decrypt():
    tpl = project_template()
    kms = {policy: {a for a in _actions(tpl, policy) if a.startswith("kms:")} for policy in TENANT_POLICIES}
    assert kms == {
        "TenantAuthPolicy": {"kms:Decrypt"},
        "TenantDirectoryPolicy": {"kms:Decrypt"},
        "TenantInitPolicy": {"kms:Encrypt"},
        "TenantCronPolicy": set(),
        "TenantSweepPolicy": set(),
        "TenantPendingCountPolicy": set(),
    }
    encrypting = {f for f, entry in load_permissions().items() if "TenantInitPolicy" in entry.get("tenant", [])}
    assert encrypting == {"InitTenantFunction"}
    assert "tenant" not in load_permissions()["NotFoundFunction"]


def test_registry_access_is_confined_to_the_registry_partition_and_counter_writes_to_counters():
    tpl = project_template()
    counters = {"TenantAuthPolicy": "N#*#RATE", "TenantPendingCountPolicy": "N#*#PENDING"}
    for policy in ("TenantAuthPolicy", "TenantDirectoryPolicy", "TenantInitPolicy", "TenantPendingCountPolicy"):
        for statement in tpl["Resources"][policy]["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if actions == ["dynamodb:UpdateItem"]:
                pattern = counters[policy]
                assert statement["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [pattern]}}
            elif any(a.startswith("dynamodb:") for a in actions):
                assert statement["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["TENANTS"]}}
