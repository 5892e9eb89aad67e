"""``python -m bench transport``: client CPU per DynamoDB request through the table's client, over the lean
transport (``amsg/adapters/dynamo/transport.py``) and over botocore's urllib3 session, alternating in one process.

Conditional ``UpdateItem`` requests with a 600-byte value and ``ReturnValues=ALL_NEW`` against DynamoDB Local
(the shape of a delivery's writes); each sample is ``AMSG_BENCH_TRANSPORT_REQUESTS`` (2,000) requests after 300
to warm up, ``AMSG_BENCH_TRANSPORT_ROUNDS`` (3) pairs. The figure is this process's CPU clock (user and system)
per request: the client's whole path (serialise, sign, send, parse), DynamoDB Local's own CPU left out.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from bench.ddb import dynamodb_local_table

TABLE = "bench-transport"
WARM_UP = 300


def _update(client: Any, i: int) -> None:
    client.update_item(
        TableName=TABLE,
        Key={"PK": {"S": f"u{i % 50}"}, "SK": {"S": "t"}},
        UpdateExpression="SET a = :a, v = :v",
        ConditionExpression="attribute_not_exists(v) OR v < :v",
        ExpressionAttributeValues={":a": {"S": "x" * 600}, ":v": {"N": str(i)}},
        ReturnValues="ALL_NEW",
    )


def run(requests: int, rounds: int) -> list[tuple[str, float, str]]:
    """(transport, CPU ms per request, load average) per sample, alternating."""
    from amsg.adapters.dynamo.table import DynamoTable
    from amsg.adapters.dynamo.transport import LeanSession

    samples: list[tuple[str, float, str]] = []
    with dynamodb_local_table(TABLE) as endpoint:
        client = DynamoTable(TABLE, endpoint_url=endpoint, region="us-east-1").wire
        lean = client._endpoint.http_session
        if not isinstance(lean, LeanSession):
            raise SystemExit("the table's client has no lean transport (AMSG_DYNAMO_TRANSPORT=botocore?)")
        sessions = {"lean": lean, "botocore": lean._fallback}
        i = 0
        for _ in range(rounds):
            for name in ("botocore", "lean"):
                client._endpoint.http_session = sessions[name]
                for _ in range(WARM_UP):
                    _update(client, i)
                    i += 1
                started = time.process_time()
                for _ in range(requests):
                    _update(client, i)
                    i += 1
                cpu_ms = (time.process_time() - started) * 1000 / requests
                samples.append((name, cpu_ms, Path("/proc/loadavg").read_text().split()[0]))
        client._endpoint.http_session = lean
    return samples


def main() -> None:
    requests = int(os.environ.get("AMSG_BENCH_TRANSPORT_REQUESTS", "2000"))
    rounds = int(os.environ.get("AMSG_BENCH_TRANSPORT_ROUNDS", "3"))
    print(f"== transport: client CPU per conditional UpdateItem on DynamoDB Local ({requests} per sample)")
    for name, cpu_ms, load in run(requests, rounds):
        print(f"  {name:<9} {cpu_ms:6.3f} ms per request   (load average {load})")
