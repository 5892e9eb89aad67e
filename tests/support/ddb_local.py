"""Session fixture: one DynamoDB Local for the whole test session, on 127.0.0.1, stopped by PID.

Use it from a conftest or test module::

    from tests.support.ddb_local import ddb_local_endpoint  # noqa: F401  (registers the fixture)

    def test_x(ddb_local_endpoint): client = boto3.client("dynamodb", endpoint_url=ddb_local_endpoint, ...)

(or ``pytest_plugins = ["tests.support.ddb_local"]`` in the top-level tests/conftest.py).

Java or the unpacked jar missing → the tests are skipped locally with the fix in the message, but FAIL when
``CI`` is set: CI must install it (``scripts/install-dynamodb-local``), never silently skip the race tests.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from amsg_local.dynamodb_local import DynamoDBLocal, DynamoDBLocalUnavailable, start_dynamodb_local


def _unavailable(reason: str) -> None:
    message = f"DynamoDB Local unavailable: {reason} (scripts/install-dynamodb-local fetches it; it needs java)"
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def ddb_local_server() -> Iterator[DynamoDBLocal]:
    """The session's DynamoDB Local (-inMemory -sharedDb -disableTelemetry; own network namespace as root)."""
    try:
        server = start_dynamodb_local()
    except DynamoDBLocalUnavailable as exc:
        _unavailable(str(exc))
        return
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def ddb_local_endpoint(ddb_local_server: DynamoDBLocal) -> str:
    """``http://127.0.0.1:<port>`` of the session's DynamoDB Local."""
    return ddb_local_server.endpoint_url


@pytest.fixture
def ddb_local_client(ddb_local_endpoint: str) -> Any:
    """A low-level DynamoDB client for DynamoDB Local (dummy credentials; -sharedDb ignores them)."""
    import boto3

    return boto3.client(
        "dynamodb",
        endpoint_url=ddb_local_endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


@pytest.fixture
def ddb_local_table(ddb_local_client: Any) -> Iterator[str]:
    """A fresh table built from template.yaml on DynamoDB Local (unique name; deleted afterwards)."""
    from amsg_local.tables import create_tables_from_template
    from amsg_local.template import load_template

    name = f"amsg-test-{uuid.uuid4().hex[:12]}"
    create_tables_from_template(ddb_local_client, load_template(), name)
    try:
        yield name
    finally:
        ddb_local_client.delete_table(TableName=name)
