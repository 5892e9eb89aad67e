"""Every delete path leaves nothing behind: after cancel, a delivered one-shot, housekeeping of settled tasks,
credential deletes, client-state deletes and outbox deletes, a scan of the whole table finds no item that
belongs to something deleted (payload parts ``TP#``/``OP#``/``SC#``, uuid registry entries)."""

from __future__ import annotations

import hashlib
from typing import Any

from tests.conftest import T0_MS, TABLE, moto_table_resource
from tests.support.scenario import FIRST, schedule

DAY_MS = 86_400_000
# the stored ciphertext is hex (twice the plaintext), so this payload is larger than one item: it lives in parts
BIG = "长" * 120_000


def scan_table() -> list[dict[str, Any]]:
    table = moto_table_resource(TABLE)
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {}
    while True:
        page = table.scan(**kwargs)
        items += page["Items"]
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def orphans(items: list[dict[str, Any]]) -> list[str]:
    """Items whose owner is gone (checked against the key layout in amsg.adapters.dynamo.keys)."""
    by_key = {(item["PK"], item["SK"]): item for item in items}
    found = []
    for (pk, sk), item in by_key.items():
        owner: dict[str, Any] | None
        if sk.startswith("TP#"):  # TP#<uuid>#<token>#<i> → task T#<uuid> referencing that token
            _, uuid, token, _ = sk.split("#")
            owner = by_key.get((pk, f"T#{uuid}"))
            ok = owner is not None and owner.get("payload_token") == token
        elif sk.startswith("OP#"):  # OP#<sha256(message id)>#<token>#<i> → outbox row with that token
            _, digest, token, _ = sk.split("#")
            ok = any(
                other_pk == pk
                and other_sk.startswith("O#")
                and hashlib.sha256(str(other.get("message_id", "")).encode()).hexdigest() == digest
                and other.get("payload_token") == token
                for (other_pk, other_sk), other in by_key.items()
            )
        elif sk.startswith("SC#"):  # SC#<ns>\x1f<keyPart>\x1f<token>#<i> → root S#<ns>\x1f<keyPart>
            head, token_and_index = sk[3:].rsplit("\x1f", 1)
            owner = by_key.get((pk, "S#" + head))
            ok = owner is not None and owner.get("blob_token") == token_and_index.split("#")[0]
        elif pk.startswith("TU#"):  # uuid registry → the task it names, or an expiry (docs/decisions.md, 47)
            ok = (f"U#{item['user_id']}", f"T#{pk[3:]}") in by_key or "ttl" in item
        else:
            continue
        if not ok:
            found.append(f"{pk} {sk[:60]!r}")
    return found


def partition(user_id: str) -> list[str]:
    """The sort-key prefixes (first three characters) of the user's items."""
    return sorted(item["SK"][:3] for item in scan_table() if item["PK"] == f"U#{user_id}")


def part_count(uuid: str) -> int:
    return sum(1 for item in scan_table() if item["SK"].startswith(f"TP#{uuid}#"))


