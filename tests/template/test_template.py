"""Invariants of template.yaml (see docs/architecture.md and docs/decisions.md).

These hold whatever cfn-lint checks next. They read the raw template through the local stack's
CloudFormation-aware loader (tests/support/template.py); nothing is deployed or translated.

Assertions marked ``[needs handler files]`` read functions/<name>/<name>_handler.py. They do not skip: a
template entry whose handler file is missing is a failure (it would also break ``sam build``).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from amsg_local.template import global_environment

from tests.support.template import (
    NO_VALUE,
    REPO_ROOT,
    function_dir,
    function_property,
    functions,
    http_routes,
    project_template,
    ref_target,
    resolve,
    resources_of_type,
)

API_PREFIX = "/api/v1"
REFERENCE_ALLOW_HEADERS = [  # the reference's CORS_ALLOW_HEADERS
    "Content-Type",
    "X-User-Id",
    "X-Payload-Encrypted",
    "X-Encryption-Version",
    "X-Response-Encrypted",
    "X-Client-Token",
]
ALLOW_HEADERS = [*REFERENCE_ALLOW_HEADERS, "Content-Encoding", "Authorization"]  # see docs/compatibility.md
ALLOW_METHODS = {"GET", "POST", "PUT", "DELETE", "OPTIONS"}

GSIS = {"due": ("due_pk", "due_sk"), "retention": ("ret_pk", "ret_sk"), "work": ("work_pk", "work_sk")}
LSIS = {"outbox_unacked": ("PK", "ob_lsk"), "outbox_by_task": ("PK", "obt_lsk")}


@pytest.fixture(scope="module")
def tpl() -> dict[str, Any]:
    return project_template()


def _events(tpl: dict[str, Any], logical_id: str, kind: str | None = None) -> dict[str, dict[str, Any]]:
    events = tpl["Resources"][logical_id]["Properties"].get("Events") or {}
    return {name: ev for name, ev in events.items() if kind is None or ev.get("Type") == kind}


def _http_pairs(tpl: dict[str, Any], logical_id: str) -> list[tuple[str, str]]:
    return [
        (str(ev["Properties"].get("Method", "ANY")).upper(), str(ev["Properties"].get("Path", "$default")))
        for ev in _events(tpl, logical_id, "HttpApi").values()
    ]


def _api_functions(tpl: dict[str, Any]) -> list[str]:
    """Functions serving real routes (the $default catch-all excluded)."""
    return [fn for fn in functions(tpl) if any(path != "$default" for _, path in _http_pairs(tpl, fn))]


def _only_function_with(tpl: dict[str, Any], kind: str) -> str:
    found = [fn for fn in functions(tpl) if _events(tpl, fn, kind)]
    assert len(found) == 1, f"expected exactly one function with a {kind} event, found {found}"
    return found[0]


def _timeout(tpl: dict[str, Any], logical_id: str) -> int:
    return int(resolve(function_property(tpl, logical_id, "Timeout", 3), tpl))


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# ------------------------------------------------------------------------------------------------ routes


def test_every_api_function_is_served_at_root_and_under_api_v1(tpl):
    api_functions = _api_functions(tpl)
    assert len(api_functions) >= 10, api_functions
    for fn in api_functions:
        pairs = set(_http_pairs(tpl, fn))
        for method, path in pairs:
            assert path.startswith("/") and not path.endswith("/"), (fn, method, path)
            twin = path[len(API_PREFIX) :] if path.startswith(API_PREFIX + "/") else API_PREFIX + path
            assert (method, twin) in pairs, f"{fn}: {method} {path} has no {method} {twin} twin"
        assert all(method != "ANY" for method, _ in pairs), f"{fn}: explicit methods only ($default handles the rest)"


def test_routes_are_unique(tpl):
    pairs = [pair for fn in functions(tpl) for pair in _http_pairs(tpl, fn)]
    dupes = [pair for pair, n in Counter(pairs).items() if n > 1]
    assert not dupes, f"(method, path) declared more than once: {dupes}"
    # the local stack's own reading of the template agrees (it raises on duplicate route keys)
    assert len(http_routes(tpl)) == len(pairs)


def test_exactly_one_default_route_on_its_own_function(tpl):
    defaults = [(fn, m) for fn in functions(tpl) for m, path in _http_pairs(tpl, fn) if path == "$default"]
    assert len(defaults) == 1, defaults
    fn, method = defaults[0]
    assert method == "ANY"
    assert len(_events(tpl, fn)) == 1, f"{fn} should serve only $default"


def test_http_events_all_attach_to_the_one_http_api(tpl):
    apis = resources_of_type(tpl, "AWS::Serverless::HttpApi")
    assert list(apis) == ["HttpApi"], apis
    for fn in functions(tpl):
        for name, ev in _events(tpl, fn, "HttpApi").items():
            # without ApiId SAM creates an implicit second API that has no CORS / access logs
            assert ev["Properties"].get("ApiId") == {"Ref": "HttpApi"}, (fn, name)


# ------------------------------------------------------------------------------------------------ handlers


def test_handler_naming_convention_and_unique_modules(tpl):
    modules = []
    for fn in functions(tpl):
        code_uri = function_property(tpl, fn, "CodeUri")
        handler = function_property(tpl, fn, "Handler")
        name = function_dir(tpl, fn)
        assert code_uri == f"functions/{name}/", (fn, code_uri)
        assert handler == f"{name}_handler.handler", (fn, handler)
        modules.append(handler.rsplit(".", 1)[0])
    assert len(modules) == len(set(modules)), Counter(modules)
    # functions share one sys.path locally (pytest, local gateway): a module must not shadow the layer or stdlib
    layer_top = {p.name for p in (REPO_ROOT / "layers" / "shared").iterdir() if p.is_dir() or p.suffix == ".py"}
    clashes = [m for m in modules if m in layer_top or m in sys.stdlib_module_names]
    assert not clashes, clashes


@pytest.mark.parametrize("logical_id", sorted(functions(project_template())))
def test_handler_module_exists_and_defines_handler(tpl, logical_id):
    """[needs handler files] functions/<name>/<name>_handler.py exists, defines ``handler``, has no siblings."""
    module, attr = function_property(tpl, logical_id, "Handler").rsplit(".", 1)
    code_dir = REPO_ROOT / function_property(tpl, logical_id, "CodeUri")
    path = code_dir / f"{module}.py"
    assert path.is_file(), f"{logical_id}: {path.relative_to(REPO_ROOT)} missing"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)} | {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    assert attr in defined, f"{path.relative_to(REPO_ROOT)} has no top-level {attr!r}"
    siblings = sorted(p.name for p in code_dir.glob("*.py") if p != path)
    assert not siblings, f"{logical_id}: function dirs hold one module, found {siblings}"


# ------------------------------------------------------------------------------------------------ runtime & layer


def test_runtime_and_architecture(tpl):
    glob = tpl["Globals"]["Function"]
    assert glob["Runtime"] == "python3.12"
    assert glob["Architectures"] == ["arm64"]
    for fn in functions(tpl):
        props = tpl["Resources"][fn]["Properties"]
        assert props.get("Runtime", "python3.12") == "python3.12", fn
        assert props.get("Architectures", ["arm64"]) == ["arm64"], fn


def test_shared_layer_build_settings(tpl):
    layers = resources_of_type(tpl, "AWS::Serverless::LayerVersion")
    assert list(layers) == ["SharedLayer"], layers
    layer = layers["SharedLayer"]
    # the layer's Makefile installs the arm64 wheels and compiles the bytecode Lambda's read-only /opt needs
    assert layer["Metadata"]["BuildMethod"] == "makefile"
    assert "build-SharedLayer:" in (REPO_ROOT / "layers" / "shared" / "Makefile").read_text()
    # without BuildArchitecture sam build installs x86_64 wheels into an arm64 layer
    assert layer["Metadata"]["BuildArchitecture"] == "arm64"
    props = layer["Properties"]
    assert props["CompatibleRuntimes"] == ["python3.12"]
    assert props["CompatibleArchitectures"] == ["arm64"]
    assert props["ContentUri"] == "layers/shared/"
    content = REPO_ROOT / "layers" / "shared"
    assert (content / "amsg" / "__init__.py").is_file()
    assert (content / "requirements.txt").is_file()


def test_every_function_uses_the_shared_layer_via_globals(tpl):
    assert tpl["Globals"]["Function"]["Layers"] == [{"Ref": "SharedLayer"}]
    for fn in functions(tpl):
        own = tpl["Resources"][fn]["Properties"].get("Layers")
        # SAM appends function Layers to Globals'; an own list must not try to replace the shared layer
        assert own is None or {"Ref": "SharedLayer"} not in own, fn


def test_every_function_logs_to_its_own_retained_log_group(tpl):
    groups = []
    for fn in functions(tpl):
        group = ref_target((function_property(tpl, fn, "LoggingConfig") or {}).get("LogGroup"))
        assert group, f"{fn}: LoggingConfig.LogGroup missing"
        res = tpl["Resources"][group]
        assert res["Type"] == "AWS::Logs::LogGroup"
        assert res["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
        groups.append(group)
    assert len(groups) == len(set(groups))


# ------------------------------------------------------------------------------------------------ delivery engine


SQS_FUNCTIONS = {"run_task": "RunTaskMaxConcurrency", "claimer": "ClaimerMaxConcurrency"}  # dir -> concurrency cap


def _sqs_functions(tpl):
    found = {function_dir(tpl, fn): fn for fn in functions(tpl) if _events(tpl, fn, "SQS")}
    assert set(found) == set(SQS_FUNCTIONS), found
    return found


@pytest.mark.parametrize("directory", sorted(SQS_FUNCTIONS))
def test_queue_visibility_covers_six_function_timeouts(tpl, directory):
    fn = _sqs_functions(tpl)[directory]
    (event,) = _events(tpl, fn, "SQS").values()
    queue = ref_target(event["Properties"]["Queue"])
    assert tpl["Resources"][queue]["Type"] == "AWS::SQS::Queue"
    visibility = int(resolve(tpl["Resources"][queue]["Properties"]["VisibilityTimeout"], tpl))
    assert visibility >= 6 * _timeout(tpl, fn), (visibility, _timeout(tpl, fn))


@pytest.mark.parametrize("directory", sorted(SQS_FUNCTIONS))
def test_partial_batch_failures_dlq_and_concurrency_cap(tpl, directory):
    fn = _sqs_functions(tpl)[directory]
    (event,) = _events(tpl, fn, "SQS").values()
    props = event["Properties"]
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert resolve(props, tpl)["ScalingConfig"] == {"MaximumConcurrency": _default(tpl, SQS_FUNCTIONS[directory])}
    queue_props = tpl["Resources"][ref_target(props["Queue"])]["Properties"]
    redrive = queue_props["RedrivePolicy"]
    dlq = ref_target(redrive["deadLetterTargetArn"])
    assert tpl["Resources"][dlq]["Type"] == "AWS::SQS::Queue"
    assert dlq != ref_target(props["Queue"])
    assert 1 <= int(redrive["maxReceiveCount"]) <= 10
    # a dead letter must outlive the source message's retention or it expires before anyone looks
    assert int(tpl["Resources"][dlq]["Properties"]["MessageRetentionPeriod"]) > int(
        queue_props["MessageRetentionPeriod"]
    )


def _default(tpl: dict[str, Any], parameter: str) -> int:
    return int(tpl["Parameters"][parameter]["Default"])


def test_run_task_event_source_is_standard_by_default_and_provisioned_on_request(tpl):
    """Provisioned pollers (a cold spike starts without the standard mode's ramp) only when the deployer asks;
    then ``ScalingConfig`` goes, as AWS refuses ``MaximumConcurrency`` beside ``ProvisionedPollerConfig``."""
    (event,) = _events(tpl, _sqs_functions(tpl)["run_task"], "SQS").values()
    params = tpl["Parameters"]
    assert _default(tpl, "RunTaskMinimumPollers") == 0
    standard = resolve(event["Properties"], tpl)
    assert "ProvisionedPollerConfig" not in standard
    assert standard["ScalingConfig"] == {"MaximumConcurrency": _default(tpl, "RunTaskMaxConcurrency")}
    provisioned = resolve(event["Properties"], tpl, {"RunTaskMinimumPollers": 50, "RunTaskMaximumPollers": 120})
    assert "ScalingConfig" not in provisioned
    assert provisioned["ProvisionedPollerConfig"] == {"MinimumPollers": 50, "MaximumPollers": 120}
    # the bounds AWS accepts for an SQS event source (0 = off here)
    assert (params["RunTaskMinimumPollers"]["MinValue"], params["RunTaskMinimumPollers"]["MaxValue"]) == (0, 200)
    assert params["RunTaskMaximumPollers"]["MinValue"] == 2
    assert 2 <= _default(tpl, "RunTaskMaximumPollers") <= params["RunTaskMaximumPollers"]["MaxValue"] <= 10_000


def test_the_claimer_and_run_task_poll_different_queues(tpl):
    queues = {
        ref_target(next(iter(_events(tpl, fn, "SQS").values()))["Properties"]["Queue"])
        for fn in _sqs_functions(tpl).values()
    }
    assert len(queues) == 2


def test_tick_schedule_and_no_retries(tpl):
    fn = _only_function_with(tpl, "ScheduleV2")
    assert function_dir(tpl, fn) == "tick"
    assert _timeout(tpl, fn) < 60, "a tick must finish inside its minute"
    invoke = tpl["Resources"][fn]["Properties"]["EventInvokeConfig"]
    assert invoke["MaximumRetryAttempts"] == 0  # Scheduler invokes async: no Lambda-side replays
    assert int(invoke["MaximumEventAgeInSeconds"]) <= 60
    (event,) = _events(tpl, fn, "ScheduleV2").values()
    props = event["Properties"]
    assert props["ScheduleExpression"] == "rate(1 minute)"
    assert props["FlexibleTimeWindow"]["Mode"] == "OFF"
    assert props["RetryPolicy"]["MaximumRetryAttempts"] == 0
    payload = json.loads(props["Input"])
    assert payload == {
        "scheduledTime": "<aws.scheduler.scheduled-time>",
        "executionId": "<aws.scheduler.execution-id>",
    }
    assert len(_events(tpl, fn)) == 1


# ------------------------------------------------------------------------------------------------ table


def test_table_keys_indexes_and_ttl(tpl):
    tables = resources_of_type(tpl, "AWS::DynamoDB::Table")
    assert list(tables) == ["Table"], tables  # one table, no idempotency table (claim fencing deduplicates)
    props = tables["Table"]["Properties"]

    def keys(schema: list[dict[str, str]]) -> tuple[str, ...]:
        by_type = {k["KeyType"]: k["AttributeName"] for k in schema}
        assert set(by_type) == {"HASH", "RANGE"} and len(schema) == 2, schema
        return by_type["HASH"], by_type["RANGE"]

    assert keys(props["KeySchema"]) == ("PK", "SK")
    assert {g["IndexName"]: keys(g["KeySchema"]) for g in props["GlobalSecondaryIndexes"]} == GSIS
    assert {i["IndexName"]: keys(i["KeySchema"]) for i in props["LocalSecondaryIndexes"]} == LSIS
    # unacked outbox rows are paged from a strongly consistent LSI, so it must carry the rows
    for lsi in props["LocalSecondaryIndexes"]:
        assert lsi["Projection"]["ProjectionType"] == "ALL", lsi["IndexName"]

    used = {"PK", "SK"} | {a for pair in (*GSIS.values(), *LSIS.values()) for a in pair}
    defs = {d["AttributeName"]: d["AttributeType"] for d in props["AttributeDefinitions"]}
    assert set(defs) == used, "CloudFormation rejects definitions not used by a key"
    assert set(defs.values()) == {"S"}

    assert props["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert tables["Table"].get("DeletionPolicy") == "Retain"


# ------------------------------------------------------------------------------------------------ CORS


def test_cors_configuration(tpl):
    cors = tpl["Resources"]["HttpApi"]["Properties"]["CorsConfiguration"]
    condition, when_on, when_off = cors["Fn::If"]
    assert when_off == {"Ref": "AWS::NoValue"}
    assert sorted(when_on) == ["AllowHeaders", "AllowMethods", "AllowOrigins", "MaxAge"], "no credentials/expose"
    assert when_on["AllowHeaders"] == ALLOW_HEADERS
    assert set(when_on["AllowMethods"]) == ALLOW_METHODS and len(when_on["AllowMethods"]) == len(ALLOW_METHODS)
    assert when_on["MaxAge"] == {"Ref": "CorsMaxAge"}
    params = tpl["Parameters"]
    assert int(params["CorsMaxAge"]["Default"]) == 86400
    assert params["AllowOrigins"]["Default"] == ""
    assert condition in tpl["Conditions"]


def test_cors_absent_without_origins_and_split_with_them(tpl):
    cors = tpl["Resources"]["HttpApi"]["Properties"]["CorsConfiguration"]
    assert resolve(cors, tpl) is NO_VALUE  # no origins -> no CorsConfiguration at all
    on = resolve(cors, tpl, {"AllowOrigins": "https://app.example.com,http://localhost:5173"})
    assert on["AllowOrigins"] == ["https://app.example.com", "http://localhost:5173"]
    assert on["MaxAge"] == 86400


def test_allow_origins_pattern(tpl):
    pattern = tpl["Parameters"]["AllowOrigins"]["AllowedPattern"]
    for good in ("", "*", "https://a.example", "https://a.example,http://localhost:5173"):
        assert re.fullmatch(pattern, good), good
    for bad in ("https://a.example, https://b.example", "a.example", "https://a.example/", ","):
        assert not re.fullmatch(pattern, bad), bad


def test_no_code_emits_cors_headers():
    """HTTP API ignores backend CORS headers when CorsConfiguration is set; handlers and the
    layer code that builds their responses must not set any."""
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{n}"
        for root in (REPO_ROOT / "functions", REPO_ROOT / "layers" / "shared")
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "access-control-" in line.lower()
    ]
    assert not offenders, offenders


# ------------------------------------------------------------------------------------------------ IAM


def _policy_statements(tpl: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for name, res in tpl["Resources"].items():
        props = res.get("Properties") or {}
        docs = []
        if res.get("Type") in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
            docs.append(props["PolicyDocument"])
        elif res.get("Type") == "AWS::IAM::Role":
            docs += [p["PolicyDocument"] for p in props.get("Policies") or []]
        elif res.get("Type") == "AWS::Serverless::Function":
            docs += [p for p in _as_list(props.get("Policies") or []) if isinstance(p, dict) and "Statement" in p]
        for doc in docs:
            found += [(name, st) for st in _as_list(doc["Statement"])]
    return found


def test_iam_statements_are_least_privilege(tpl):
    statements = _policy_statements(tpl)
    assert statements, "no IAM statements found"
    for owner, st in statements:
        if owner == "FunctionBoundary":  # a boundary grants nothing; test_iam checks what it lets through
            continue
        assert "NotAction" not in st and "NotResource" not in st, owner
        actions = [a.lower() for a in _as_list(st.get("Action")) if isinstance(a, str)]
        resources = _as_list(st.get("Resource"))
        for action in actions:
            if owner == "TenantSweepPolicy" and action == "dynamodb:scan":
                continue  # Tenancy=multi only, the tick only: removing a deleted tenant's items (docs/tenancy.md)
            assert not fnmatch.fnmatchcase("dynamodb:scan", action), f"{owner}: {action} grants dynamodb:Scan"
            assert action != "dynamodb:*", owner
        touches = [a for a in actions if a == "*" or a.split(":", 1)[0] in ("dynamodb", "ssm")]
        if touches:
            assert "*" not in resources, f"{owner}: {touches} on Resource '*'"


def test_function_policies_are_scoped(tpl):
    """Functions attach only in-template managed policies or SAM templates that cannot reach DynamoDB/SSM
    broadly (DynamoDBCrudPolicy/DynamoDBReadPolicy include Scan)."""
    managed = set(resources_of_type(tpl, "AWS::IAM::ManagedPolicy"))
    for fn in functions(tpl):
        for policy in _as_list(tpl["Resources"][fn]["Properties"].get("Policies") or []):
            if isinstance(policy, str):
                assert not re.search(r"dynamodb|ssm|admin|fullaccess", policy, re.I), (fn, policy)
            elif ref_target(policy):
                assert ref_target(policy) in managed, (fn, policy)
            elif isinstance(policy, dict) and "Statement" not in policy:
                (template_name,) = policy
                assert not template_name.startswith(("DynamoDB", "SSM", "SecretsManager")), (fn, template_name)


def test_secrets_come_from_parameters_not_the_template(tpl):
    """Decision 17: no secret values in clear text; only SSM parameter *names* are passed."""
    variables = tpl["Globals"]["Function"]["Environment"]["Variables"]
    for key in variables:
        assert not re.search(r"(MASTER_KEY|PRIVATE_KEY|CLIENT_TOKEN)$", key), f"{key}: pass the SSM parameter name"
    for name, spec in tpl["Parameters"].items():
        if re.search(r"secret|token|private|master", name, re.I):
            assert name.endswith("ParameterName"), name


def test_template_file_is_the_one_tested():
    assert Path(project_template()["__file__"]) == (REPO_ROOT / "template.yaml").resolve()


@pytest.mark.slow  # runs scripts/sync-layer-requirements
def test_layer_requirements_match_the_lock():
    """layers/shared/requirements.txt is generated from uv.lock (uv from PATH or the bootstrapped .cache/uv)."""
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "sync-layer-requirements"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr or result.stdout


SECRET_NAME_PARAMETERS = {
    "MasterKeyParameterName": "AMSG_MASTER_KEY_PARAM",
    "VapidPrivateKeyParameterName": "AMSG_VAPID_PRIVATE_KEY_PARAM",
}


def _ssm_resources(tpl: dict[str, Any], parameters: dict[str, str]) -> set[str]:
    return {
        arn
        for _, st in _policy_statements(tpl)
        if any(str(a).startswith("ssm:") for a in _as_list(st.get("Action")))
        for arn in _as_list(resolve(st.get("Resource"), tpl, parameters))
    }


@pytest.mark.parametrize(
    "parameters",
    [{}, {"MasterKeyParameterName": "/prod/mk", "VapidPrivateKeyParameterName": "/prod/vapid"}],
    ids=["stack-derived names", "explicit names"],
)
def test_ssm_parameter_arns_match_the_names_the_functions_read(tpl, parameters):
    """A name "/amsg/x/master-key" has the ARN "...:parameter/amsg/x/master-key"; "parameter/${Name}" would
    produce "parameter//amsg/..." and GetParameter would be denied at runtime. The policies and the
    environment derive the same name, given or not."""
    env = global_environment(tpl, parameters)
    arns = _ssm_resources(tpl, parameters)
    for parameter, variable in SECRET_NAME_PARAMETERS.items():
        name = env[variable]
        assert name.startswith("/") and "//" not in name
        assert f"arn:aws:ssm:us-east-1:123456789012:parameter{name}" in arns, (variable, name, arns)
        if parameter in parameters:
            assert name == parameters[parameter]
        else:
            assert name.startswith("/amsg/amsg-local/")  # the stack's own name
        spec = tpl["Parameters"][parameter]
        assert not re.fullmatch(spec["AllowedPattern"], "amsg/master-key"), f"{parameter} must require a leading /"
        assert re.fullmatch(spec["AllowedPattern"], str(spec["Default"])), parameter
