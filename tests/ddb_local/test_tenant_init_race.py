"""The tenant registry under real concurrency (DynamoDB Local; docs/tenancy.md).

* concurrent ``init-tenant`` of one id: exactly one 201, every other 409, one record, and its key unwraps;
* rotation racing requests: a request authenticated with an old token after the rotation returned never passes.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
from amsg import runtime
from amsg.api.tenants import init_tenant
from amsg.errors import ApiError
from amsg.http.request import ApiRequest
from amsg.http.tenant_gate import authenticate
from amsg.tenancy import lifecycle
from amsg.tenancy.keys import TenantKeys

from tests.support import ddb_local as _ddb_local
from tests.support.fakes.tenants import LocalKeyWrapper
from tests.support.tenancy import INIT_SECRET, multi_env

pytestmark = pytest.mark.ddb_local

ddb_local_endpoint = _ddb_local.ddb_local_endpoint
ddb_local_client = _ddb_local.ddb_local_client
ddb_local_table = _ddb_local.ddb_local_table


def _context(endpoint: str, table: str) -> Any:
    env = {"AMSG_TABLE_NAME": table, "AWS_ENDPOINT_URL_DYNAMODB": endpoint, **multi_env("unused-kms-key")}
    ctx = runtime.build_context(env)
    wrapper = LocalKeyWrapper()  # KMS's part is proven on moto; the race is the registry's conditional write
    ctx.key_wrapper = wrapper
    ctx.tenant_keys = TenantKeys(ctx.tenant_registry, wrapper, time.monotonic)
    return ctx


def _init(ctx: Any, tenant_id: str) -> tuple[int, str | None]:
    request = ApiRequest(
        method="POST",
        path="/api/v1/init-tenant",
        headers={"x-init-secret": INIT_SECRET},
        text_body=json.dumps({"tenantId": tenant_id}),
    )
    try:
        response = init_tenant(request, ctx)
    except ApiError as error:
        return error.status, error.code
    return response.status, response.body["data"]["masterKeyFingerprint"]


def test_concurrent_init_of_one_id_has_exactly_one_winner(ddb_local_endpoint, ddb_local_table):
    ctx = _context(ddb_local_endpoint, ddb_local_table)
    for _round in range(3):
        tenant_id = str(uuid.uuid4())
        barrier = threading.Barrier(12)
        results: list[tuple[int, str | None]] = []
        lock = threading.Lock()

        def racer(tid: str = tenant_id, gate: threading.Barrier = barrier) -> None:
            gate.wait()
            outcome = _init(ctx, tid)
            with lock:
                results.append(outcome)

        threads = [threading.Thread(target=racer) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        winners = [fingerprint for status, fingerprint in results if status == 201]
        assert len(results) == 12 and len(winners) == 1, results
        assert sorted(results)[1:] == [(409, "TENANT_ALREADY_INITIALIZED")] * 11
        assert ctx.tenant_registry.get(tenant_id).master_key_fingerprint == winners[0]
        assert ctx.tenant_keys.master_key(tenant_id) is not None


def test_no_old_token_passes_after_the_rotation_returned(ddb_local_endpoint, ddb_local_table):
    ctx = _context(ddb_local_endpoint, ddb_local_table)
    record = lifecycle.create(ctx, str(uuid.uuid4()))
    old = lifecycle.credentials(ctx, record)["tenantToken"]
    request = ApiRequest(method="GET", path="/api/v1/messages", headers={"authorization": f"Bearer {old}"})
    rotated_at: list[float] = []
    passed_after: list[float] = []
    stop = threading.Event()

    def requester() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                authenticate(request, ctx)
            except ApiError:
                continue
            if rotated_at and started > rotated_at[0]:
                passed_after.append(started)

    threads = [threading.Thread(target=requester) for _ in range(6)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    fresh = lifecycle.rotate_tokens(ctx, record.tenant_id)
    rotated_at.append(time.monotonic())
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join(10)
    assert passed_after == []
    new_request = ApiRequest(
        method="GET", path="/api/v1/messages", headers={"authorization": f"Bearer {fresh['tenantToken']}"}
    )
    assert authenticate(new_request, ctx).tenant_id == record.tenant_id
