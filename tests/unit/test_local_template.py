"""template.yaml as the local stack reads it: routes, CORS, table, intrinsics."""

from __future__ import annotations

from pathlib import Path

import pytest
from amsg_local.template import (
    NO_VALUE,
    cors_config,
    function_spec,
    global_environment,
    http_routes,
    load_template,
    resolve,
    table_definition,
    table_ttl_attribute,
)


@pytest.fixture(scope="module")
def template():
    return load_template()


def test_every_route_at_root_and_v1_plus_default(template) -> None:
    routes = http_routes(template)
    keys = {route.route_key for route in routes}
    defaults = [route for route in routes if route.path == "$default"]
    assert len(defaults) == 1 and defaults[0].method == "ANY"
    for route in routes:
        if route.path == "$default":
            continue
        other = route.path.removeprefix("/api/v1") if route.path.startswith("/api/v1/") else "/api/v1" + route.path
        assert f"{route.method} {other}" in keys, route
        assert route.method in {"GET", "POST", "PUT", "DELETE"}
        assert route.handler.endswith(".handler")
        assert route.code_uri.is_relative_to(Path(template["__file__"]).parent / "functions")
    assert "POST /schedule-message" in keys and "GET /api/v1/client-state/namespaces" in keys


def test_cors_config(template) -> None:
    assert cors_config(template, None) is None
    assert cors_config(template, []) is None
    assert cors_config(template, "") is None
    cors = cors_config(template, "https://a.example, https://b.example")
    assert cors is not None
    assert cors.allow_origins == ("https://a.example", "https://b.example")
    assert cors.allow_methods == ("GET", "POST", "PUT", "DELETE", "OPTIONS")
    assert {"Content-Encoding", "Authorization", "X-Client-Token", "X-User-Id"} <= set(cors.allow_headers)
    assert cors.max_age == 86400
    assert cors.allow_credentials is False and cors.expose_headers == ()
    assert cors.match_origin("https://a.example") == "https://a.example"
    assert cors.match_origin("https://c.example") is None


def test_table_definition(template) -> None:
    definition = table_definition(template)
    assert definition["BillingMode"] == "PAY_PER_REQUEST"
    assert "ProvisionedThroughput" not in definition
    assert {i["IndexName"] for i in definition["GlobalSecondaryIndexes"]} >= {"due"}
    assert all(i["KeySchema"][0]["AttributeName"] == "PK" for i in definition.get("LocalSecondaryIndexes", []))
    declared = {a["AttributeName"] for a in definition["AttributeDefinitions"]}
    used = {k["AttributeName"] for k in definition["KeySchema"]}
    for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        for index in definition.get(kind, []):
            used |= {k["AttributeName"] for k in index["KeySchema"]}
    assert declared == used  # DynamoDB rejects unused attribute definitions
    assert table_ttl_attribute(template) == "ttl"


def test_function_settings(template) -> None:
    spec = function_spec(template, "ScheduleMessageFunction")
    assert spec.timeout == 29 and spec.memory_size == 512  # own Timeout, Globals memory
    assert spec.handler_file.name == "schedule_message_handler.py"
    run_task = function_spec(template, "RunTaskFunction")
    assert run_task.memory_size == 1024
    env = global_environment(template)
    assert env["AMSG_DUE_SHARDS"] == "1"
    assert env["AMSG_CLIENT_TOKEN_PARAM"] == ""  # !If HasClientToken resolved with the default parameter


def test_intrinsics() -> None:
    template = {
        "Parameters": {
            "Names": {"Type": "CommaDelimitedList", "Default": "a,b"},
            "Size": {"Type": "Number", "Default": 3},
            "Empty": {"Type": "String", "Default": ""},
        },
        "Conditions": {
            "HasEmpty": {"Fn::Not": [{"Fn::Equals": [{"Ref": "Empty"}, ""]}]},
            "IsThree": {"Fn::Equals": [{"Ref": "Size"}, "3"]},
        },
        "Resources": {},
    }
    assert resolve({"Fn::Join": ["-", {"Ref": "Names"}]}, template) == "a-b"
    assert resolve({"Fn::Select": [1, {"Ref": "Names"}]}, template) == "b"
    assert resolve({"Fn::If": ["IsThree", "yes", "no"]}, template) == "yes"
    assert resolve({"Fn::If": ["HasEmpty", "yes", {"Ref": "AWS::NoValue"}]}, template) is NO_VALUE
    assert resolve({"k": {"Fn::If": ["HasEmpty", 1, {"Ref": "AWS::NoValue"}]}, "j": 2}, template) == {"j": 2}
    assert resolve({"Fn::Sub": "${AWS::Region}/${Size}/${Res.Arn}/${!Lit}"}, template) == "us-east-1/3/Res.Arn/${Lit}"
    assert resolve({"Fn::Sub": ["${X}-${Size}", {"X": "x"}]}, template) == "x-3"
    assert resolve({"Fn::GetAtt": ["Queue", "Arn"]}, template) == "Queue.Arn"
    assert resolve({"Ref": "SomeResource"}, template) == "SomeResource"
    assert resolve({"Fn::If": ["HasEmpty", "yes", "no"]}, template, {"Empty": "x"}) == "yes"


def test_short_form_tags(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "Resources:\n  A:\n    Type: X\n    Properties:\n"
        "      R: !Ref P\n      G: !GetAtt B.Arn\n      S: !Sub '${AWS::StackName}-x'\n"
        "      I: !If [C, !Ref P, !Ref AWS::NoValue]\n      L: !Join ['', [!Ref P]]\n",
        encoding="utf-8",
    )
    props = load_template(path)["Resources"]["A"]["Properties"]
    assert props["R"] == {"Ref": "P"}
    assert props["G"] == {"Fn::GetAtt": ["B", "Arn"]}
    assert props["S"] == {"Fn::Sub": "${AWS::StackName}-x"}
    assert props["I"] == {"Fn::If": ["C", {"Ref": "P"}, {"Ref": "AWS::NoValue"}]}
    assert props["L"] == {"Fn::Join": ["", [{"Ref": "P"}]]}


def test_run_task_concurrency_follows_the_event_source_mode(template) -> None:
    """Standard mode: the template's MaximumConcurrency; provisioned mode (the template's condition turned on):
    MaximumPollers x the ten invocations a poller drives. ScalingConfig is absent then, as AWS requires."""
    import copy

    from amsg_local.delivery import INVOCATIONS_PER_POLLER, consumer_concurrency

    default = template["Parameters"]["RunTaskMaxConcurrency"]["Default"]
    assert consumer_concurrency(template, "RunTaskFunction") == int(default)
    provisioned = copy.deepcopy(template)
    provisioned["Parameters"]["RunTaskMinimumPollers"]["Default"] = 2
    provisioned["Parameters"]["RunTaskMaximumPollers"]["Default"] = 7
    assert consumer_concurrency(provisioned, "RunTaskFunction") == 7 * INVOCATIONS_PER_POLLER
