"""What a one-shot delivery writes, in billed units, pinned on DynamoDB Local (a regression fails here).

DynamoDB Local reports consumed capacity, but for a multi-item transaction only one item's units, so the
figures come from ``bench.units.Meter`` (DynamoDB's billing rules applied to the items before and after each
write), which the first test holds to what DynamoDB Local reports for single-item writes. The last test is the
migration path: items an earlier version wrote (hex-text payloads) are read, delivered and settled."""

from __future__ import annotations

import json
import uuid

import pytest
from amsg.adapters.dynamo.compact import unpack
from amsg.crypto import compact_json, encrypt_for_storage
from amsg.domain.registry_life import REGISTRY_TTL_S
from amsg.engine.messages import parse_task_message
from amsg.engine.run_task import run_message
from amsg.engine.tick import run_tick
from amsg.ports import NewTask
from amsg_local.tables import table_definition
from amsg_local.template import load_template

from bench import units
from tests.support.ddb_engine import T0_MS, MemoryQueue, RecordingPushSender, ddb_context, with_fakes

pytestmark = pytest.mark.ddb_local


@pytest.fixture(params=["on", "off"], ids=["statements", "single-requests"])
def wired(request, ddb_local_endpoint, ddb_local_table):
    """Both forms of the single writes (PartiQL statements, the default, and one request each) bill alike."""
    ctx = ddb_context(ddb_local_endpoint, ddb_local_table, AMSG_DYNAMO_STATEMENTS=request.param)
    sender, queue = RecordingPushSender(), MemoryQueue()
    with_fakes(ctx, sender, queue)
    meter = units.Meter(ddb_local_endpoint, units.Schema(table_definition(load_template())))
    meter.attach(ctx.tasks.db.wire)
    units.reset()
    return ctx, sender, queue


def _seed(ctx, message: str = "早上好", *, one_shot: bool = True) -> tuple[str, str]:
    """A one-shot as `POST /schedule-message` creates it (``one_shot=False``: as the previous version did)."""
    user, task_uuid = str(uuid.uuid4()), str(uuid.uuid4())
    key = ctx.user_key(user)
    ctx.subscriptions.put_push_subscription(
        user, encrypt_for_storage(compact_json({"endpoint": "https://push.invalid/x", "keys": {}}), key), 1
    )
    units.reset()  # the subscription is the user's, not the task's
    payload = {"contactName": "Rei", "messageType": "fixed", "userMessage": message, "firstSendTime": "x" * 24}
    ctx.tasks.create_task(
        NewTask(
            user,
            task_uuid,
            encrypt_for_storage(compact_json(payload), key),
            "fixed",
            T0_MS + 60_000,
            T0_MS,
            one_shot=one_shot,
        )
    )
    return user, task_uuid


def _deliver(ctx, queue: MemoryQueue) -> None:
    ctx.clock.current_ms = T0_MS + 61_000
    run_tick(ctx)
    while not queue.items.empty():
        message = parse_task_message(json.dumps(queue.items.get_nowait()))
        assert run_message(ctx, message, remaining_ms=lambda: 100_000, owner="c")["successCount"] == 1


