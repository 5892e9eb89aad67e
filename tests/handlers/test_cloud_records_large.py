"""Cloud-data management records larger than one DynamoDB item (the paging snapshot or plan of a user with
thousands of resources) are stored as part items behind the record, read back whole, and leave nothing behind."""

from __future__ import annotations

import uuid

from tests.conftest import moto_table_resource

BIG = "x" * 700_001  # over two items' worth


def _items(user_id: str) -> list[dict]:
    table = moto_table_resource("amsg-test")
    items = table.scan()["Items"]
    return [i for i in items if i["PK"] == f"U#{user_id}"]


def test_a_record_over_an_item_round_trips_and_leaves_no_parts(ctx):
    store, user, now = ctx.cloud_data, str(uuid.uuid4()), ctx.now_ms()
    assert store.put_record(user, "snapshot", "s1", BIG, now_ms=now, ttl_s=900)
    assert store.get_record(user, "snapshot", "s1", now_ms=now) == BIG
    assert store.list_records(user, "snapshot", now_ms=now) == [BIG]
    parts = [i for i in _items(user) if i["SK"].startswith("RP#")]
    assert len(parts) == 3 and all(int(p["ttl"]) > now // 1000 + 30 * 86_400 for p in parts)
    assert not store.put_record(user, "snapshot", "s1", BIG + "y", now_ms=now, ttl_s=900, create_only=True)
    assert len([i for i in _items(user) if i["SK"].startswith("RP#")]) == 3  # the refused write dropped its parts
    assert store.put_record(user, "snapshot", "s1", "small", now_ms=now, ttl_s=900)  # overwrite drops old parts
    assert store.get_record(user, "snapshot", "s1", now_ms=now) == "small"
    assert [i["SK"] for i in _items(user)] == ["R#snapshot#s1"]
    assert store.put_record(user, "plan", "p1", BIG, now_ms=now, ttl_s=900)
    store.delete_record(user, "plan", "p1")
    assert store.get_record(user, "plan", "p1", now_ms=now) is None
    assert [i["SK"] for i in _items(user)] == ["R#snapshot#s1"]
