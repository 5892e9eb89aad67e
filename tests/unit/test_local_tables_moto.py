"""The table and queue built from template.yaml on moto (in process and the embedded server)."""

from __future__ import annotations

import json

import boto3
import pytest
from amsg_local.embedded import EmbeddedMoto
from amsg_local.tables import create_queue_from_template, create_tables_from_template
from amsg_local.template import load_template

from tests.support.schema import assert_table_matches_template


def test_template_table_on_moto_in_process() -> None:
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_tables_from_template(client, load_template(), "amsg-moto")
        assert_table_matches_template(client, "amsg-moto", load_template())


@pytest.fixture(scope="module")
def moto_server():
    server = EmbeddedMoto().start()
    yield server
    server.stop()


def _client(server: EmbeddedMoto, service: str):
    return boto3.client(
        service,
        endpoint_url=server.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def test_embedded_moto_is_loopback_only(moto_server: EmbeddedMoto) -> None:
    assert moto_server.endpoint_url.startswith("http://127.0.0.1:")


def test_template_table_on_moto_server(moto_server: EmbeddedMoto) -> None:
    client = _client(moto_server, "dynamodb")
    template = load_template()
    create_tables_from_template(client, template, "amsg-moto-server")
    create_tables_from_template(client, template, "amsg-moto-server")  # idempotent
    assert_table_matches_template(client, "amsg-moto-server", template)


def test_task_queue_from_template(moto_server: EmbeddedMoto) -> None:
    sqs = _client(moto_server, "sqs")
    queue = create_queue_from_template(sqs, load_template(), "amsg-moto-tasks")
    attributes = sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "720"
    redrive = json.loads(attributes["RedrivePolicy"])
    assert redrive["maxReceiveCount"] == 5
    assert redrive["deadLetterTargetArn"].endswith(":amsg-moto-tasks-dlq")
    assert queue.batch_size == 10  # the run_task event source's BatchSize
    assert queue.arn == attributes["QueueArn"]
