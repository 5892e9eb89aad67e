"""What ``amsg status`` reads: the table's indexes, the dead-letter queue and, on AWS, CloudWatch.

Every read is bounded and never touches a payload: due counts are ``Select=COUNT`` queries of the ``due``
index partitions (per tenant on the multi-tenant line), the oldest due task is the first key of each, cleanup
operations in progress are the ``work`` index's partition, tenant deletions the ``TENANT_PURGE`` records
(docs/data-model.md). Lateness: on AWS the ``DeliveryLatency`` metric's p99 (what ``DeliveryLatencyAlarm``
reads); locally, where metrics are off, the outbox rows delivered in the last hour (an occurrence's last
``delivered_at`` minus the occurrence time its message id carries; a delivery-policy deferral counts as
lateness there, which the metric leaves out).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from amsg.adapters.dynamo.keys import OUTBOX_PREFIX, KeySpace, due_window_end
from amsg.adapters.dynamo.tenant_purge import PURGE_PK
from amsg.adapters.dynamo.tenants import REGISTRY_PK
from amsg.timeutil import iso_from_ms, parse_iso_ms

__all__ = ["HOUR_MS", "CloudWatchProbe", "TableProbe", "dead_letter_depth", "p99"]

HOUR_MS = 3_600_000
_MESSAGE_PREFIX = OUTBOX_PREFIX + "msg_task_"
# the tick's metrics (functions/tick) and the summary field each one counts
TICK_METRICS = {
    "TasksDue": "dueTasks",
    "TasksClaimed": "claimedTasks",
    "TasksEnqueued": "enqueuedTasks",
    "ClaimsSkipped": "claimSkippedTasks",
    "EnqueueFailures": "enqueueFailedTasks",
}


def p99(values: list[int]) -> int | None:
    """Nearest-rank 99th percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class TableProbe:
    """Reads of one deployment's table (a boto3 ``Table``) at the deployment's ``now_ms``."""

    def __init__(self, table: Any, now_ms: int, due_shards: int) -> None:
        self.table = table
        self.now_ms = now_ms
        self.due_shards = max(1, due_shards)

    def _pages(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        while True:
            page = self.table.query(**kwargs)
            yield page
            if not page.get("LastEvaluatedKey"):
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def tenants(self) -> list[dict[str, str]]:
        """The registry's tenants (id and status only)."""
        rows: list[dict[str, str]] = []
        for page in self._pages(
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": REGISTRY_PK},
            ProjectionExpression="SK, #s",
            ExpressionAttributeNames={"#s": "status"},
        ):
            rows += [{"tenantId": str(item["SK"]), "status": str(item.get("status", ""))} for item in page["Items"]]
        return rows

    def backlog(self, space: KeySpace) -> dict[str, int]:
        """Due tasks (eligible at or before now) per shard of one key space."""
        window = due_window_end(iso_from_ms(self.now_ms))
        counts: dict[str, int] = {}
        for shard in range(self.due_shards):
            values = {":pk": space.due_shard_pk(shard), ":end": window}
            counts[str(shard)] = sum(
                int(page.get("Count", 0))
                for page in self._pages(
                    IndexName="due",
                    KeyConditionExpression="due_pk = :pk AND due_sk <= :end",
                    ExpressionAttributeValues=values,
                    Select="COUNT",
                )
            )
        return counts

    def oldest_due_ms(self, space: KeySpace) -> int | None:
        """The eligible time of the oldest due task of one key space (its first ``due`` key), or None."""
        window = due_window_end(iso_from_ms(self.now_ms))
        oldest: int | None = None
        for shard in range(self.due_shards):
            page = self.table.query(
                IndexName="due",
                KeyConditionExpression="due_pk = :pk AND due_sk <= :end",
                ExpressionAttributeValues={":pk": space.due_shard_pk(shard), ":end": window},
                Limit=1,
            )
            for item in page.get("Items", []):
                eligible = parse_iso_ms(str(item["due_sk"]).split("#", 1)[0])
                if eligible is not None and (oldest is None or eligible < oldest):
                    oldest = eligible
        return oldest

    def cleanups(self, space: KeySpace) -> int:
        """Cloud-data cleanup operations not finished (the ``work`` index's partition)."""
        return sum(
            int(page.get("Count", 0))
            for page in self._pages(
                IndexName="work",
                KeyConditionExpression="work_pk = :pk",
                ExpressionAttributeValues={":pk": space.work_pk("operation")},
                Select="COUNT",
            )
        )

    def tenant_deletions(self) -> list[dict[str, Any]]:
        """Tenant deletions in progress: who, since when, items removed so far."""
        rows: list[dict[str, Any]] = []
        for page in self._pages(KeyConditionExpression="PK = :pk", ExpressionAttributeValues={":pk": PURGE_PK}):
            for item in page["Items"]:
                started = int(item.get("started_at", 0))
                rows.append(
                    {
                        "tenantId": str(item["SK"]),
                        "startedAt": iso_from_ms(started) if started else None,
                        "itemsDeleted": int(item.get("deleted", 0)),
                    }
                )
        return rows

    def local_lateness(self) -> tuple[int | None, int]:
        """``(p99 ms, deliveries)`` over the last hour from the delivered outbox rows (a Scan: local use only)."""
        since = self.now_ms - HOUR_MS
        last: dict[tuple[str, str], tuple[int, int]] = {}
        for item in self._scan_outbox(since):
            sk = str(item["SK"])
            occurrence_part = sk[len(_MESSAGE_PREFIX) :].rsplit("_", 1)[0]
            if "@" not in occurrence_part:
                continue  # an instant message has no occurrence time
            try:
                occurrence_ms = int(occurrence_part.split("@", 1)[1])
            except ValueError:
                continue
            key = (str(item["PK"]), occurrence_part)
            delivered = int(item["delivered_at"])
            previous = last.get(key)
            last[key] = (occurrence_ms, max(delivered, previous[1] if previous else delivered))
        latencies = [max(0, delivered - occurrence) for occurrence, delivered in last.values()]
        return p99(latencies), len(latencies)

    def _scan_outbox(self, since_ms: int) -> Iterable[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "FilterExpression": "begins_with(SK, :prefix) AND delivered_at >= :since",
            "ExpressionAttributeValues": {":prefix": _MESSAGE_PREFIX, ":since": since_ms},
            "ProjectionExpression": "PK, SK, delivered_at",
        }
        while True:
            page = self.table.scan(**kwargs)
            yield from page.get("Items", [])
            if not page.get("LastEvaluatedKey"):
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def dead_letter_depth(sqs: Any, url: str) -> int:
    """Messages in the dead-letter queue (visible and in flight)."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return sum(int(attributes.get(name, 0)) for name in names)


class CloudWatchProbe:
    """The deployed stack's metrics (namespace ``amsg``, dimension ``service`` = the stack's name)."""

    def __init__(self, cloudwatch: Any, service: str, now: datetime | None = None) -> None:
        self.cw = cloudwatch
        self.service = service
        self.now = now or datetime.now(UTC)

    def _dimensions(self) -> list[dict[str, str]]:
        return [{"Name": "service", "Value": self.service}]

    def last_tick(self) -> dict[str, Any] | None:
        """The latest minute the tick reported, with its counts (None when it reported nothing this hour)."""
        start = self.now - timedelta(hours=1)
        queries = [
            {
                "Id": f"m{i}",
                "Label": metric,
                "MetricStat": {
                    "Metric": {"Namespace": "amsg", "MetricName": metric, "Dimensions": self._dimensions()},
                    "Period": 60,
                    "Stat": "Sum",
                },
            }
            for i, metric in enumerate(TICK_METRICS)
        ]
        answer = self.cw.get_metric_data(
            MetricDataQueries=queries, StartTime=start, EndTime=self.now, ScanBy="TimestampDescending"
        )
        results = answer["MetricDataResults"]
        series = {r["Label"]: dict(zip(r["Timestamps"], r["Values"], strict=False)) for r in results}
        stamps = [stamp for values in series.values() for stamp in values]
        if not stamps:
            return None
        latest = max(stamps)
        summary = {field: int(series.get(metric, {}).get(latest, 0)) for metric, field in TICK_METRICS.items()}
        return {"atMs": int(latest.timestamp() * 1000), "summary": summary}

    def lateness(self) -> tuple[int | None, int]:
        """``(p99 ms, deliveries)`` of ``DeliveryLatency`` over the last hour."""
        answer = self.cw.get_metric_statistics(
            Namespace="amsg",
            MetricName="DeliveryLatency",
            Dimensions=self._dimensions(),
            StartTime=self.now - timedelta(hours=1),
            EndTime=self.now,
            Period=3600,
            Statistics=["SampleCount"],
            ExtendedStatistics=["p99"],
        )
        points = answer.get("Datapoints") or []
        if not points:
            return None, 0
        count = int(sum(point.get("SampleCount", 0) for point in points))
        values = [p["ExtendedStatistics"]["p99"] for p in points if "p99" in p.get("ExtendedStatistics", {})]
        return (int(max(values)) if values else None), count
