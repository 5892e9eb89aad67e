"""``amsg import --tenant``: a reference multi-tenant tenant moves in with its id, master key and data, into its
own namespace, and its reference tokens keep working (moto: DynamoDB and KMS; docs/tenancy.md)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid

import boto3
import pytest
from amsg.tenancy import tokens
from amsg_import.tenant import TenantImportError, decrypt_tenant_config, reference_tenant
from amsg_local.cli import main
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from moto import mock_aws

from tests.conftest import TABLE, parsed_template
from tests.support.inprocess import InProcessApi
from tests.support.reference_db import ReferenceDb
from tests.support.tenancy import SIGNING_KEY, multi_env
from tests.support.wire_client import WireClient

KEK = "reference-kek"
TENANT_KEY = "c" * 64
NOW_MS = 1_893_456_000_000


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def reference_blob(config: dict, kek: str = KEK) -> str:
    """The reference's tenant-config encryption: AES-256-GCM under SHA-256(KEK), v1.<iv>.<tag>.<ct>."""
    iv = os.urandom(12)
    sealed = AESGCM(hashlib.sha256(kek.encode()).digest()).encrypt(iv, json.dumps(config).encode(), None)
    return ".".join(["v1", _b64url(iv), _b64url(sealed[-16:]), _b64url(sealed[:-16])])


def test_the_config_blob_decrypts_only_with_the_kek_and_names_its_tenant():
    tenant_id = str(uuid.uuid4())
    blob = reference_blob(
        {"tenantId": tenant_id, "db": {"driver": "pg", "connectionString": "postgres://x"}, "masterKey": TENANT_KEY}
    )
    assert decrypt_tenant_config(blob, KEK)["masterKey"] == TENANT_KEY
    tenant = reference_tenant(tenant_id, blob=blob, kek=KEK, master_key=None)
    assert (tenant.master_key, tenant.database_url) == (TENANT_KEY, "postgres://x")
    with pytest.raises(TenantImportError):
        decrypt_tenant_config(blob, "another-kek")
    with pytest.raises(TenantImportError):
        reference_tenant(str(uuid.uuid4()), blob=blob, kek=KEK, master_key=None)
    with pytest.raises(TenantImportError):
        reference_tenant(tenant_id, blob=None, kek=None, master_key="not-hex")


def test_a_reference_tenant_moves_in_with_its_key_data_and_tokens(tmp_path, monkeypatch):
    tenant_id = str(uuid.uuid4())
    user = str(uuid.uuid4())
    db = ReferenceDb("cloud-data", TENANT_KEY)
    db.add_task(user, next_send_ms=NOW_MS + 86_400_000, message="from the reference")
    db_file = tmp_path / "tenant.sqlite"
    db.save(str(db_file))
    blob = reference_blob(
        {"tenantId": tenant_id, "db": {"driver": "pg", "connectionString": "x"}, "masterKey": TENANT_KEY}
    )
    with mock_aws():
        from amsg_local.tables import create_tables_from_template

        create_tables_from_template(boto3.client("dynamodb", region_name="us-east-1"), parsed_template(), TABLE)
        kms_key = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["Arn"]
        for name, value in {"AMSG_TABLE_NAME": TABLE, "AMSG_REFERENCE_KEK": KEK, **multi_env(kms_key)}.items():
            monkeypatch.setenv(name, value)
        env_file = tmp_path / ".env"
        env_file.write_text("")
        argv = ["import", str(db_file), "--tenant", tenant_id, "--tenant-config", blob, "--env-file", str(env_file)]
        assert main(argv) == 0
        assert main(argv) == 0  # again: the tenant exists with this key, the rows are already here

        items = boto3.client("dynamodb", region_name="us-east-1").scan(TableName=TABLE)["Items"]
        user_items = [i for i in items if i["PK"]["S"] not in ("TENANTS", "META")]
        assert user_items and all(i["PK"]["S"].startswith(f"N#{tenant_id}#") for i in user_items)

        # a token the reference minted (same signing key, issued long ago) opens the tenant's data here
        from amsg import runtime

        runtime.use(None)
        old_token = tokens.issue(SIGNING_KEY, tenant_id, tokens.TENANT, 1_700_000_000, lifetime_s=10**9)
        client = WireClient(InProcessApi(), user_id=user, extra_headers={"Authorization": f"Bearer {old_token}"})
        assert client.init() == hashlib.sha256((TENANT_KEY + user).encode()).hexdigest()
        tasks = client.list_messages().data["tasks"]
        assert len(tasks) == 1
        runtime.use(None)
