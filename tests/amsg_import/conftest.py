"""The import tests run against DynamoDB Local (one JVM per session; see tests/support/ddb_local.py)."""

from tests.support.ddb_local import (  # noqa: F401
    ddb_local_client,
    ddb_local_endpoint,
    ddb_local_server,
    ddb_local_table,
)
