"""What the template grants a function, read from its policy statements (the IAM tests compare it with
``functions/permissions.toml`` and with the calls a journey records)."""

from __future__ import annotations

from typing import Any

SECRET_PARAMETERS = {  # template parameter that names the SSM parameter -> secret
    "MasterKeyParameterName": "master_key",
    "VapidPrivateKeyParameterName": "vapid_private_key",
    "ClientTokenParameterName": "client_token",
}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _unless_no_value(value: Any, conditions: set[str]) -> Any:
    """``!If [Cond, x, !Ref AWS::NoValue]`` → x (recording Cond); anything else as is."""
    if isinstance(value, dict) and "Fn::If" in value:
        cond, yes, no = value["Fn::If"]
        assert no == {"Ref": "AWS::NoValue"}, f"unexpected Fn::If {value}"
        conditions.add(cond)
        return yes
    return value


def _resource(value: Any) -> str:
    """A statement's resource as a name in the permissions table ("table", "index/due", "master_key", "queue")."""
    if value == {"Fn::GetAtt": ["Table", "Arn"]}:
        return "table"
    if value == {"Fn::GetAtt": ["TaskQueue", "Arn"]}:
        return "queue"
    if value == {"Fn::GetAtt": ["ClaimQueue", "Arn"]}:
        return "claim_queue"
    if isinstance(value, dict) and isinstance(value.get("Fn::Sub"), str):
        text = value["Fn::Sub"]
        if text.startswith("${Table.Arn}/index/"):
            return "index/" + text.removeprefix("${Table.Arn}/index/")
        prefix = "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${"
        if text.startswith(prefix) and text.endswith("}"):
            return SECRET_PARAMETERS[text.removeprefix(prefix)[:-1]]
    if isinstance(value, dict) and isinstance(value.get("Fn::Sub"), list):
        # a secret whose name is the parameter, or the stack's own name when the parameter is empty
        text, variables = value["Fn::Sub"]
        name = variables.get("Name") if text.endswith(":parameter${Name}") else None
        if isinstance(name, dict) and "Fn::If" in name:
            given = name["Fn::If"][1]
            if isinstance(given, dict) and given.get("Ref") in SECRET_PARAMETERS:
                return SECRET_PARAMETERS[given["Ref"]]
    return f"<unrecognised resource {value!r}>"


def _statement_permissions(statement: dict[str, Any], conditions: set[str]) -> set[str]:
    assert statement.get("Effect") == "Allow" and "Condition" not in statement, statement
    assert "NotAction" not in statement and "NotResource" not in statement, statement
    out = set()
    for action in _as_list(statement["Action"]):
        for resource in _as_list(statement["Resource"]):
            out.add(f"{action} {_resource(_unless_no_value(resource, conditions))}")
    return out


def _managed_policy(tpl: dict[str, Any], ref: Any) -> dict[str, Any]:
    name = ref["Ref"] if isinstance(ref, dict) and set(ref) == {"Ref"} else None
    res = tpl["Resources"].get(name or "")
    assert res and res["Type"] == "AWS::IAM::ManagedPolicy", f"not an in-template managed policy: {ref!r}"
    return res


def granted(tpl: dict[str, Any], function: str) -> tuple[set[str], set[str]]:
    """What the template lets one function do, and the conditions those grants depend on."""
    props = tpl["Resources"][function]["Properties"]
    conditions: set[str] = set()
    docs: list[dict[str, Any]] = []
    attached: list[Any] = []
    if "Role" in props:
        assert "Policies" not in props, function
        role = tpl["Resources"][props["Role"]["Fn::GetAtt"][0]]
        assert role["Type"] == "AWS::IAM::Role"
        attached = list(role["Properties"].get("ManagedPolicyArns") or [])
        docs = [p["PolicyDocument"] for p in role["Properties"].get("Policies") or []]
    else:
        for policy in _as_list(props.get("Policies") or []):
            policy = _unless_no_value(policy, conditions)  # an inline document of the single line only
            if isinstance(policy, dict) and "Statement" in policy:
                docs.append(policy)
            else:
                attached.append(policy)
    for ref in attached:
        ref = _unless_no_value(ref, conditions)
        if isinstance(ref, dict) and "Fn::Sub" in ref and ref["Fn::Sub"].endswith(":policy/AWSXrayWriteOnlyAccess"):
            continue  # tracing (only with Tracing=Active, checked below)
        policy = _managed_policy(tpl, ref)
        if policy.get("Condition") == "MultiTenant":
            continue  # the multi-tenant line's policies (tests/template/test_tenancy_template.py)
        if "Condition" in policy:
            conditions.add(policy["Condition"])
        docs.append(policy["Properties"]["PolicyDocument"])
    perms: set[str] = set()
    for doc in docs:
        for statement in _as_list(doc["Statement"]):
            perms |= _statement_permissions(statement, conditions)
    return perms, conditions
