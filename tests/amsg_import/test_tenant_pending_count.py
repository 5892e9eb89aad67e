"""An imported tenant's pending-task count on moto (docs/import.md): the importer adds each pending task it
writes to the tenant's counter in the task's own transaction, so the count equals the tenant's pending tasks
after a first run, a re-run, and a re-run that carries a newer source row in (pending ↔ settled)."""

from __future__ import annotations

from pathlib import Path

import pytest
from amsg.adapters.dynamo import pending
from amsg.adapters.dynamo.keys import SINGLE, tenant_space
from amsg.adapters.dynamo.table import DynamoTable
from amsg.timeutil import iso_from_ms
from amsg_import.command import import_tenant
from amsg_import.sources import open_source
from amsg_import.tenant import open_tenant_config
from amsg_import.writer import TargetWriter

from tests.amsg_import.test_tenant_import import ALICE, BOB, KEK, MASTER, TENANT, _blob
from tests.conftest import T0_MS, TABLE
from tests.support.reference_db import ReferenceDb
from tests.support.tenancy import build_multi_stack

PENDING, SETTLED = 5, 3


@pytest.fixture
def stack(make_context):
    return build_multi_stack(make_context)


def _source(tmp_path: Path) -> tuple[ReferenceDb, str]:
    db = ReferenceDb("outbox", MASTER)
    for n in range(PENDING):
        db.add_task((ALICE, BOB)[n % 2], next_send_ms=T0_MS + 3_600_000 + n, message=f"p{n}")
    for n in range(SETTLED):
        db.add_task(BOB, next_send_ms=T0_MS - 3_600_000, message=f"s{n}", status=("sent", "failed")[n % 2])
    path = str(tmp_path / "tenant.sqlite")
    db.save(path)
    return db, path


def _import(stack, path: str, **kw):
    table = DynamoTable(TABLE, region="us-east-1")
    source = open_source(path)
    try:
        return import_tenant(
            open_tenant_config(_blob(), KEK, TENANT),
            source,
            target=(table, stack.ctx.tenant_registry, stack.ctx.key_wrapper),
            now_ms=T0_MS,
            **kw,
        )
    finally:
        source.close()


def _count() -> int:
    return pending.read(DynamoTable(TABLE, region="us-east-1"), tenant_space(TENANT))[0]


def _pending_items() -> int:
    table = DynamoTable(TABLE, region="us-east-1")
    items = table.table.scan(ConsistentRead=True)["Items"]
    return sum(
        1
        for i in items
        if i["PK"].startswith(f"N#{TENANT}#U#") and i["SK"].startswith("T#") and i.get("status") == "pending"
    )


def test_the_counter_holds_the_pending_tasks_the_import_wrote(stack, tmp_path):
    _, path = _source(tmp_path)
    report = _import(stack, path)
    assert report.failed == 0 and report.kinds["tasks"].written == PENDING + SETTLED
    assert _count() == _pending_items() == PENDING
    again = _import(stack, path, resume=True)  # nothing is written twice, nothing counted twice
    assert again.kinds["tasks"].written == 0
    assert _count() == PENDING


def test_a_newer_source_row_moves_the_count_with_its_status(stack, tmp_path):
    db, path = _source(tmp_path)
    _import(stack, path)
    later = iso_from_ms(T0_MS + 1)
    first_pending = db.tasks[0]
    db.conn.execute(
        "UPDATE scheduled_messages SET status = 'sent', updated_at = ? WHERE uuid = ?", (later, first_pending["uuid"])
    )
    for row in db.tasks[PENDING : PENDING + 2]:  # two settled rows become pending again in the source
        db.conn.execute(
            "UPDATE scheduled_messages SET status = 'pending', next_send_at = ?, updated_at = ? WHERE uuid = ?",
            (iso_from_ms(T0_MS + 7_200_000), later, row["uuid"]),
        )
    db.save(path)
    report = _import(stack, path, resume=True)
    assert report.kinds["tasks"].written == 3, report.render()
    assert _count() == _pending_items() == PENDING - 1 + 2


def test_the_delta_of_each_write_and_none_outside_a_tenant():
    writer = TargetWriter.__new__(TargetWriter)
    writer.space = tenant_space(TENANT)
    assert writer._pending_delta(None, "pending") == 1
    assert writer._pending_delta({"status": "pending"}, "sent") == -1
    assert writer._pending_delta({"status": "sent"}, "pending") == 1
    assert writer._pending_delta({"status": "pending"}, "pending") == 0
    writer.space = SINGLE
    assert writer._pending_delta(None, "pending") == 0
