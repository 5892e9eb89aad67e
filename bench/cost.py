"""What a delivered message costs: DynamoDB units split by table and index, requests, Lambda GB-s, SQS and API
Gateway requests, and dollars per million delivered messages from one price table (``PRICES``).

Each kind of task is scheduled through the real schedule route (in process) by 20 users, claimed by the real
tick and delivered by ``run_message`` in SQS batches of the template's ``BatchSize`` run together (what the
run_task handler does), on DynamoDB Local with ``ReturnConsumedCapacity: INDEXES`` (``bench.counting``). The
multi-tenant one-shot is seeded through the task store (its "schedule" is that store write: the subscription's
write included, no API request). Lambda
GB-s come from the wall times measured here (DynamoDB Local on a loaded 2-core VM answers slower than DynamoDB
in-region, so they are an upper bound) times the template's ``MemorySize``. SQS: one ``SendMessageBatch`` per
10 tasks, one receive and one delete per batch (the event source mapping's empty polls are a fixed cost per
queue, not per message). Web Push to the browsers' push services costs nothing.
"""

from __future__ import annotations

import os
from typing import Any

from bench import counting

# One price table: AWS list prices, us-east-1, on-demand, read 2026-12-04 (aws.amazon.com/<service>/pricing).
PRICES: dict[str, float] = {
    "dynamodb_write_unit": 0.625e-6,  # per write request unit
    "dynamodb_read_unit": 0.125e-6,  # per read request unit
    "dynamodb_gb_month": 0.25,  # storage, standard table class, per GB-month (first 25 GB free: not counted)
    "lambda_gb_s_arm64": 0.0000133334,  # per GB-s (the template's Architectures: arm64)
    "lambda_request": 0.20e-6,  # per invocation
    "sqs_request": 0.40e-6,  # standard queue, per request (64 KB chunk)
    "apigw_http_request": 1.00e-6,  # HTTP API, first 300 million a month
}
PRICES_REGION, PRICES_DATE = "us-east-1", "2026-12-04"


def template_memory_gb() -> dict[str, float]:
    """MemorySize of the functions on a delivery's path, from template.yaml (Globals as the default)."""
    from amsg_local.template import load_template

    template = load_template()
    default = int(template.get("Globals", {}).get("Function", {}).get("MemorySize", 128))
    resources = template.get("Resources", {})

    def memory(name: str) -> float:
        return int(resources.get(name, {}).get("Properties", {}).get("MemorySize", default)) / 1024

    return {
        "tick": memory("TickFunction"),
        "run_task": memory("RunTaskFunction"),
        "schedule": memory("ScheduleMessageFunction"),
    }


def dollars(result: dict[str, Any], memory: dict[str, float], batch_size: int) -> dict[str, float]:
    """Dollars per million delivered messages (one task each), by service, schedule request included."""
    writes = sum(result["billed"].values()) + sum(result.get("schedule_billed", {}).values())
    reads = result["units"].get("read", 0.0) + _reads(result.get("schedule_detail", {}))
    gb_s = (
        result["tick_s"] * memory["tick"]
        + result["run_s"] * memory["run_task"]
        + result.get("schedule_s", 0.0) * memory["schedule"]
    )
    million = 1e6
    return {
        "dynamodb writes": million * PRICES["dynamodb_write_unit"] * writes,
        "dynamodb reads": million * PRICES["dynamodb_read_unit"] * reads,
        "lambda": million * (gb_s * PRICES["lambda_gb_s_arm64"] + (1 + 1 / batch_size) * PRICES["lambda_request"]),
        "sqs": million * PRICES["sqs_request"] * sqs_requests(batch_size),
        "api gateway": million * PRICES["apigw_http_request"],
    }


def sqs_requests(batch_size: int) -> float:
    """Per delivered task: a tenth of a SendMessageBatch, one receive and one delete per batch of records."""
    return 0.1 + 2 / batch_size


def _reads(detail: dict[str, float]) -> float:
    return sum(n for key, n in detail.items() if key.startswith("read "))


def _split(detail: dict[str, float], prefix: str = "") -> str:
    """``table 4.0, gsi:due 2.0 (by operation: ...)`` from "[kind ]<Operation> <target>" keys."""
    by_target: dict[str, float] = {}
    by_op: dict[str, float] = {}
    for key, n in detail.items():
        if prefix and not key.startswith(prefix):
            continue
        op, target = key.removeprefix(prefix).split(" ", 1)
        by_target[target] = by_target.get(target, 0.0) + n
        by_op[op] = by_op.get(op, 0.0) + n
    targets = ", ".join(f"{k} {v:.2f}" for k, v in sorted(by_target.items()) if v)
    ops = ", ".join(f"{k} {v:.2f}" for k, v in sorted(by_op.items()) if v)
    return f"{sum(by_target.values()):6.2f} ({targets}; by operation: {ops})"


