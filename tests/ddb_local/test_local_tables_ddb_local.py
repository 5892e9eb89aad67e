"""The table built from template.yaml on DynamoDB Local has every index and TTL; the local stack runs on it."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from amsg_local.cli import start_local_stack
from amsg_local.tables import create_tables_from_template
from amsg_local.template import load_template

from tests.support.schema import assert_table_matches_template
from tests.support.tiny_stack import write_tiny_project

pytestmark = pytest.mark.ddb_local


def test_template_table_on_ddb_local(ddb_local_client: Any, ddb_local_table: str) -> None:
    assert_table_matches_template(ddb_local_client, ddb_local_table, load_template())


def test_create_is_idempotent(ddb_local_client: Any, ddb_local_table: str) -> None:
    again = create_tables_from_template(ddb_local_client, load_template(), ddb_local_table)
    assert again["TableName"] == ddb_local_table


def test_ddb_local_rejects_what_aws_rejects(ddb_local_client: Any) -> None:
    # moto accepts one-character table names; DynamoDB Local (like AWS) does not
    with pytest.raises(Exception, match=r"(?i)table ?name|length|validation"):
        create_tables_from_template(ddb_local_client, load_template(), "x")


def test_local_stack_on_ddb_local(ddb_local_endpoint: str, tmp_path: Path) -> None:
    saved = list(sys.path)
    try:
        template = write_tiny_project(tmp_path)
        with start_local_stack(
            template_path=template, dynamodb_endpoint=ddb_local_endpoint, table_name="tiny-ddb"
        ) as s:
            assert s.dynamodb_endpoint == ddb_local_endpoint
            with urllib.request.urlopen(f"{s.base_url}/echo", timeout=10) as response:
                assert json.loads(response.read())["event"]["routeKey"] == "GET /echo"
            described = s.client("dynamodb").describe_table(TableName="tiny-ddb")["Table"]
            assert [i["IndexName"] for i in described["GlobalSecondaryIndexes"]] == ["gsi_one"]
            s.client("dynamodb").delete_table(TableName="tiny-ddb")
    finally:
        sys.path[:] = saved