def test_no_task_delete_path_leaves_payload_parts_behind(engine):
    # cancel
    cancelled = schedule(engine, metadata={"blob": BIG})
    assert part_count(cancelled["uuid"]) >= 2
    assert engine.api.cancel(cancelled["uuid"]).status == 200
    assert part_count(cancelled["uuid"]) == 0

    # update from a large payload to a small one, and back
    updated = schedule(engine, metadata={"blob": BIG}, firstSendTime="2030-06-01T00:00:00.000Z")
    assert engine.api.update(updated["uuid"], {"metadata": {"small": True}}).status == 200
    assert part_count(updated["uuid"]) == 0
    assert engine.api.update(updated["uuid"], {"metadata": {"blob": BIG}}).status == 200
    assert orphans(scan_table()) == []

    # a one-shot that is delivered is deleted with its parts (the prompt is stored, not pushed)
    delivered = schedule(
        engine,
        messageType="prompted",
        userMessage=None,
        completePrompt=BIG,
        apiUrl=engine.llm.base_url,
        apiKey="sk-abcdefghijklmnopqrstuvwxyz",
        primaryModel="m",
    )
    # a one-shot whose push can never fit fails for good (metadata travels in every push) and is settled
    settled = schedule(engine, metadata={"blob": BIG})
    assert part_count(delivered["uuid"]) >= 2 and part_count(settled["uuid"]) >= 2
    engine.ctx.clock.current_ms = T0_MS + 61_000
    engine.harness.tick_and_drain()
    assert engine.push.payloads(), "the prompted task was pushed"
    assert engine.api.get_message(delivered["uuid"]).code == "TASK_NOT_FOUND"
    assert part_count(delivered["uuid"]) == 0
    assert engine.api.get_message(settled["uuid"]).code == "TASK_ALREADY_COMPLETED"
    assert part_count(settled["uuid"]) >= 2

    # housekeeping removes settled tasks after the retention period, parts included
    engine.ctx.clock.current_ms = T0_MS + 8 * DAY_MS
    summary = engine.harness.tick()
    assert summary["details"]["housekeeping"]["deletedSettledTasks"] >= 1, summary
    assert part_count(settled["uuid"]) == 0
    assert orphans(scan_table()) == []


def test_no_client_data_delete_path_leaves_items_behind(engine):
    api = engine.api
    big_value = "v" * 600_000  # chunked into value parts
    # client state: delete one entry (null value), one namespace, then everything
    entries = [
        {"namespace": "a", "key": "k1", "value": big_value, "updatedAt": 1},
        {"namespace": "a", "key": "k2", "value": big_value, "updatedAt": 1},
        {"namespace": "b", "key": "k1", "value": big_value, "updatedAt": 1},
    ]
    assert api.put_client_state(entries).status == 200
    assert sum(1 for sk in partition(api.user_id) if sk == "SC#") >= 3
    assert api.put_client_state([{"namespace": "a", "key": "k1", "value": None, "updatedAt": 2}]).status == 200
    assert orphans(scan_table()) == []
    assert api.delete_client_state_namespace("a").status == 200
    assert orphans(scan_table()) == []
    assert api.clear_client_state().status == 200
    assert not {"S#", "SC#"} & set(partition(api.user_id))

    # credentials: by id, by prefix, all
    value = {"apiUrl": "https://llm.example.test/v1", "apiKey": "sk-x", "primaryModel": "m"}
    creds = [{"credId": name, "value": value} for name in ("a/1", "a/2", "b/1", "c/1")]
    assert api.send_encrypted("PUT", "/llm-credentials", {"credentials": creds}).status == 200
    assert api.send_encrypted("DELETE", "/llm-credentials", {"credIds": ["c/1"]}).data == {"deleted": 1}
    assert api.send_encrypted("DELETE", "/llm-credentials", {"credIdPrefix": "a/"}).data == {"deleted": 2}
    assert api.send_encrypted("DELETE", "/llm-credentials", {"all": True}).data == {"deleted": 1}
    assert "C#" not in {sk[:2] for sk in partition(api.user_id)}

    # outbox: rows from two deliveries, deleted by id and then all
    for _ in range(2):
        resp = engine.api.schedule(
            {"contactName": "Rei", "messageType": "instant", "userMessage": "hi", "firstSendTime": FIRST}
        )
        assert resp.status == 200, resp.text
    rows = api.get_encrypted("/outbox").data["entries"]
    assert len(rows) >= 2
    first = rows[0]["messageId"]
    assert api.send_encrypted("DELETE", "/outbox", {"messageIds": [first]}).data["deleted"] == 1
    assert api.send_encrypted("DELETE", "/outbox", {"all": True}).data["deleted"] >= 1
    assert not [sk for sk in partition(api.user_id) if sk.startswith(("O#", "OP"))]
    assert orphans(scan_table()) == []
