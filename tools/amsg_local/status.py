"""``amsg status``: is the stack healthy? The operator's view of the local stack or of a deployed one.

One screen (or ``--json`` for scripts): when the tick last ran and what it did, the due backlog per shard (per
tenant on the multi-tenant line), how overdue the oldest due task is, the lateness p99 over the last hour, the
dead-letter queue's depth, the cleanup operations and tenant deletions in progress. What it reads and how:
:mod:`amsg_local.status_probe`.

* the local stack (default): the running ``amsg local`` at ``--stack-url`` says where its data is
  (``GET /_local/environment``, no secret) and what its last tick did; "now" is the stack's clock;
* a deployed stack: ``--stack NAME`` (``--region``, AWS credentials from the environment) reads the stack's
  outputs and parameters, then its table, its dead-letter queue and its CloudWatch metrics (the tick's counts,
  ``DeliveryLatency``).

Exit status: 0 when it could read the stack, 2 when it cannot be reached (the message says why).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from amsg_local.stack_info import DEFAULT_STACK_URL, StackUnreachable, fetch

__all__ = ["Target", "add_parser", "gather", "local_target", "main", "render"]

_LOCAL_KEYS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


@dataclass
class Target:
    """Where one stack keeps what ``amsg status`` reads."""

    kind: str  # "local" | "aws"
    name: str
    table_name: str
    region: str
    dynamodb_endpoint: str | None = None
    sqs_endpoint: str | None = None
    dead_letter_url: str | None = None
    due_shards: int = 1
    multi_tenant: bool = False
    clock_offset_ms: int = 0
    last_tick: dict[str, Any] | None = None  # local: the stack's own record of its last tick
    credentials: dict[str, str] = field(default_factory=dict)

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.clock_offset_ms

    def client(self, service: str, endpoint: str | None = None) -> Any:
        import boto3

        return boto3.client(service, region_name=self.region, endpoint_url=endpoint, **self.credentials)


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "status",
        help="the stack's health: last tick, due backlog, lateness p99, DLQ, cleanups and tenant deletions",
    )
    parser.add_argument("--stack-url", default=None, help=f"the running `amsg local` (default {DEFAULT_STACK_URL})")
    parser.add_argument("--stack", default=None, help="a deployed stack's name (reads AWS; credentials from env)")
    parser.add_argument("--region", default=None, help="the deployed stack's region (default: the environment's)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")


def main(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        target = aws_target(args.stack, args.region) if args.stack else local_target(args.stack_url)
        report = gather(target)
    except StackUnreachable as exc:
        print(f"amsg status: {exc}", file=sys.stderr)
        return 2
    except (BotoCoreError, ClientError) as exc:
        print(f"amsg status: cannot read the stack: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        render(report, sys.stdout)
    return 0


def local_target(stack_url: str | None) -> Target:
    """The running local stack, as ``GET /_local/environment`` describes it."""
    url = stack_url or os.environ.get("AMSG_STACK_URL") or DEFAULT_STACK_URL
    answer = fetch(url)
    env: Mapping[str, str] = answer["environment"]
    return Target(
        kind="local",
        name=url,
        table_name=env.get("AMSG_TABLE_NAME", "amsg-local"),
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        dynamodb_endpoint=env.get("AWS_ENDPOINT_URL_DYNAMODB"),
        sqs_endpoint=env.get("AWS_ENDPOINT_URL_SQS"),
        dead_letter_url=answer.get("deadLetterQueueUrl"),
        due_shards=int(env.get("AMSG_DUE_SHARDS") or 1),
        multi_tenant=env.get("AMSG_TENANCY", "").strip().lower() == "multi",
        clock_offset_ms=int(answer.get("clockOffsetMs") or 0),
        last_tick=_local_tick(answer.get("lastTick")),
        # local endpoints take any key; a stack whose DynamoDB is AWS itself (--dynamodb-endpoint aws) uses yours
        credentials=_LOCAL_KEYS if env.get("AWS_ENDPOINT_URL_DYNAMODB") else {},
    )


def _local_tick(record: Any) -> dict[str, Any] | None:
    """The stack's record of its last tick, in the shape the CloudWatch reading has (plus what drained)."""
    if not isinstance(record, dict):
        return None
    if "error" in record:
        return {"atMs": record["atMs"], "error": record["error"]}
    summary = record.get("summary") or {}
    drained = summary.get("runTask") or {}
    # the tick's own summary, then its claim jobs' (claim fan-out: the claimers claim and enqueue), summed as the
    # metrics of both add up on AWS
    parts = [(summary.get("tick") or {}).get("result") or {}]
    parts += [
        r.get("summary") or {} for r in (drained.get("claimer") or {}).get("results") or [] if isinstance(r, dict)
    ]
    counts = dict.fromkeys(("dueTasks", "claimedTasks", "enqueuedTasks", "claimSkippedTasks", "enqueueFailedTasks"), 0)
    for part in parts:
        details = part.get("details") or {}
        for name in counts:
            counts[name] += int(part.get(name, details.get(name, 0)) or 0)
    return {
        "atMs": record["atMs"],
        "summary": {
            **counts,
            "runTaskRecords": drained.get("received", 0),
            "runTaskFailures": drained.get("failed", 0),
        },
    }


