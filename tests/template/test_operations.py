"""Operations in template.yaml: alarms wired to the right resources and to the optional SNS topic, the dashboard
reading exactly the metrics the code emits, HTTP API throttling, and opt-in tracing."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.support.template import function_property, project_template, ref_target, resources_of_type

TOPIC_ACTIONS = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}

# What the code emits (tests/handlers/test_metrics.py proves names, units and dimensions): name -> dimensions.
# The service dimension is the stack's name (POWERTOOLS_SERVICE_NAME), "<AWS::StackName>" in the dashboard body.
STACK = "<AWS::StackName>"
EMITTED = {
    "TasksDue": {"service": {STACK}},
    "TasksClaimed": {"service": {STACK}},
    "TasksEnqueued": {"service": {STACK}},
    "ClaimsSkipped": {"service": {STACK}},
    "EnqueueFailures": {"service": {STACK}},
    "TasksDelivered": {"service": {STACK}},
    "DeliveryFailures": {"service": {STACK}},
    "DeliveryLatency": {"service": {STACK}},
    "PushLatency": {"service": {STACK}},
    "LlmLatency": {"service": {STACK}, "Outcome": {"ok", "timeout", "network", "2xx", "4xx", "5xx"}},
    "PushFailures": {"service": {STACK}, "StatusClass": {"timeout", "network", "4xx", "5xx"}},
}


@pytest.fixture(scope="module")
def tpl() -> dict[str, Any]:
    return project_template()


def _alarms(tpl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: res["Properties"] for name, res in resources_of_type(tpl, "AWS::CloudWatch::Alarm").items()}


def _metric_alarm(props: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    dims = {d["Name"]: d["Value"] for d in props["Dimensions"]}
    return props["Namespace"], props["MetricName"], dims


def _math_metrics(props: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    out = {}
    for query in props["Metrics"]:
        if "MetricStat" in query:
            metric = query["MetricStat"]["Metric"]
            out[query["Id"]] = (
                metric["Namespace"],
                metric["MetricName"],
                {d["Name"]: d["Value"] for d in metric["Dimensions"]},
            )
    return out


def test_every_alarm_notifies_the_optional_topic(tpl):
    alarms = _alarms(tpl)
    assert len(alarms) >= 9
    assert tpl["Parameters"]["AlarmTopicArn"]["Default"] == ""
    for name, props in alarms.items():
        assert props["AlarmActions"] == TOPIC_ACTIONS, name
        assert props["OKActions"] == TOPIC_ACTIONS, name
        # only a stopped tick is told by missing data; everything else is quiet when there is no traffic
        expected = "breaching" if name == "TickHeartbeatAlarm" else "notBreaching"
        assert props["TreatMissingData"] == expected, name
        assert props.get("AlarmDescription"), name


def _find(tpl: dict[str, Any], namespace: str, metric: str, **dims: str) -> dict[str, Any]:
    found = []
    for name, props in _alarms(tpl).items():
        if "MetricName" not in props:
            continue
        ns, mn, d = _metric_alarm(props)
        if (ns, mn) == (namespace, metric) and {k: ref_target(v) or v for k, v in d.items()} == dims:
            found.append(props)
    assert len(found) == 1, f"expected one alarm on {namespace} {metric} {dims}, found {len(found)}"
    return found[0]


def test_dead_letters_alarm_on_the_first_message(tpl):
    props = _find(tpl, "AWS/SQS", "ApproximateNumberOfMessagesVisible", QueueName="TaskDeadLetterQueue")
    assert (props["Statistic"], props["ComparisonOperator"], props["Threshold"]) == (
        "Maximum",
        "GreaterThanThreshold",
        0,
    )


def test_oldest_task_message_age_alarms_beyond_the_tick_lease(tpl):
    props = _find(tpl, "AWS/SQS", "ApproximateAgeOfOldestMessage", QueueName="TaskQueue")
    assert 300 <= props["Threshold"] <= 900  # above the tick's 5 min claim lease, well before the 1 day retention


@pytest.mark.parametrize("function", ["TickFunction", "RunTaskFunction"])
@pytest.mark.parametrize("metric", ["Errors", "Throttles"])
def test_tick_and_run_task_errors_and_throttles_alarm(tpl, function, metric):
    props = _find(tpl, "AWS/Lambda", metric, FunctionName=function)
    assert props["Statistic"] == "Sum" and props["Threshold"] == 0
    assert props["ComparisonOperator"] == "GreaterThanThreshold"


def test_tick_duration_alarms_near_its_timeout(tpl):
    props = _find(tpl, "AWS/Lambda", "Duration", FunctionName="TickFunction")
    timeout_ms = function_property(tpl, "TickFunction", "Timeout") * 1000
    assert props["Statistic"] == "Maximum"
    assert 0.7 * timeout_ms <= props["Threshold"] < timeout_ms


def test_api_5xx_rate_alarm(tpl):
    (props,) = [
        p for p in _alarms(tpl).values() if "Metrics" in p and any(m[1] == "5xx" for m in _math_metrics(p).values())
    ]
    metrics = _math_metrics(props)
    assert metrics["errors"] == ("AWS/ApiGateway", "5xx", {"ApiId": {"Ref": "HttpApi"}, "Stage": "$default"})
    assert metrics["requests"] == ("AWS/ApiGateway", "Count", {"ApiId": {"Ref": "HttpApi"}, "Stage": "$default"})
    (rate,) = [q for q in props["Metrics"] if q.get("ReturnData")]
    assert "errors" in rate["Expression"] and "requests" in rate["Expression"]
    assert 0 < props["Threshold"] <= 10  # percent


def test_dynamodb_throttles_alarm(tpl):
    (props,) = [
        p
        for p in _alarms(tpl).values()
        if "Metrics" in p and any(m[0] == "AWS/DynamoDB" for m in _math_metrics(p).values())
    ]
    metrics = _math_metrics(props)
    assert {m[1] for m in metrics.values()} == {"ReadThrottleEvents", "WriteThrottleEvents"}
    assert all(m[2] == {"TableName": {"Ref": "Table"}} for m in metrics.values())
    assert props["Threshold"] == 0


def _dashboard(tpl: dict[str, Any]) -> dict[str, Any]:
    (dashboard,) = resources_of_type(tpl, "AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]["Fn::Sub"]
    names = set(re.findall(r"\$\{([^}]+)\}", body))
    for name in names:  # every substitution names a parameter, a resource or a pseudo parameter
        root = name.split(".")[0]
        assert root in tpl["Resources"] or root.startswith("AWS::"), name
    return json.loads(re.sub(r"\$\{([^}]+)\}", lambda m: f"<{m.group(1)}>", body))


def test_dashboard_shows_the_emitted_metrics_with_their_dimensions(tpl):
    shown: dict[str, set[str]] = {}
    stats: dict[str, set[str]] = {}
    for widget in _dashboard(tpl)["widgets"]:
        props = widget["properties"]
        for line in props["metrics"]:
            options = line[-1] if isinstance(line[-1], dict) else {}
            parts = [p for p in line if not isinstance(p, dict)]
            namespace, name, dims = parts[0], parts[1], dict(zip(parts[2::2], parts[3::2], strict=True))
            if namespace != "amsg":
                continue
            assert name in EMITTED, f"dashboard reads {name}, which nothing emits"
            assert set(dims) == set(EMITTED[name]), (name, dims)
            for key, value in dims.items():
                assert value in EMITTED[name][key], (name, key, value)
            shown.setdefault(name, set()).update(f"{k}={v}" for k, v in dims.items())
            stats.setdefault(name, set()).add(options.get("stat") or props.get("stat"))
    for required in (
        "TasksDue",
        "TasksClaimed",
        "TasksDelivered",
        "DeliveryFailures",
        "DeliveryLatency",
        "LlmLatency",
        "PushFailures",
    ):
        assert required in shown, required
    assert {"p50", "p90", "p99"} <= stats["DeliveryLatency"]
    assert {"p50", "p90", "p99"} <= stats["LlmLatency"]
    assert {f"StatusClass={c}" for c in EMITTED["PushFailures"]["StatusClass"]} <= shown["PushFailures"]


def test_http_api_stage_is_throttled_by_parameters(tpl):
    (api,) = resources_of_type(tpl, "AWS::Serverless::HttpApi").values()
    settings = api["Properties"]["DefaultRouteSettings"]
    assert settings["ThrottlingRateLimit"] == {"Ref": "ApiThrottlingRateLimit"}
    assert settings["ThrottlingBurstLimit"] == {"Ref": "ApiThrottlingBurstLimit"}
    rate = tpl["Parameters"]["ApiThrottlingRateLimit"]
    burst = tpl["Parameters"]["ApiThrottlingBurstLimit"]
    assert rate["Type"] == burst["Type"] == "Number"
    assert 1 <= rate["Default"] <= burst["Default"] <= 10_000  # a burst of at least one second of the rate


def test_tracing_is_a_parameter_off_by_default(tpl):
    param = tpl["Parameters"]["Tracing"]
    assert param["Default"] == "Disabled" and set(param["AllowedValues"]) == {"Disabled", "Active"}
    assert tpl["Globals"]["Function"]["Tracing"] == {"Ref": "Tracing"}
    env = tpl["Globals"]["Function"]["Environment"]["Variables"]
    assert env["AMSG_TRACING"] == {"Fn::If": ["TracingEnabled", "true", "false"]}
    assert tpl["Conditions"]["TracingEnabled"] == {"Fn::Equals": [{"Ref": "Tracing"}, "Active"]}


# ---- alarms for what users feel ----------------------------------------------------------------------------


def _tick_schedule(tpl: dict[str, Any]) -> dict[str, Any]:
    (event,) = [
        e["Properties"]
        for e in tpl["Resources"]["TickFunction"]["Properties"]["Events"].values()
        if e["Type"] == "ScheduleV2"
    ]
    return event


def test_a_stopped_tick_alarms_through_missing_data(tpl):
    props = _find(tpl, "AWS/Lambda", "Invocations", FunctionName="TickFunction")
    assert props["TreatMissingData"] == "breaching"  # a tick that never runs publishes no datapoint at all
    assert (props["Statistic"], props["ComparisonOperator"], props["Threshold"]) == ("Sum", "LessThanThreshold", 1)
    assert props["DatapointsToAlarm"] == props["EvaluationPeriods"]  # every minute of the window silent
    assert props["Period"] * props["EvaluationPeriods"] <= 600  # told within 10 minutes


def test_the_schedulers_failed_invocations_alarm_for_this_stacks_group_only(tpl):
    schedule = _tick_schedule(tpl)
    assert schedule["GroupName"] == {"Ref": "TickScheduleGroup"}
    (props,) = [
        p
        for p in _alarms(tpl).values()
        if "Metrics" in p and any(m[0] == "AWS/Scheduler" for m in _math_metrics(p).values())
    ]
    metrics = _math_metrics(props)
    assert {m[1] for m in metrics.values()} == {"TargetErrorCount", "InvocationDroppedCount"}
    assert all(m[2] == {"ScheduleGroup": {"Ref": "TickScheduleGroup"}} for m in metrics.values())
    (result,) = [q for q in props["Metrics"] if q.get("ReturnData")]
    assert all(f"FILL({query_id}, 0)" in result["Expression"] for query_id in metrics)
    assert (props["ComparisonOperator"], props["Threshold"]) == ("GreaterThanThreshold", 0)


def test_the_schedule_dead_letters_and_that_alarms(tpl):
    schedule = _tick_schedule(tpl)
    assert ref_target(schedule["DeadLetterConfig"]["Arn"]) == "TickScheduleDeadLetterQueue"
    props = _find(tpl, "AWS/SQS", "ApproximateNumberOfMessagesVisible", QueueName="TickScheduleDeadLetterQueue")
    assert (props["ComparisonOperator"], props["Threshold"]) == ("GreaterThanThreshold", 0)


def delivery_latency_alarm(tpl: dict[str, Any]) -> dict[str, Any]:
    (props,) = [
        p
        for p in _alarms(tpl).values()
        if "Metrics" in p and any(m[1] == "DeliveryLatency" for m in _math_metrics(p).values())
    ]
    return props


def alarm_value(props: dict[str, Any], stat_values: dict[str, float]) -> float:
    """The value a metric-math alarm compares with its threshold, given each query's statistic: evaluates the
    returned expression (CloudWatch's arithmetic subset: ids, numbers, + - * / and parentheses)."""
    (result,) = [q for q in props["Metrics"] if q.get("ReturnData")]
    expression = result["Expression"]
    assert re.fullmatch(r"[A-Za-z0-9_ .+\-*/()]+", expression), expression
    return float(eval(expression, {"__builtins__": {}}, dict(stat_values)))


def alarm_threshold(tpl: dict[str, Any], props: dict[str, Any]) -> float:
    threshold = props["Threshold"]
    return float(tpl["Parameters"][ref_target(threshold)]["Default"] if isinstance(threshold, dict) else threshold)


def test_late_deliveries_alarm_on_the_p99_of_delivery_latency(tpl):
    props = delivery_latency_alarm(tpl)
    ((query_id, (namespace, name, dims)),) = _math_metrics(props).items()
    assert (namespace, name) == ("amsg", "DeliveryLatency")
    assert dims == {"service": {"Ref": "AWS::StackName"}}  # this stack's deliveries only
    (stat,) = [q["MetricStat"] for q in props["Metrics"] if q["Id"] == query_id]
    assert stat["Stat"] in {"p99", "Maximum"} and stat["Unit"] == "Milliseconds"
    assert props["Threshold"] == {"Ref": "DeliveryLatencyThresholdSeconds"}
    assert tpl["Parameters"]["DeliveryLatencyThresholdSeconds"]["Default"] == 120
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    # the metric is in milliseconds and the threshold in seconds: the expression converts
    assert alarm_value(props, {query_id: 120_000}) == 120 == alarm_threshold(tpl, props)


def test_a_few_5xx_alarm_whatever_the_traffic(tpl):
    props = _find(tpl, "AWS/ApiGateway", "5xx", ApiId="HttpApi", Stage="$default")
    assert props["Statistic"] == "Sum" and props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert props["Threshold"] == {"Ref": "Api5xxCountThreshold"}
    assert 1 <= tpl["Parameters"]["Api5xxCountThreshold"]["Default"] <= 5
    assert props["Period"] * props["EvaluationPeriods"] <= 900


def test_the_metrics_service_dimension_is_the_stack(tpl):
    """Two stacks in one account emit into the same namespace: the service dimension keeps them apart."""
    env = tpl["Globals"]["Function"]["Environment"]["Variables"]
    assert env["POWERTOOLS_SERVICE_NAME"] == {"Ref": "AWS::StackName"}
    body = tpl["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    assert '"service", "amsg"' not in body and '"service", "${AWS::StackName}"' in body
