"""``amsg import`` on DynamoDB Local: rows per second and DynamoDB requests per row, for a first import and for
a re-run (which only skips), so an operator can estimate how long moving a reference deployment takes."""

from __future__ import annotations

import time
import uuid

from bench import counting


def main(users: int = 20, tasks_per_user: int = 15, outbox_per_user: int = 10, states_per_user: int = 10) -> None:
    counting.install()
    from amsg.adapters.dynamo.table import DynamoTable
    from amsg_import.command import run_import
    from amsg_import.sources import SqliteSource

    from bench.ddb import dynamodb_local_table
    from tests.support.reference_db import ReferenceDb

    master_key = "b" * 64
    now = 1_893_456_000_000
    db = ReferenceDb("cloud-data", master_key)
    for n in range(users):
        user = str(uuid.UUID(int=n + 1, version=4))
        db.add_subscription(user, {"endpoint": f"https://push.example.test/{n}", "keys": {}}, now)
        tasks = [
            db.add_task(user, next_send_ms=now + (i + 1) * 60_000, message=f"message {i}")
            for i in range(tasks_per_user)
        ]
        for i in range(outbox_per_user):
            db.add_outbox(user, tasks[i % len(tasks)], i, outbox_per_user, created_ms=now - 1_000)
        for i in range(states_per_user):
            db.add_state(user, "char:a", f"key-{i}", {"value": i, "text": "状态" * 20}, now - 1_000)

    with dynamodb_local_table("bench-import") as endpoint_url:
        table = DynamoTable("bench-import", endpoint_url=endpoint_url, region="us-east-1")
        print("== amsg import on DynamoDB Local")
        for label in ("first import", "re-run (skips)"):
            counting.reset()
            started = time.perf_counter()
            report = run_import(SqliteSource(db.conn, "bench"), master_key=master_key, table=table, now_ms=now)
            elapsed = time.perf_counter() - started
            totals = report.totals()
            requests = counting.dynamodb_total()
            print(
                f"  {label:<15} {totals['read']} rows ({totals['written']} written, {totals['skipped']} skipped) "
                f"in {elapsed:.2f} s: {totals['read'] / elapsed:7.1f} rows/s, "
                f"{requests / max(1, totals['read']):.2f} DynamoDB requests per row"
            )