def _by_target(billed: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, n in billed.items():
        target = key.split(" ", 1)[1]
        out[target] = out.get(target, 0.0) + n
    return out


def test_the_meter_bills_single_item_writes_as_dynamodb_local_reports_them(ddb_local_endpoint, ddb_local_table):
    import boto3

    client = boto3.client("dynamodb", endpoint_url=ddb_local_endpoint, region_name="us-east-1")
    meter = units.Meter(ddb_local_endpoint, units.Schema(table_definition(load_template())))
    meter.attach(client)
    key = {"PK": {"S": f"U#{uuid.uuid4()}"}, "SK": {"S": "O#m"}}
    calls = [
        lambda: client.put_item(
            TableName=ddb_local_table,
            Item={**key, "ob_lsk": {"S": "1"}, "obt_lsk": {"S": "t#1"}, "v": {"B": b"x" * 1500}},
            ReturnConsumedCapacity="INDEXES",
        ),
        lambda: client.update_item(
            TableName=ddb_local_table,
            Key=key,
            UpdateExpression="SET due_pk = :p, due_sk = :s REMOVE ob_lsk",
            ExpressionAttributeValues={":p": {"S": "DUE#0"}, ":s": {"S": "2030#u"}},
            ReturnConsumedCapacity="INDEXES",
        ),
        lambda: client.update_item(
            TableName=ddb_local_table,
            Key=key,
            UpdateExpression="SET due_sk = :s, v = :v",
            ExpressionAttributeValues={":s": {"S": "2031#u"}, ":v": {"B": b"y" * 500}},
            ReturnConsumedCapacity="INDEXES",
        ),
        lambda: client.delete_item(TableName=ddb_local_table, Key=key, ReturnConsumedCapacity="INDEXES"),
    ]
    for call in calls:
        units.reset()
        reported = call()["ConsumedCapacity"]
        expected = {"table": reported["Table"]["CapacityUnits"]}
        for field, label in (("GlobalSecondaryIndexes", "gsi"), ("LocalSecondaryIndexes", "lsi")):
            expected.update({f"{label}:{n}": u["CapacityUnits"] for n, u in (reported.get(field) or {}).items()})
        assert _by_target(units.snapshot()) == {k: v for k, v in expected.items() if v}


def _reported(consumed: dict) -> dict[str, float]:
    out = {"table": consumed["Table"]["CapacityUnits"]}
    for field, label in (("GlobalSecondaryIndexes", "gsi"), ("LocalSecondaryIndexes", "lsi")):
        out.update({f"{label}:{n}": u["CapacityUnits"] for n, u in (consumed.get(field) or {}).items()})
    return {k: v for k, v in out.items() if v}


def test_the_meter_bills_statements_as_the_single_writes_dynamodb_local_reports(ddb_local_endpoint, ddb_local_table):
    """A ``BatchExecuteStatement`` (DynamoDB Local reports no capacity for it) of an update that moves an index entry
    and grows the item past 1 KB, one whose condition fails (not billed by the meter: not part of a delivery) and a
    delete: the meter bills each applied statement as DynamoDB Local reports the same write sent on its own."""
    from collections import Counter

    import boto3

    client = boto3.client("dynamodb", endpoint_url=ddb_local_endpoint, region_name="us-east-1")
    meter = units.Meter(ddb_local_endpoint, units.Schema(table_definition(load_template())))
    meter.attach(client)
    run = uuid.uuid4().hex
    keys = {(form, n): {"PK": {"S": f"U#{run}{form}{n}"}, "SK": {"S": "O#m"}} for form in "sk" for n in range(3)}
    for key in keys.values():
        item = {**key, "ob_lsk": {"S": "1"}, "due_pk": {"S": "DUE#0"}, "due_sk": {"S": "2030#u"}, "n": {"N": "1"}}
        client.put_item(TableName=ddb_local_table, Item=item)
    table = f'"{ddb_local_table}"'
    grow = [{"S": "2031#u"}, {"B": b"y" * 1500}]
    statements = [
        {
            "Statement": f'UPDATE {table} SET "due_sk" = ? SET "v" = ? WHERE "PK" = ? AND "SK" = ? AND "n" = ?',
            "Parameters": [*grow, keys["s", 0]["PK"], keys["s", 0]["SK"], {"N": "1"}],
        },
        {
            "Statement": f'UPDATE {table} SET "v" = ? WHERE "PK" = ? AND "SK" = ? AND "n" = ?',
            "Parameters": [{"S": "x"}, keys["s", 1]["PK"], keys["s", 1]["SK"], {"N": "2"}],
        },
        {
            "Statement": f'DELETE FROM {table} WHERE "PK" = ? AND "SK" = ?',
            "Parameters": [keys["s", 2]["PK"], keys["s", 2]["SK"]],
        },
    ]
    units.reset()
    responses = client.batch_execute_statement(Statements=statements)["Responses"]
    assert [bool(r.get("Error")) for r in responses] == [False, True, False]
    by_meter = _by_target(units.snapshot())
    single = Counter[str]()
    for consumed in (
        client.update_item(
            TableName=ddb_local_table,
            Key=keys["k", 0],
            UpdateExpression="SET due_sk = :s, v = :v",
            ConditionExpression="n = :n",
            ExpressionAttributeValues={":s": grow[0], ":v": grow[1], ":n": {"N": "1"}},
            ReturnConsumedCapacity="INDEXES",
        )["ConsumedCapacity"],
        client.delete_item(TableName=ddb_local_table, Key=keys["k", 2], ReturnConsumedCapacity="INDEXES")[
            "ConsumedCapacity"
        ],
    ):
        single.update(_reported(consumed))
    assert by_meter == dict(single) == {"table": 3, "gsi:due": 3, "lsi:outbox_unacked": 3}


def test_a_one_shot_delivery_writes_these_units(wired):
    ctx, sender, queue = wired
    _user, task_uuid = _seed(ctx)
    created = _by_target(units.snapshot())
    assert created == {"table": 6, "gsi:due": 2}  # counter, task, uuid registry in one transaction
    units.reset()
    _deliver(ctx, queue)
    delivered = _by_target(units.snapshot())
    assert len(sender.sent) == 1
    # claim 1 + due 2 (one conditional UpdateItem; the key moves to the lease expiry); append 6 (counter, task,
    # row in one transaction) + `outbox_unacked` 2, no due write (the adoption keeps the claim's lease), no
    # `outbox_by_task` entry (the task names the row: docs/decisions.md, 45); settle: the row's delivered mark 1 +
    # `outbox_unacked` 1, the task's delete 1 + due 1, each a single write, and no delete of the uuid registry
    # entry: it expires (docs/decisions.md, 47); every item under 1 KB, the task with its name and the entry's
    # expiry too (docs/performance.md, "What a delivered message costs")
    assert delivered == {"table": 9, "gsi:due": 3, "lsi:outbox_unacked": 3}
    entry = ctx.tasks.db.get(ctx.tasks.space.uuid_registry_key(task_uuid))
    assert entry is not None and int(entry["ttl"]) == (T0_MS + 60_000) // 1000 + REGISTRY_TTL_S
    assert ctx.tasks.find_task(task_uuid) is None  # the entry names a task that is gone


def test_a_task_of_the_previous_version_still_deletes_its_registry_entry(wired):
    """A task created before registry entries expired (no expiry on either) is settled as before: its entry is
    deleted with it, one unit more."""
    ctx, sender, queue = wired
    _user, task_uuid = _seed(ctx, one_shot=False)
    entry = ctx.tasks.db.get(ctx.tasks.space.uuid_registry_key(task_uuid))
    assert entry is not None and "ttl" not in entry
    units.reset()
    _deliver(ctx, queue)
    assert len(sender.sent) == 1
    assert _by_target(units.snapshot()) == {"table": 10, "gsi:due": 3, "lsi:outbox_unacked": 3}
    assert ctx.tasks.db.get(ctx.tasks.space.uuid_registry_key(task_uuid)) is None


def test_items_of_the_previous_layout_are_delivered_and_settled(wired):
    """A task whose payload an earlier version stored as hex text is claimed, delivered and settled; an outbox
    row stored that way reads the same as one stored now."""
    ctx, sender, queue = wired
    user, task_uuid = _seed(ctx, "旧的")
    key = {"PK": f"U#{user}", "SK": f"T#{task_uuid}"}
    item = ctx.tasks.db.get(key)
    assert not isinstance(item["payload"], str)  # written now: packed
    text = unpack(item["payload"])
    ctx.tasks.db.table.update_item(Key=key, UpdateExpression="SET payload = :p", ExpressionAttributeValues={":p": text})
    assert isinstance(ctx.tasks.db.get(key)["payload"], str)
    _deliver(ctx, queue)
    (push,) = sender.sent
    assert push["taskUuid"] == task_uuid
    assert ctx.tasks.find_task(task_uuid) is None
    (row,) = ctx.outbox.list_unacked(user, 0, 10, T0_MS + 61_000)
    stored = next(iter(ctx.outbox.db.query_prefix(f"U#{user}", "O#")))
    assert not isinstance(stored["payload"], str)
    ctx.outbox.db.table.update_item(
        Key={"PK": stored["PK"], "SK": stored["SK"]},
        UpdateExpression="SET payload = :p",
        ExpressionAttributeValues={":p": unpack(stored["payload"])},
    )
    (old,) = ctx.outbox.list_unacked(user, 0, 10, T0_MS + 61_000)
    assert old.encrypted_push == row.encrypted_push and old.id == row.id
