"""``amsg status --stack NAME`` against a deployed stack, on moto: the stack's outputs and parameters name the
table and the dead-letter queue, CloudWatch gives the last tick and the lateness p99."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from amsg_local.cli import main
from amsg_local.status_probe import CloudWatchProbe, p99
from botocore.stub import Stubber

pytestmark = pytest.mark.slow  # moto's CloudFormation

STACK_TEMPLATE = {
    "Parameters": {"DueShardCount": {"Type": "Number", "Default": 2}, "Tenancy": {"Type": "String"}},
    "Resources": {"TaskDeadLetterQueue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "amsg-dlq"}}},
    "Outputs": {
        "TableName": {"Value": "amsg-status-table"},
        "TaskDeadLetterQueueUrl": {"Value": {"Ref": "TaskDeadLetterQueue"}},
    },
}


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from amsg_local.tables import create_tables_from_template
    from moto import mock_aws

    from tests.conftest import parsed_template

    for key in ("AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        cfn = boto3.client("cloudformation", region_name="eu-west-1")
        cfn.create_stack(
            StackName="amsg",
            TemplateBody=json.dumps(STACK_TEMPLATE),
            Parameters=[{"ParameterKey": "Tenancy", "ParameterValue": "single"}],
        )
        ddb = boto3.client("dynamodb", region_name="eu-west-1")
        create_tables_from_template(ddb, parsed_template(), "amsg-status-table")
        yield


def test_a_deployed_stack_from_its_outputs_and_metrics(deployed: None, capsys: pytest.CaptureFixture[str]) -> None:
    sqs = boto3.client("sqs", region_name="eu-west-1")
    url = sqs.get_queue_url(QueueName="amsg-dlq")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="{}")
    cw = boto3.client("cloudwatch", region_name="eu-west-1")
    at = datetime.now(UTC) - timedelta(minutes=2)
    dimensions = [{"Name": "service", "Value": "amsg"}]
    for name, value in (("TasksDue", 4), ("TasksClaimed", 3), ("TasksEnqueued", 3)):
        metric = {"MetricName": name, "Dimensions": dimensions, "Timestamp": at, "Value": value, "Unit": "Count"}
        cw.put_metric_data(Namespace="amsg", MetricData=[metric])

    table = boto3.resource("dynamodb", region_name="eu-west-1").Table("amsg-status-table")
    operation = {"PK": "U#u1", "SK": "R#operation#op1", "work_pk": "WORK#operation", "work_sk": "001893369600000"}
    table.put_item(Item=operation)  # a cloud-data cleanup not finished: in the work index until it is

    assert main(["status", "--stack", "amsg", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["stack"] == {"kind": "aws", "name": "amsg", "table": "amsg-status-table"}
    assert report["lastTick"]["summary"]["dueTasks"] == 4
    assert report["lastTick"]["summary"]["claimedTasks"] == 3
    assert 100 <= report["lastTick"]["ageSeconds"] < 300
    assert report["dueBacklog"] == {"0": 0, "1": 0}  # DueShardCount=2
    assert report["deadLetterMessages"] == 1
    assert report["cleanupOperations"] == 1
    assert report["latenessSource"] == "DeliveryLatency metric"


def test_an_unknown_stack_is_a_clear_message(deployed: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--stack", "nope"]) == 2
    assert "cannot read the stack nope" in capsys.readouterr().err


def test_lateness_is_the_metrics_p99_over_the_hour() -> None:
    """CloudWatch computes the percentile (moto does not): the answer's p99 and sample count are what is shown."""
    cw = boto3.client("cloudwatch", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    now = datetime(2030, 1, 1, tzinfo=UTC)
    with Stubber(cw) as stub:
        stub.add_response(
            "get_metric_statistics",
            {"Datapoints": [{"Timestamp": now, "SampleCount": 250.0, "ExtendedStatistics": {"p99": 4321.5}}]},
        )
        assert CloudWatchProbe(cw, "amsg", now).lateness() == (4321, 250)
        stub.add_response("get_metric_statistics", {"Datapoints": []})
        assert CloudWatchProbe(cw, "amsg", now).lateness() == (None, 0)


def test_nearest_rank_p99() -> None:
    assert p99([]) is None
    assert p99([5]) == 5
    assert p99(list(range(1, 101))) == 99
    assert p99(list(range(1, 201))) == 198