def aws_target(stack: str, region: str | None) -> Target:
    """A deployed stack, from its CloudFormation outputs and parameters."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        cfn = boto3.client("cloudformation", region_name=region)
        (described,) = cfn.describe_stacks(StackName=stack)["Stacks"]
    except (BotoCoreError, ClientError) as exc:
        message = f"cannot read the stack {stack}: {exc} (check --stack, --region and credentials)"
        raise StackUnreachable(message) from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p.get("ParameterValue", "") for p in described.get("Parameters", [])}
    if "TableName" not in outputs:
        raise StackUnreachable(f"the stack {stack} has no TableName output: not an amsg stack")
    return Target(
        kind="aws",
        name=stack,
        table_name=outputs["TableName"],
        region=cfn.meta.region_name,
        dead_letter_url=outputs.get("TaskDeadLetterQueueUrl"),
        due_shards=int(parameters.get("DueShardCount") or 1),
        multi_tenant=parameters.get("Tenancy", "single") == "multi",
    )


def gather(target: Target) -> dict[str, Any]:
    """The whole report as plain data (what ``--json`` prints)."""
    import boto3

    from amsg_local.status_probe import CloudWatchProbe, TableProbe, dead_letter_depth

    resource = boto3.resource(
        "dynamodb", region_name=target.region, endpoint_url=target.dynamodb_endpoint, **target.credentials
    )
    now_ms = target.now_ms()
    probe = TableProbe(resource.Table(target.table_name), now_ms, target.due_shards)
    try:
        spaces = _spaces(probe, target.multi_tenant)
        backlog = {label: probe.backlog(space) for label, space in spaces.items()}
    except Exception as exc:
        if target.kind == "local":
            raise StackUnreachable(f"the local stack's table cannot be read ({type(exc).__name__}): {exc}") from None
        raise
    oldest = [ms for ms in (probe.oldest_due_ms(space) for space in spaces.values()) if ms is not None]
    cleanups = {label: probe.cleanups(space) for label, space in spaces.items()}
    if target.kind == "local":
        last_tick = target.last_tick
        lateness, deliveries = probe.local_lateness()
    else:
        metrics = CloudWatchProbe(target.client("cloudwatch"), target.name)
        last_tick = metrics.last_tick()
        lateness, deliveries = metrics.lateness()
    dead_letters = (
        dead_letter_depth(target.client("sqs", target.sqs_endpoint), target.dead_letter_url)
        if target.dead_letter_url
        else None
    )
    return {
        "stack": {"kind": target.kind, "name": target.name, "table": target.table_name},
        "now": _iso(now_ms),
        "lastTick": _with_age(last_tick, now_ms - target.clock_offset_ms),
        "dueBacklog": backlog if target.multi_tenant else backlog[""],
        "dueTasks": sum(sum(shards.values()) for shards in backlog.values()),
        "oldestDueAgeSeconds": round((now_ms - min(oldest)) / 1000, 1) if oldest else None,
        "latenessP99Ms": lateness,
        "deliveriesLastHour": deliveries,
        "latenessSource": "outbox rows" if target.kind == "local" else "DeliveryLatency metric",
        "deadLetterMessages": dead_letters,
        "cleanupOperations": sum(cleanups.values()),
        "cleanupOperationsBy": {k: v for k, v in cleanups.items() if v} if target.multi_tenant else None,
        "tenantDeletions": probe.tenant_deletions() if target.multi_tenant else [],
    }


def _spaces(probe: Any, multi_tenant: bool) -> dict[str, Any]:
    """The key spaces to read: the single line's, or every registered tenant's (labelled by tenant id)."""
    from amsg.adapters.dynamo.keys import KeySpace

    if not multi_tenant:
        return {"": KeySpace()}
    return {row["tenantId"]: KeySpace(row["tenantId"]) for row in probe.tenants()}


def _with_age(last_tick: dict[str, Any] | None, wall_now_ms: int) -> dict[str, Any] | None:
    if last_tick is None:
        return None
    at_ms = int(last_tick["atMs"])
    rest = {k: v for k, v in last_tick.items() if k != "atMs"}
    return {"at": _iso(at_ms), "ageSeconds": round(max(0, wall_now_ms - at_ms) / 1000, 1), **rest}


def _iso(ms: int) -> str:
    from amsg.timeutil import iso_from_ms

    return iso_from_ms(ms)


# --------------------------------------------------------------------------------------------- the screen


def render(report: Mapping[str, Any], out: TextIO) -> None:
    """The report for a person: one line per question."""
    stack = report["stack"]
    where = "local stack" if stack["kind"] == "local" else "stack"
    lines = [f"amsg status: {where} {stack['name']} (table {stack['table']}), now {report['now']}"]
    lines.append(f"  last tick         {_tick_line(report['lastTick'])}")
    lines += _backlog_lines(report["dueBacklog"], report["dueTasks"])
    age = report["oldestDueAgeSeconds"]
    lines.append(f"  oldest due task   {'none' if age is None else f'{_duration(age)} overdue'}")
    p99 = report["latenessP99Ms"]
    count = report["deliveriesLastHour"]
    lateness = "no deliveries" if p99 is None else f"{_duration(p99 / 1000)} ({count} deliveries)"
    lines.append(f"  lateness p99 1h   {lateness}; from the {report['latenessSource']}")
    dlq = report["deadLetterMessages"]
    lines.append(f"  dead letters      {'unknown (no dead-letter queue)' if dlq is None else dlq}")
    lines.append(f"  cleanups running  {report['cleanupOperations']}")
    deletions = report["tenantDeletions"]
    if deletions:
        names = ", ".join(f"{d['tenantId']} ({d['itemsDeleted']} items removed)" for d in deletions)
        lines.append(f"  tenant deletions  {len(deletions)}: {names}")
    else:
        lines.append("  tenant deletions  none")
    out.write("\n".join(lines) + "\n")


def _tick_line(tick: Mapping[str, Any] | None) -> str:
    if tick is None:
        return "none yet (the local stack ticks every TICK seconds; on AWS, none in the last hour)"
    when = f"{tick['at']} ({_duration(tick['ageSeconds'])} ago)"
    if "error" in tick:
        return f"{when}: failed ({tick['error']})"
    summary = tick["summary"]
    counts = ", ".join(
        f"{label} {summary[key]}"
        for key, label in (("dueTasks", "due"), ("claimedTasks", "claimed"), ("enqueuedTasks", "enqueued"))
    )
    extra = [f"{label} {summary[key]}" for key, label in _TICK_EXTRAS if summary.get(key)]
    return f"{when}: {counts}" + (f" ({', '.join(extra)})" if extra else "")


_TICK_EXTRAS = (
    ("claimSkippedTasks", "claims skipped"),
    ("enqueueFailedTasks", "enqueue failures"),
    ("runTaskFailures", "run_task failures"),
)


def _backlog_lines(backlog: Mapping[str, Any], total: int) -> list[str]:
    first = f"  due backlog       {total} task{'s' if total != 1 else ''}"
    if not backlog or all(isinstance(v, int) for v in backlog.values()):
        shards = ", ".join(f"shard {shard}: {count}" for shard, count in backlog.items())
        return [f"{first} ({shards})"]
    lines = [f"{first} across {len(backlog)} tenants"]
    for tenant, shards in backlog.items():
        count = sum(shards.values())
        if count:
            per_shard = ", ".join(f"shard {shard}: {n}" for shard, n in shards.items())
            lines.append(f"    {tenant}  {count} ({per_shard})")
    return lines


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
