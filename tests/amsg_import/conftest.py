"""The import tests run against DynamoDB Local (one JVM per session; see tests/support/ddb_local.py)."""

from tests.support.ddb_local import ddb_local_client, ddb_local_endpoint, ddb_local_table  # noqa: F401