def multi_tenant(endpoint: str, batch_size: int) -> dict[str, Any]:
    """The one-shot journey of two tenants (10 users each), seeded through the task store."""
    from bench import tenants
    from bench.requests import deliver
    from tests.support.ddb_engine import MemoryQueue, RecordingPushSender, with_fakes

    table = "bench-cost-multi"
    tenants._create_table(endpoint, table)
    ctx, scopes = tenants._multi_context(endpoint, table, ["tenant-a", "tenant-b"])
    queue = MemoryQueue()
    with_fakes(ctx, RecordingPushSender(), queue)
    counting.reset()
    for scope in scopes.values():
        tenants._seed(scope, 10, tenants.T0_MS + 1_000, users=10, workers=1)
    with counting._lock:
        seeded = {k: n / 20 for k, n in counting.unit_detail.items()}
    billed = {k: n / 20 for k, n in counting.billed().items()}
    ctx.clock.current_ms = tenants.T0_MS + 61_000
    return {**deliver(ctx, queue, batch_size, tenant_keys=True), "schedule_detail": seeded, "schedule_billed": billed}


def storage(endpoint: str, table: str, schema: Any) -> dict[str, tuple[int, float, float]]:
    """Per kind of item left in the table: (count, mean item bytes, mean bytes of its index entries), as DynamoDB
    sizes them for storage (each index entry: its projected attributes and keys + 100 bytes)."""
    import boto3

    from bench import units

    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
    found: dict[str, list[tuple[int, int]]] = {}
    for page in client.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            plain = {k: _plain(v) for k, v in item.items()}
            kind = _kind(plain["SK"], plain["PK"])
            indexed = sum(
                units.item_size(entry) + 100
                for name in schema.indexes
                if (entry := schema.entry(name, plain)) is not None
            )
            found.setdefault(kind, []).append((units.item_size(plain), indexed))
    return {k: (len(v), sum(a for a, _ in v) / len(v), sum(b for _, b in v) / len(v)) for k, v in found.items()}


def _plain(value: dict[str, Any]) -> dict[str, Any]:
    """A scanned attribute in the meter's wire form (binary values as bytes)."""
    ((kind, v),) = value.items()
    return {kind: v}


def _kind(sk: dict[str, Any], pk: dict[str, Any]) -> str:
    text = str(next(iter(sk.values())))
    if text == "#":
        return f"uuid registry ({str(next(iter(pk.values()))).split('#')[0]}#)"
    for prefix, label in (("T#", "task"), ("O#", "outbox row"), ("SEQ#", "counter"), ("PUSH", "subscription")):
        if text.startswith(prefix):
            return label
    return text.split("#")[0] or text


def report(name: str, result: dict[str, Any], memory: dict[str, float], batch_size: int) -> float:
    units = result["units"]
    requests = sum(result["deliver"].values())
    cost = dollars(result, memory, batch_size)
    total = sum(cost.values())
    gb_s = result["tick_s"] * memory["tick"] + result["run_s"] * memory["run_task"]
    print(
        f"  {name} [{result['delivered']} delivered]: {requests:.2f} DynamoDB requests, {gb_s * 1000:.1f} GB-ms"
        f" of Lambda per task (DynamoDB Local reports {units.get('write', 0.0):.2f} write units)"
    )
    print(f"    deliver  write {_split(result['billed'])}")
    print(f"             read  {_split(result['deliver_detail'], 'read ')}")
    print(f"    schedule write {_split(result.get('schedule_billed', {}))}")
    print(f"             read  {_split(result.get('schedule_detail', {}), 'read ')}")
    parts = ", ".join(f"{k} {v:.2f}" for k, v in cost.items())
    print(f"    $ per million delivered messages: {total:.2f}  ({parts})")
    return total


def main() -> None:
    counting.install()
    from amsg_local.tables import table_definition
    from amsg_local.template import load_template

    from bench import units
    from bench.capacity import template_defaults
    from bench.ddb import dynamodb_local_table
    from bench.requests import USERS, measure

    batch_size = template_defaults()["batch_size"]
    memory = template_memory_gb()
    print(f"== what a delivered message costs (DynamoDB Local, {USERS} users per kind, SQS batches of {batch_size})")
    print(f"  prices: {PRICES_REGION} on-demand list prices of {PRICES_DATE}: {PRICES}")
    with open("/proc/loadavg") as load:
        print(f"  memory (template): {memory}; load average {load.read().split()[:3]}")
    with dynamodb_local_table("bench-cost") as endpoint:
        counting.meter = units.Meter(endpoint, units.Schema(table_definition(load_template())))
        results = measure("bench-cost", endpoint, batch_size)
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        results["multi-tenant one-shot"] = multi_tenant(endpoint, batch_size)
        counting.meter = None
        stored = storage(endpoint, "bench-cost", units.Schema(table_definition(load_template())))
    for name, result in results.items():
        report(name, result, memory, batch_size)
    print("  storage left by the runs above (recurring tasks stay pending; one-shots are deleted when delivered):")
    for kind, (count, item, indexed) in sorted(stored.items()):
        print(f"    {kind:28s} {count:4d} items, {item:6.0f} bytes each + {indexed:5.0f} bytes of index entries")
