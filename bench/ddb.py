"""DynamoDB Local for a benchmark: started, given the template's table, stopped by PID afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def dynamodb_local_server(name: str) -> Iterator[Any]:
    """Yields a fresh DynamoDB Local (``endpoint_url``, ``pid``) holding the template's table ``name``."""
    import boto3
    from amsg_local.dynamodb_local import start_dynamodb_local
    from amsg_local.tables import create_tables_from_template
    from amsg_local.template import load_template

    server = start_dynamodb_local()
    try:
        client = boto3.client(
            "dynamodb",
            endpoint_url=server.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        create_tables_from_template(client, load_template(), name)
        yield server
    finally:
        server.stop()


@contextmanager
def dynamodb_local_table(name: str) -> Iterator[str]:
    """Yields the endpoint URL of a fresh DynamoDB Local holding the template's table ``name``."""
    with dynamodb_local_server(name) as server:
        yield server.endpoint_url
