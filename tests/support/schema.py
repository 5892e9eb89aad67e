"""Compare a described DynamoDB table with template.yaml (used on moto and on DynamoDB Local)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amsg_local.template import table_definition, table_ttl_attribute


def _keys(schema: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [(k["AttributeName"], k["KeyType"]) for k in schema]


def _projection(projection: Mapping[str, Any]) -> tuple[str, frozenset[str]]:
    return projection["ProjectionType"], frozenset(projection.get("NonKeyAttributes", []))


def assert_table_matches_template(client: Any, table_name: str, template: Mapping[str, Any]) -> None:
    """Keys, every GSI and LSI (keys + projection), billing and TTL equal the template's declaration."""
    expected = table_definition(template)
    table = client.describe_table(TableName=table_name)["Table"]
    assert table["TableStatus"] == "ACTIVE"
    assert _keys(table["KeySchema"]) == _keys(expected["KeySchema"])
    for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        want = {i["IndexName"]: (_keys(i["KeySchema"]), _projection(i["Projection"])) for i in expected.get(kind, [])}
        got = {i["IndexName"]: (_keys(i["KeySchema"]), _projection(i["Projection"])) for i in table.get(kind, [])}
        assert got == want, kind
    for index in table.get("GlobalSecondaryIndexes", []):
        assert index.get("IndexStatus", "ACTIVE") == "ACTIVE"
    billing = table.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED")
    assert billing == expected["BillingMode"]
    ttl = client.describe_time_to_live(TableName=table_name)["TimeToLiveDescription"]
    expected_ttl = table_ttl_attribute(template)
    if expected_ttl:
        assert ttl["TimeToLiveStatus"] == "ENABLED"
        assert ttl["AttributeName"] == expected_ttl
