"""``amsg import`` end to end on DynamoDB Local: reference databases of every schema version are imported, read
back unchanged through the real API handlers, their due tasks are delivered by the next tick exactly once, and
a second import changes nothing."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import pytest
from amsg import runtime
from amsg.adapters.dynamo import keys
from amsg.adapters.dynamo.table import DynamoTable
from amsg.domain.ownership import owner_ref
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tick import run_tick
from amsg.timeutil import parse_iso_ms
from amsg_import.command import ImportStopped, run_import
from amsg_import.sources import SqliteSource

from tests.support.ddb_engine import MASTER_KEY, T0_MS, MemoryQueue, RecordingPushSender, ddb_context, with_fakes
from tests.support.inprocess import InProcessApi
from tests.support.reference_db import ReferenceDb
from tests.support.wire_client import DUMMY_AUTH, DUMMY_P256DH, WireClient

pytestmark = pytest.mark.ddb_local

NOW = T0_MS + 86_400_000  # the moment of the import (and of the next tick)
DAY = 86_400_000
VERSIONS = ["tasks-only", "client-state", "leases", "outbox", "cloud-data"]


def subscription_for(user: str) -> dict[str, Any]:
    return {"endpoint": f"https://push.example.test/{user}", "keys": {"p256dh": DUMMY_P256DH, "auth": DUMMY_AUTH}}


def populate(db: ReferenceDb) -> dict[str, Any]:
    """Two users with due, future, settled, leased and backing-off tasks, state, subscriptions, outbox rows."""
    tables = db.tables()
    columns = db.columns("scheduled_messages")
    legacy_subscriptions = "push_subscriptions" not in tables
    due: list[str] = []
    not_due: list[str] = []
    users = [str(uuid.uuid4()), str(uuid.uuid4())]
    sidecar_tasks: dict[str, str] = {}
    for n, user in enumerate(users):
        sub = subscription_for(user)
        if not legacy_subscriptions:
            db.add_subscription(user, sub, NOW - DAY)
        per_task_sub = sub if legacy_subscriptions else None
        due.append(
            db.add_task(user, next_send_ms=NOW - 30_000, message=f"早上好 {n}", subscription=per_task_sub)["uuid"]
        )
        not_due.append(db.add_task(user, next_send_ms=NOW + DAY, message="明天见", subscription=per_task_sub)["uuid"])
        sent = db.add_task(user, next_send_ms=NOW - 2 * DAY, message="sent", status="sent", subscription=per_task_sub)
        db.add_task(
            user,
            next_send_ms=NOW - 3 * DAY,
            message="failed",
            status="failed",
            retry_count=3,
            last_error='{"at":"2029-12-29T00:00:00.000Z","occurrence":null,"reason":"push 500"}',
            subscription=per_task_sub,
        )
        if "lease_until" in columns:  # a lease left behind by a reference tick that died: expired, so due now
            due.append(
                db.add_task(
                    user,
                    next_send_ms=NOW - 60_000,
                    lease_until_ms=NOW - 1_000,
                    message="接管",
                    subscription=per_task_sub,
                )["uuid"]
            )
        if "retry_after" in columns:  # backing off until after the tick
            not_due.append(
                db.add_task(
                    user,
                    next_send_ms=NOW - 120_000,
                    retry_after_ms=NOW + 240_000,
                    retry_count=1,
                    message="retry later",
                    subscription=per_task_sub,
                )["uuid"]
            )
        if "client_state" in tables:
            db.add_state(user, "char:a", "context", {"mood": "好", "n": n}, NOW - DAY)
            db.add_state(user, "char:a", "memo", ["a", "b"], NOW - 2 * DAY)
            if "cloud_data_records" in tables:  # the chunked encoding came with the cloud-data era
                db.add_state(user, "char:b", "big", {"text": "字" * 90_000}, NOW - DAY)
        if "message_outbox" in tables:
            db.add_outbox(user, sent, 0, 3, created_ms=NOW - DAY, delivered_ms=NOW - DAY, acked_ms=NOW - DAY + 5)
            db.add_outbox(user, sent, 1, 3, created_ms=NOW - DAY, delivered_ms=NOW - DAY)
            db.add_outbox(user, sent, 2, 3, created_ms=NOW - DAY)
            db.add_outbox(user, sent, 3, 3, created_ms=NOW - 40 * DAY)  # past retention: not imported
        if "llm_credentials" in tables:
            db.add_credential(user, "char:a/chat", {"apiKey": "sk-secret-value", "model": "m"}, NOW - DAY)
        if "cloud_data_records" in tables:
            db.add_cloud(user, not_due[-1], NOW - DAY)
            sidecar_tasks[user] = not_due[-1]
    if "lease_until" not in columns:
        # the oldest schema allowed tasks without uuid: imported under a derived uuid
        legacy = db.add_task(users[0], next_send_ms=NOW + DAY, message="no uuid", task_uuid=None, subscription=sub)
        not_due.append(legacy["uuid"])
    return {"users": users, "due": due, "not_due": not_due, "sidecar_tasks": sidecar_tasks}


def scan(client: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return sorted(items, key=lambda i: (i["PK"]["S"], i["SK"]["S"]))


def import_db(db: ReferenceDb, endpoint: str, table: str, **kw: Any):
    return run_import(
        SqliteSource(db.conn, f"reference {db.version}"),
        master_key=MASTER_KEY,
        table=DynamoTable(table, endpoint_url=endpoint, region="us-east-1"),
        now_ms=NOW,
        **kw,
    )


@pytest.fixture
def ctx(ddb_local_endpoint, ddb_local_table):
    context = ddb_context(ddb_local_endpoint, ddb_local_table)
    context.clock.current_ms = NOW
    runtime.use(context)
    yield context
    runtime.use(None)


def api_for(user: str) -> WireClient:
    client = WireClient(InProcessApi(), user_id=user)
    client.init()
    return client


@pytest.mark.parametrize("version", VERSIONS)
def test_import_reads_back_unchanged_delivers_due_once_and_reimports_nothing(
    version, ctx, ddb_local_endpoint, ddb_local_table, ddb_local_client
):
    db = ReferenceDb(version, MASTER_KEY)
    seeded = populate(db)

    report = import_db(db, ddb_local_endpoint, ddb_local_table)
    assert report.failed == 0, report.render()
    tasks = report.kinds["tasks"]
    assert tasks.read == tasks.written == len(db.tasks)

    # ---- every task, state value, subscription, credential and outbox row, through the API, unchanged ----
    for user in seeded["users"]:
        api = api_for(user)
        listed = api.list_messages(limit=100)
        assert listed.status == 200, listed.text
        by_uuid = {t["uuid"]: t for t in listed.data["tasks"]}
        mine = [t for t in db.tasks if t["user_id"] == user]
        assert set(by_uuid) == {t["uuid"] or _derived(t) for t in mine}
        for source in mine:
            task = by_uuid[source["uuid"] or _derived(source)]
            assert task["id"] == source["id"]
            assert task["status"] == source["status"]
            assert task["nextSendAt"] == source["next_send_at"]
            assert task["createdAt"] == source["created_at"]
            assert task["retryCount"] == source["retry_count"]
            assert task["contactName"] == "Rei"
            if source.get("last_error"):
                assert task["lastError"]["reason"] == "push 500"
            if source["status"] == "pending" and source["uuid"]:
                one = api.get_message(source["uuid"])
                assert one.status == 200, one.text
                assert one.data["task"]["metadata"] == {"source": "reference"}

        if user in db.subscriptions:
            sub = api.get_subscription()
            assert sub.data == {
                "exists": True,
                "updatedAt": db.subscriptions[user]["updated_at"],
                "endpoint": subscription_for(user)["endpoint"],
            }
        for namespace in {s["namespace"] for s in db.states if s["user_id"] == user}:
            got = api.get_client_state(namespace)
            assert got.status == 200, got.text
            expected = {
                s["key"]: (s["value"], s["updated_at"])
                for s in db.states
                if s["user_id"] == user and s["namespace"] == namespace
            }
            entries = {e["key"]: (json.loads(e["value"]), e["updatedAt"]) for e in got.data["entries"]}
            assert entries == expected
        outbox_rows = [r for r in db.outbox if r["user_id"] == user]
        if outbox_rows:
            entries, cursor = api.outbox_sync()
            unacked = [r for r in outbox_rows if r["acked_at"] is None and r["created_at"] > NOW - 28 * DAY]
            assert [(e["id"], e["messageId"], e["push"], e["deliveredAt"]) for e in entries] == [
                (r["id"], r["message_id"], r["push"], r["delivered_at"]) for r in unacked
            ]
            assert cursor == max(r["id"] for r in unacked)
        creds = [c for c in db.credentials if c["user_id"] == user]
        if creds:
            got = api.get_credentials()
            assert got.data["credentials"] == [{"credId": c["cred_id"], "updatedAt": c["updated_at"]} for c in creds]
            stored = ctx.credentials.get_values(user, [c["cred_id"] for c in creds])
            assert {k: json.loads(_decrypt(user, v)) for k, v in stored.items()} == {
                c["cred_id"]: c["value"] for c in creds
            }

    # ---- a second import changes nothing and says so ----
    before = scan(ddb_local_client, ddb_local_table)
    again = import_db(db, ddb_local_endpoint, ddb_local_table)
    assert again.failed == 0
    assert sum(s.written for s in again.kinds.values()) == 0, again.render()
    assert again.totals()["skipped"] == report.totals()["read"]
    assert scan(ddb_local_client, ddb_local_table) == before

    # ---- the next tick delivers exactly the due imported tasks, once ----
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    summary = run_tick(ctx, owner="tick-1")
    assert summary["claimedTasks"] == len(seeded["due"])
    while not queue.items.empty():
        message = parse_task_message(json.dumps(queue.items.get_nowait()))
        run_message(ctx, message, remaining_ms=lambda: 100_000, owner="consumer")
    pushed = Counter(p["taskUuid"] for p in sender.sent)
    assert pushed == Counter(dict.fromkeys(seeded["due"], 1))
    assert run_tick(ctx, owner="tick-2")["claimedTasks"] == 0

    # ---- an import run again after go-live never brings back what was delivered (one-shots are deleted) ----
    late = import_db(db, ddb_local_endpoint, ddb_local_table)
    assert late.failed == 0 and sum(s.written for s in late.kinds.values()) == 0, late.render()
    gone = late.kinds["tasks"].reasons[("skipped", "imported before and completed or deleted here since")]
    assert gone == len(seeded["due"])
    assert run_tick(ctx, owner="tick-3")["claimedTasks"] == 0
    assert len(sender.sent) == sum(pushed.values())


def _derived(task: dict[str, Any]) -> str:
    from amsg_import.reader import derived_task_uuid

    return derived_task_uuid(task["user_id"], task["id"])


def _decrypt(user: str, value: str) -> str:
    from amsg.crypto import decrypt_from_storage, derive_user_key

    return decrypt_from_storage(value, derive_user_key(MASTER_KEY, user))


def test_counters_continue_after_the_highest_id_the_reference_handed_out(ctx, ddb_local_endpoint, ddb_local_table):
    db = ReferenceDb("cloud-data", MASTER_KEY)
    seeded = populate(db)
    user = seeded["users"][0]
    # rows deleted in the reference still consumed ids: ids above them must never be reused
    db.conn.execute("DELETE FROM scheduled_messages WHERE id = (SELECT MAX(id) FROM scheduled_messages)")
    db.conn.execute("DELETE FROM message_outbox WHERE id = (SELECT MAX(id) FROM message_outbox)")
    highest_task = db.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'scheduled_messages'").fetchone()[0]
    highest_outbox = db.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'message_outbox'").fetchone()[0]

    report = import_db(db, ddb_local_endpoint, ddb_local_table)
    assert report.counters == {"tasks": highest_task, "outbox": highest_outbox}
    api = api_for(user)
    created = api.schedule(
        {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": "new here",
            "firstSendTime": "2031-01-01T00:00:00.000Z",
            "recurrenceType": "none",
        }
    )
    assert created.status == 201, created.text
    new_uuid = created.data["uuid"]
    assert ctx.tasks.get_task(user, new_uuid).id == highest_task + 1
    assert ctx.outbox.append(user, [_append("brand-new")]) == [highest_outbox + 1]


def _append(message_id: str):
    from amsg.crypto import derive_user_key, encrypt_for_storage
    from amsg.ports import OutboxAppend

    return OutboxAppend(message_id, encrypt_for_storage("{}", derive_user_key(MASTER_KEY, "x")), NOW)


def test_wrong_master_key_stops_before_any_write(ctx, ddb_local_endpoint, ddb_local_table, ddb_local_client):
    db = ReferenceDb("cloud-data", MASTER_KEY)
    populate(db)
    with pytest.raises(ImportStopped) as stopped:
        run_import(
            SqliteSource(db.conn, "reference"),
            master_key="b" * 64,
            table=DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1"),
            now_ms=NOW,
        )
    message = str(stopped.value)
    assert "master key does not decrypt" in message and "nothing was written" in message
    assert "b" * 16 not in message and MASTER_KEY[:16] not in message
    assert scan(ddb_local_client, ddb_local_table) == []


def test_dry_run_reads_everything_and_writes_nothing(ctx, ddb_local_endpoint, ddb_local_table, ddb_local_client):
    db = ReferenceDb("cloud-data", MASTER_KEY)
    populate(db)
    report = import_db(db, ddb_local_endpoint, ddb_local_table, dry_run=True)
    assert scan(ddb_local_client, ddb_local_table) == []
    assert report.kinds["tasks"].written == len(db.tasks)
    assert report.kinds["outbox"].skipped == 2  # the rows past retention
    assert report.kinds["state"].reasons[("written", "chunked value joined")] == 2
    assert all(v["decrypted"] == v["sampled"] for v in report.key_check.values())
    text = report.render()
    assert "would write" in text and "dry run: nothing was written." in text
    assert "sk-secret-value" not in text and MASTER_KEY not in text


def test_an_interrupted_import_continues_and_newer_target_data_is_kept(
    ctx, ddb_local_endpoint, ddb_local_table, ddb_local_client
):
    db = ReferenceDb("cloud-data", MASTER_KEY)
    seeded = populate(db)
    user = seeded["users"][0]
    # the first run stops after the client state (as if killed there)
    first = import_db(
        db, ddb_local_endpoint, ddb_local_table, kinds=("owners", "subscriptions", "credentials", "state")
    )
    assert "tasks" not in first.kinds
    # meanwhile the client wrote newer state and a newer subscription to the new deployment
    api = api_for(user)
    assert (
        api.put_client_state([{"namespace": "char:a", "key": "context", "value": "newer", "updatedAt": NOW}]).status
        == 200
    )
    assert api.put_subscription({"endpoint": "https://push.example.test/newer", "keys": {}}, NOW).status == 200

    second = import_db(db, ddb_local_endpoint, ddb_local_table)
    assert second.failed == 0, second.render()
    assert second.kinds["tasks"].written == len(db.tasks)
    assert second.kinds["state"].written == 0 and second.kinds["state"].skipped == first.kinds["state"].written
    assert second.kinds["subscriptions"].written == 0
    assert api.get_client_state("char:a").data["entries"][0]["value"] == "newer"
    assert api.get_subscription().data["endpoint"] == "https://push.example.test/newer"
    # cloud data is stored where the cloud-data feature will look for it
    pk = keys.user_pk(user)
    owner = ddb_local_client.query(
        TableName=ddb_local_table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :w)",
        ExpressionAttributeValues={":pk": {"S": pk}, ":w": {"S": "W#"}},
    )["Items"]
    assert [(o["owner_id"]["S"], o["generation"]["N"], o["active"]["BOOL"]) for o in owner] == [("char:a", "3", True)]
    table = DynamoTable(ddb_local_table, endpoint_url=ddb_local_endpoint, region="us-east-1")
    task = table.get({"PK": pk, "SK": keys.task_sk(seeded["sidecar_tasks"][user])})
    assert _decrypt(user, task["cloud_meta"]).startswith('{"owner"')  # the sidecar, embedded in its resource
    # with the owner reference our own owned writes store: guards and retirements treat it as owned
    assert (task["owner_ref"], task["owner_gen"]) == (owner_ref("character", "char:a"), 3)
    record = table.get({"PK": pk, "SK": "R#operation#o1"})
    assert record["chunk_count"] >= 2 and record["idempotency_key"] == "idem-1"
    assert table.get({"PK": pk, "SK": "R#plan#p1"})["data"].count(":") == 2
    assert second.kinds["sidecars"].written == 2


def test_rows_that_would_collide_with_data_already_in_the_target_fail_with_a_reason(
    ctx, ddb_local_endpoint, ddb_local_table
):
    db = ReferenceDb("outbox", MASTER_KEY)
    user, other = str(uuid.uuid4()), str(uuid.uuid4())
    first = db.add_task(user, next_send_ms=NOW + DAY, message="one")
    db.add_outbox(user, first, 0, 1, created_ms=NOW - DAY)
    # the target is not empty: this user already created a task (id 1) and got an outbox row (id 1) there,
    # and another user already owns the uuid of a second source task
    api, other_api = api_for(user), api_for(other)
    for client in (api, other_api):
        assert client.put_subscription(subscription_for(client.user_id)).status == 200
    created = api.schedule(
        {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": "made here",
            "firstSendTime": "2031-01-01T00:00:00.000Z",
            "recurrenceType": "none",
        }
    )
    assert created.status == 201 and created.data["id"] == 1
    assert ctx.outbox.append(user, [_append("made-here")]) == [1]
    taken = other_api.schedule(
        {
            "contactName": "Rei",
            "messageType": "fixed",
            "userMessage": "theirs",
            "firstSendTime": "2031-01-01T00:00:00.000Z",
            "recurrenceType": "none",
        }
    )
    db.add_task(user, next_send_ms=NOW + DAY, message="two", task_uuid=taken.data["uuid"])

    report = import_db(db, ddb_local_endpoint, ddb_local_table)
    reasons = {reason for s in report.kinds.values() for (status, reason) in s.reasons if status == "failed"}
    assert reasons == {
        "task id already used by another task in the target (import into a fresh table)",
        "task uuid already belongs to another user in the target",
        "outbox id already used by another row in the target (import into a fresh table)",
    }
    assert ctx.tasks.get_task(user, created.data["uuid"]) is not None  # nothing of the target was overwritten
    assert "failed" in report.render()


def test_a_task_changed_in_the_reference_since_is_refreshed_only_while_untouched_here(
    ctx, ddb_local_endpoint, ddb_local_table
):
    db = ReferenceDb("outbox", MASTER_KEY)
    user = str(uuid.uuid4())
    db.add_subscription(user, subscription_for(user), NOW - DAY)
    quiet = db.add_task(user, next_send_ms=NOW + DAY, message="v1")
    edited_here = db.add_task(user, next_send_ms=NOW + DAY, message="v1")
    assert import_db(db, ddb_local_endpoint, ddb_local_table).failed == 0

    # the client edits one task on the new deployment; the reference (still running) then updates both
    api = api_for(user)
    assert api.update(edited_here["uuid"], {"userMessage": "edited here"}).status == 200
    later = "2030-01-03T00:00:00.000Z"
    for task in (quiet, edited_here):
        db.conn.execute(
            "UPDATE scheduled_messages SET encrypted_payload = ?, updated_at = ? WHERE id = ?",
            (db.enc(user, {**task["payload"], "userMessage": "v2"}), later, task["id"]),
        )

    again = import_db(db, ddb_local_endpoint, ddb_local_table)
    assert again.kinds["tasks"].reasons == {
        ("written", "replaced an older import"): 1,
        ("skipped", "already in the target and changed there since"): 1,
    }
    refreshed = ctx.tasks.get_task(user, quiet["uuid"])
    assert refreshed.updated_at_ms == parse_iso_ms(later)
    assert json.loads(_decrypt(user, refreshed.encrypted_payload))["userMessage"] == "v2"
    assert api.get_message(quiet["uuid"]).data["task"]["contactName"] == "Rei"
    stored = ctx.tasks.get_task(user, edited_here["uuid"])
    assert json.loads(_decrypt(user, stored.encrypted_payload))["userMessage"] == "edited here"
