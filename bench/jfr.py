"""Where DynamoDB Local's CPU goes in a run: a Java Flight Recording of its JVM, read back over the run's window
as shares of its sampled Java stacks (``AMSG_BENCH_JFR=<file>`` with ``bench capacity``; docs/performance.md,
"Where DynamoDB Local's CPU goes"). Needs the JDK's ``jfr``; off by default. The recording runs from the JVM's
start (attaching one later with ``jcmd`` doubled the JVM's CPU for the rest of the run); it still costs
DynamoDB Local 5-12 % more CPU, so a run that records is not one to quote for time.

Each sample goes to the first part of :data:`PARTS` that one of its frames names, so a parse of the table's
description inside an item write counts as the parse, not as the write. The JIT compiler and the collector run
outside Java and are not sampled.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Markers are frame names of the jar scripts/install-dynamodb-local pins; ``SQLiteDBAccess$25`` is the job that
# ``SQLiteDBAccess.getTableInfo`` runs there (an anonymous class: a newer jar may number it differently).
PARTS: tuple[tuple[str, str], ...] = (
    ("the table's description parsed (getTableInfo, getTableSchemaInfo2)", "SQLiteDBAccess$25.doWork"),
    ("the table's description parsed (getTableInfo, getTableSchemaInfo2)", "getTableSchemaInfo2"),
    ("item rows read and written in SQLite (its Java side)", "SQLiteDBAccess"),
    ("transactions: expressions, checks, the idempotency signature", "TransactWriteItemsFunction"),
    ("PartiQL statements: parsed and translated", "BatchExecuteStatementFunction"),
    ("reads: BatchGetItem, GetItem, Query", "BatchGetItemFunction"),
    ("reads: BatchGetItem, GetItem, Query", "GetItemFunction"),
    ("reads: BatchGetItem, GetItem, Query", "QueryFunction"),
    ("single writes: UpdateItem, PutItem, DeleteItem", "ItemFunction"),
    ("requests and answers as JSON, HTTP", "LocalDynamoDBServerHandler"),
    ("requests and answers as JSON, HTTP", "org.eclipse.jetty"),
)


def available() -> bool:
    return shutil.which("jfr") is not None


def recording_option(path: Path) -> str:
    """The JVM option that records from its start to its exit (the JDK's ``profile`` settings: a Java stack
    sample every 10 ms of each running thread)."""
    return f"-XX:StartFlightRecording=filename={path},settings=profile,dumponexit=true"


def shares(path: Path, window: tuple[float, float]) -> tuple[int, list[tuple[str, int]]]:
    """The recording's Java samples inside ``window`` (epoch seconds), and how many fell in each part (most
    first; the rest as "other")."""
    printed = subprocess.run(
        ["jfr", "print", "--json", "--stack-depth", "256", "--events", "jdk.ExecutionSample", str(path)],
        check=True,
        capture_output=True,
        timeout=600,
    ).stdout
    since, until = window
    events = [e for e in json.loads(printed)["recording"]["events"] if since <= _epoch_s(e) <= until]
    return len(events), count_parts(events).most_common()


def _epoch_s(event: dict[str, Any]) -> float:
    """An event's start (``2026-12-06T03:09:18.482482697Z``: nanoseconds, which ``datetime`` does not read)."""
    stamp = event["values"]["startTime"]
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp() + float(f"0.{fraction or 0}")


def count_parts(events: list[dict[str, Any]]) -> Counter[str]:
    """The samples (``jfr print --json`` events) per part."""
    counts: Counter[str] = Counter()
    for event in events:
        frames = (event["values"].get("stackTrace") or {}).get("frames") or []
        counts[_part([f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}" for f in frames])] += 1
    return counts


def _part(names: list[str]) -> str:
    for part, marker in PARTS:
        if any(marker in name for name in names):
            return part
    return "other"


def report(path: Path, window: tuple[float, float]) -> list[str]:
    total, parts = shares(path, window)
    lines = [f"  DynamoDB Local's Java samples from due to the last push: {total} (recording {path})"]
    lines += [f"    {100 * n / max(1, total):5.1f} %  {part}" for part, n in parts]
    return lines
