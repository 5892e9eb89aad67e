"""After ``amsg import``, the published reference client (`@rei-standard/amsg-client`, driven by node) reads the
imported tasks, client state, outbox and subscription through the local stack unchanged, and the next tick
delivers the imported due task exactly once."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from amsg.adapters.dynamo.table import DynamoTable
from amsg_import.command import run_import
from amsg_import.sources import SqliteSource

from tests.e2e.test_reference_js_client import ROOT, js_client  # noqa: F401  (installs the npm client)
from tests.support.e2e_stack import stack_with_push
from tests.support.reference_db import ReferenceDb

pytestmark = pytest.mark.e2e
MASTER_KEY = "e" * 64
DAY = 86_400_000


@pytest.fixture(scope="module")
def reader_script(js_client: Path) -> Path:  # noqa: F811
    script = js_client.parent / "imported_reader.mjs"
    shutil.copy(ROOT / "tests/e2e/js/imported_reader.mjs", script)
    return script


def test_reference_js_client_reads_an_imported_deployment(reader_script):
    with stack_with_push(MASTER_KEY, AMSG_VAPID_EMAIL="import@example.test") as (stack, push):
        now = stack.post_local("/_local/clock", {"advanceMs": 0})["nowMs"]
        user = str(uuid.uuid4())
        subscription = push.subscribe()
        db = ReferenceDb("cloud-data", MASTER_KEY)
        db.add_subscription(user, subscription.to_json(), now - DAY)
        due = db.add_task(user, next_send_ms=now - 20_000, message="搬家后的第一条。")
        later = db.add_task(user, next_send_ms=now + DAY, message="明天。")
        sent = db.add_task(user, next_send_ms=now - 2 * DAY, message="old", status="sent")
        db.add_state(user, "char:a", "context", {"mood": "好"}, now - DAY)
        db.add_state(user, "char:b", "big", {"text": "字" * 80_000}, now - DAY)  # chunked in the reference
        db.add_outbox(user, sent, 0, 2, created_ms=now - DAY, delivered_ms=now - DAY, acked_ms=now - DAY + 9)
        pending_row = db.add_outbox(user, sent, 1, 2, created_ms=now - DAY)

        table = DynamoTable(stack.table_name, endpoint_url=stack.dynamodb_endpoint, region=stack.region)
        report = run_import(SqliteSource(db.conn, "reference"), master_key=MASTER_KEY, table=table, now_ms=now)
        assert report.failed == 0, report.render()

        result = subprocess.run(
            ["node", str(reader_script), stack.base_url, user, json.dumps(["char:a", "char:b"])],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout.strip().splitlines()[-1])
        tasks = {t["uuid"]: t for t in out["tasks"]["data"]["tasks"]}
        assert set(tasks) == {due["uuid"], later["uuid"], sent["uuid"]}
        assert tasks[due["uuid"]]["id"] == due["id"] and tasks[due["uuid"]]["nextSendAt"] == due["next_send_at"]
        assert tasks[sent["uuid"]]["status"] == "sent"
        assert [(e["key"], json.loads(e["value"])) for e in out["state"]["char:a"]["data"]["entries"]] == [
            ("context", {"mood": "好"})
        ]
        assert json.loads(out["state"]["char:b"]["data"]["entries"][0]["value"]) == {"text": "字" * 80_000}
        entries = out["outbox"]["data"]["entries"]
        assert [(e["id"], e["messageId"], e["push"]) for e in entries] == [
            (pending_row["id"], pending_row["message_id"], pending_row["push"])
        ]
        assert out["subscription"]["data"]["endpoint"] == subscription.to_json()["endpoint"]

        stack.post_local("/_local/tick", {})
        assert [p["message"] for p in push.payloads(subscription.endpoint_id)] == ["搬家后的第一条。"]
        stack.post_local("/_local/tick", {})
        assert len(push.payloads(subscription.endpoint_id)) == 1
