"""The multi-tenant line in process (moto: table, queue, KMS): tenants made over HTTP with init-tenant, wire
clients holding a tenant token, and a scan that sorts every item of the table by the namespace of its keys."""

from __future__ import annotations

import contextlib
import types
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from tests.support.inprocess import InProcessApi
from tests.support.wire_client import WireClient, WireResponse

INIT_SECRET = "init-secret-for-tests"
SIGNING_KEY = "tenant-token-signing-key-for-tests-0123456789"
# every attribute that is the partition key of the table or of one of its indexes
PARTITION_ATTRIBUTES = ("PK", "due_pk", "ret_pk", "work_pk")
DEPLOYMENT_PARTITIONS = frozenset({"TENANTS", "META"})  # the registry and the schema marker: nobody's data


def multi_env(kms_key_id: str, **extra: str) -> dict[str, str]:
    return {
        "AMSG_TENANCY": "multi",
        "AMSG_KMS_KEY_ID": kms_key_id,
        "AMSG_TENANT_TOKEN_SIGNING_KEY": SIGNING_KEY,
        "AMSG_INIT_SECRET": INIT_SECRET,
        **extra,
    }


def v1(api: Callable[..., Any]) -> Callable[..., Any]:
    """A transport that sends the wire client's paths under ``/api/v1`` (the multi-tenant line's routes)."""

    def send(method: str, path: str, headers: dict[str, str], body: bytes | None) -> Any:
        return api(method, "/api/v1" + path, headers, body)

    return send


def init_tenant(api: InProcessApi, body: str = "{}") -> WireResponse:
    client = WireClient(v1(api), user_id="-")
    return client.request(
        "POST",
        "/init-tenant",
        headers={"Content-Type": "application/json", "X-Init-Secret": INIT_SECRET},
        body=body,
        user=False,
    )


def tenant_client(api: InProcessApi, token: str, user_id: str | None = None) -> WireClient:
    return WireClient(v1(api), user_id=user_id or str(uuid.uuid4()), extra_headers={"Authorization": f"Bearer {token}"})


def scan_all(client: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def pending_scan(client: Any, table: str, tenant: str, *, absent: int | None = None) -> tuple[int | None, int]:
    """(the tenant's pending-task counter, ``absent`` without one; its pending task items), from a whole-table
    scan: what the counter must always equal."""
    prefix = f"N#{tenant}#"
    count, tasks = absent, 0
    for item in scan_all(client, table):
        pk = item["PK"]["S"]
        if pk == prefix + "PENDING":
            count = int(item["n"]["N"])
        elif pk.startswith(prefix + "U#") and item["SK"]["S"].startswith("T#"):
            tasks += item["status"]["S"] == "pending"
    return count, tasks


def namespace_of(item: dict[str, Any]) -> str:
    """``tenant:<id>``, ``deployment`` (registry, schema marker), ``unprefixed`` (single-line keys) or
    ``mixed`` when the item's partition keys disagree (table PK and index PKs in different namespaces)."""
    found = set()
    for name in PARTITION_ATTRIBUTES:
        value = item.get(name, {}).get("S")
        if value is None:
            continue
        if value in DEPLOYMENT_PARTITIONS:
            found.add("deployment")
        elif value.startswith("N#"):
            found.add("tenant:" + value[2:].split("#", 1)[0])
        else:
            found.add("unprefixed")
    return found.pop() if len(found) == 1 else "mixed"


def memory_tenants(ctx: Any, tenant_ids: list[str]) -> dict[str, str]:
    """Give a multi-mode context a registry holding ``tenant_ids``, all active, with master keys wrapped locally
    (no KMS: DynamoDB Local); returns each tenant's master key. The registry is the deployment table's own when
    the context stores in DynamoDB (a push claim checks the tenant's record there), else in memory."""
    from amsg.adapters.dynamo.tenants import DynamoTenantStore
    from amsg.ports.tenants import ACTIVE, TenantRecord
    from amsg.tenancy.keys import RegistryDirectory, TenantKeys, new_master_key

    from tests.support.fakes.tenants import LocalKeyWrapper, MemoryTenantStore

    table = getattr(ctx.claims, "db", None)
    registry = DynamoTenantStore(table) if table is not None else MemoryTenantStore()
    wrapper = LocalKeyWrapper()
    master_keys = {}
    for tenant_id in tenant_ids:
        master_keys[tenant_id] = new_master_key()
        wrapped = wrapper.wrap(tenant_id, master_keys[tenant_id].encode("ascii"))
        registry.create(TenantRecord(tenant_id, wrapped, 0, ACTIVE, 0, 0))
    ctx.tenant_registry = registry
    ctx.tenant_keys = TenantKeys(registry, wrapper, lambda: 0.0, max_age_s=300)
    ctx.tenants = RegistryDirectory(registry)
    ctx.key_wrapper = wrapper
    return master_keys


@contextlib.contextmanager
def multi_world(moto_table: str, make_context: Any, **env: str) -> Iterator[types.SimpleNamespace]:
    """A multi-tenant deployment on moto for handler tests: the context (queue, VAPID, a KMS key), the in-process
    API, a loopback push service and the queue consumer's harness. ``env`` adds settings (e.g. a tenant limit)."""
    from amsg.vapid import generate_vapid_keys
    from amsg_local.tables import create_queue_from_template

    from tests.conftest import moto_client, parsed_template
    from tests.support.engine_harness import EngineHarness
    from tests.support.fake_push import FakePushService

    public, private = generate_vapid_keys()
    queue = create_queue_from_template(moto_client("sqs"), parsed_template(), "amsg-test-tasks")
    key_id = moto_client("kms").create_key()["KeyMetadata"]["KeyId"]
    with FakePushService(vapid_public_key=public) as push:
        ctx = make_context(
            **multi_env(key_id, **env),
            AMSG_QUEUE_URL=queue.url,
            AMSG_VAPID_PUBLIC_KEY=public,
            AMSG_VAPID_PRIVATE_KEY=private,
            AMSG_PUSH_PACING_MS="0",
        )
        yield types.SimpleNamespace(
            ctx=ctx, api=InProcessApi(), push=push, harness=EngineHarness(queue.url, queue.arn), table=moto_table
        )
