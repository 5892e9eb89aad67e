"""``amsg import --tenant`` on moto (DynamoDB + KMS): a reference multi-tenant tenant moves in with its master
key, its users' keys and tokens unchanged (docs/tenancy.md, "Moving in from the reference")."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import uuid
from pathlib import Path

import pytest
from amsg.adapters.dynamo.compact import unpack
from amsg.adapters.dynamo.table import DynamoTable
from amsg.crypto import decrypt_payload, derive_user_key
from amsg.tenancy import lifecycle, tokens
from amsg_import.command import ImportStopped, import_tenant, main
from amsg_import.sources import open_source
from amsg_import.tenant import (
    MAX_BLOB_CHARS,
    TenantConfigError,
    open_tenant_config,
    seal_tenant_config,
)
from amsg_local.cli import _parser
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tests.conftest import T0_MS, TABLE
from tests.support.reference_db import ReferenceDb
from tests.support.tenancy import SIGNING_KEY, build_multi_stack

KEK = "reference-kek-for-tests"
TENANT = "3f1c2b8e-6d4a-4e7b-9c1d-2a5b8e7f0c13"
MASTER = "a1" * 32
NOW_S = T0_MS // 1000
ALICE = "0a8f2c34-5b6d-4e7f-8a9b-0c1d2e3f4a5b"
BOB = "1b9f3d45-6c7e-4f80-9bac-1d2e3f4a5b6c"


def reference_config(tenant_id: str = TENANT, master_key: str = MASTER) -> dict[str, object]:
    return {
        "tenantId": tenant_id,
        "db": {"driver": "pg", "connectionString": "postgres://tenant@db.invalid/t"},
        "masterKey": master_key,
        "createdAt": "2026-01-01T00:00:00.000Z",
        "updatedAt": "2026-01-01T00:00:00.000Z",
    }


# ---- the v1. blob: a fixed vector of the reference's format ---------------------------------------------------


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def test_fixed_vector_of_the_reference_blob_format():
    """The reference seals the config JSON with AES-256-GCM, key SHA-256(UTF-8 KEK), a 12-byte IV, and writes
    ``v1.<iv>.<tag>.<ciphertext>`` in base64url without padding; built here from the primitives alone."""
    iv = bytes(range(12))
    plain = json.dumps(reference_config(), separators=(",", ":")).encode("utf-8")
    sealed = AESGCM(hashlib.sha256(KEK.encode("utf-8")).digest()).encrypt(iv, plain, None)
    blob = f"v1.{_b64url(iv)}.{_b64url(sealed[-16:])}.{_b64url(sealed[:-16])}"
    assert blob.startswith("v1.AAECAwQFBgcICQoL.") and "=" not in blob
    assert seal_tenant_config(reference_config(), KEK, iv) == blob
    config = open_tenant_config(blob, KEK, TENANT)
    assert (config.tenant_id, config.master_key, config.driver) == (TENANT, MASTER, "pg")
    assert config.connection_string == "postgres://tenant@db.invalid/t"
    assert MASTER not in repr(config) and "postgres" not in repr(config)


def _blob(**overrides: object) -> str:
    return seal_tenant_config({**reference_config(), **overrides}, KEK, b"\x07" * 12)


@pytest.mark.parametrize(
    ("blob", "kek", "message"),
    [
        (_blob(), "another-kek", "wrong KEK"),
        (_blob()[:-8], KEK, "wrong KEK, or the blob was altered"),  # truncated ciphertext fails the tag
        (".".join(_blob().split(".")[:3]), KEK, "expected v1."),
        ("v1.AAEC." + ".".join(_blob().split(".")[2:]), KEK, "truncated"),
        (_blob().replace("v1.", "v2.", 1), KEK, "expected v1."),
        (_blob()[:-1] + ("A" if _blob()[-1] != "A" else "B"), KEK, "altered"),
        ("v1." + "A" * MAX_BLOB_CHARS, KEK, "larger than"),
        ("v1.!!.??.**", KEK, "not base64url"),
        (_blob(tenantId=str(uuid.uuid4())), KEK, "another tenant"),
        (_blob(masterKey="XYZ"), KEK, "no master key"),
        (_blob(masterKey=MASTER.upper()), KEK, "lowercase hex"),
        (seal_tenant_config([1, 2], KEK, b"\x01" * 12), KEK, "not a JSON object"),  # type: ignore[arg-type]
        (_blob(), "   ", "KEK is empty"),
    ],
)
def test_hostile_blobs_are_refused_without_key_material(blob, kek, message):
    with pytest.raises(TenantConfigError) as caught:
        open_tenant_config(blob, kek, TENANT)
    text = str(caught.value)
    assert message in text
    for secret in (MASTER, KEK, "postgres://", hashlib.sha256(KEK.encode()).hexdigest()):
        assert secret not in text


# ---- the import on moto ----------------------------------------------------------------------------------------


@pytest.fixture
def stack(make_context):
    return build_multi_stack(make_context)


@pytest.fixture
def reference(tmp_path: Path) -> tuple[ReferenceDb, str]:
    db = ReferenceDb("outbox", MASTER)
    db.add_task(ALICE, next_send_ms=T0_MS + 3_600_000, message="from the reference")
    db.add_task(BOB, next_send_ms=T0_MS + 7_200_000, message="bob's")
    db.add_subscription(ALICE, {"endpoint": "https://push.example.test/a", "keys": {"p256dh": "p", "auth": "a"}}, 1)
    path = str(tmp_path / "tenant.sqlite")
    db.save(path)
    return db, path


def _target(stack):
    return DynamoTable(TABLE, region="us-east-1"), stack.ctx.tenant_registry, stack.ctx.key_wrapper


def _import(stack, path: str, config=None, **kw):
    source = open_source(path)
    try:
        return import_tenant(
            config or open_tenant_config(_blob(), KEK, TENANT), source, target=_target(stack), now_ms=T0_MS, **kw
        )
    finally:
        source.close()


def test_the_tenant_keeps_its_master_key_and_its_users_keys(stack, reference):
    db, path = reference
    report = _import(stack, path)
    assert report.failed == 0 and report.kinds["tasks"].written == 2
    assert report.source["tenantRecord"] == "created"
    record = stack.ctx.tenant_registry.get(TENANT)
    assert record.status == "active" and MASTER not in json.dumps(record.__dict__)
    assert record.master_key_fingerprint == hashlib.sha256(MASTER.encode()).hexdigest()[:16]
    assert stack.ctx.key_wrapper.unwrap(TENANT, record.wrapped_master_key) == MASTER.encode()
    # the stored task, under the tenant's key space, decrypts with the key the reference derived for alice
    task = db.tasks[0]
    item = DynamoTable(TABLE, region="us-east-1").get({"PK": f"N#{TENANT}#U#{ALICE}", "SK": f"T#{task['uuid']}"})
    assert item is not None and item["due_pk"].startswith(f"N#{TENANT}#DUE#")
    assert decrypt_payload(unpack(item["payload"]), derive_user_key(MASTER, ALICE)) == task["payload"]


def test_a_token_the_reference_issued_before_the_import_authenticates_until_rotation(stack, reference):
    _, path = reference
    old = tokens.issue(SIGNING_KEY, TENANT, tokens.TENANT, NOW_S - 20 * 86_400)  # minted by the reference
    _import(stack, path)
    client = stack.client(old, user_id=ALICE)
    assert client.init() == derive_user_key(MASTER, ALICE)
    listed = client.list_messages()
    assert listed.status == 200, listed.text
    other = stack.tenant()  # the same user id in another tenant is another user with another key
    assert stack.client(other["tenantToken"], user_id=ALICE).init() != derive_user_key(MASTER, ALICE)
    fresh = lifecycle.rotate_tokens(stack.ctx, TENANT)
    assert client.request("GET", "/get-user-key").status == 401
    assert stack.client(fresh["tenantToken"], user_id=ALICE).init() == derive_user_key(MASTER, ALICE)


def test_an_existing_tenant_is_refused_unless_resumed_with_the_same_key(stack, reference):
    _, path = reference
    _import(stack, path)
    with pytest.raises(TenantConfigError, match="--resume"):
        _import(stack, path)
    again = _import(stack, path, resume=True)
    assert again.source["tenantRecord"].startswith("resumed") and again.kinds["tasks"].written == 0
    other_key = open_tenant_config(_blob(masterKey="b2" * 32), KEK, TENANT)
    with pytest.raises(ImportStopped, match="does not decrypt"):  # the key check comes before the registry
        _import(stack, path, config=other_key, resume=True)
    assert stack.ctx.key_wrapper.unwrap(TENANT, stack.ctx.tenant_registry.get(TENANT).wrapped_master_key) == (
        MASTER.encode()
    )


def test_a_created_tenant_is_not_overwritten(stack, reference):
    _, path = reference
    stack.tenant(TENANT)  # init-tenant made it here, with its own fresh key
    with pytest.raises(TenantConfigError, match="another master key"):
        _import(stack, path, resume=True)


def test_a_master_key_that_does_not_open_the_data_stops_before_the_tenant_exists(stack, reference):
    _, path = reference
    wrong = open_tenant_config(_blob(masterKey="c3" * 32), KEK, TENANT)
    with pytest.raises(ImportStopped, match="does not decrypt"):
        _import(stack, path, config=wrong)
    assert stack.ctx.tenant_registry.get(TENANT) is None


def test_the_command_line_reads_the_kek_from_the_environment(stack, reference, tmp_path, monkeypatch, capsys):
    _, path = reference
    blob_file = tmp_path / "tenant.blob"
    blob_file.write_text(_blob() + "\n")
    for name, value in {"AMSG_TENANCY": "multi", "AMSG_KMS_KEY_ID": stack.kms_key_id, "REF_KEK": KEK}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AMSG_TABLE_NAME", TABLE)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    argv = ["import", path, "--tenant", TENANT, "--tenant-config", str(blob_file), "--kek-env", "REF_KEK"]
    args = _parser().parse_args([*argv, "--env-file", str(tmp_path / "none.env"), "--json"])
    assert main(args) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["source"]["tenant"] == TENANT and out["totals"]["failed"] == 0
    monkeypatch.setenv("REF_KEK", "not-the-kek")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "wrong KEK" in err and "not-the-kek" not in err


def test_dry_run_reads_the_kek_from_a_file_and_the_blob_from_stdin_and_writes_nothing(
    stack, reference, tmp_path, monkeypatch, capsys
):
    _, path = reference
    kek_file = tmp_path / "kek"
    kek_file.write_text(KEK + "\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(_blob()))
    argv = ["import", path, "--tenant", TENANT, "--tenant-config", "-", "--kek-file", str(kek_file), "--dry-run"]
    args = _parser().parse_args([*argv, "--env-file", str(tmp_path / "none.env"), "--json"])
    assert main(args) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["dryRun"] and out["source"]["tenantRecord"] == "would be created"
    assert out["kinds"]["tasks"]["written"] == 2
    assert stack.ctx.tenant_registry.get(TENANT) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--kek-env", "NOPE_UNSET"], "NOPE_UNSET is empty or not set"),
        ([], "exactly one of --kek-env"),
        (["--kek-env", "REF_KEK", "--kek-file", "x"], "exactly one of --kek-env"),
    ],
)
def test_the_kek_must_come_from_exactly_one_place(stack, reference, tmp_path, monkeypatch, capsys, extra, message):
    _, path = reference
    blob_file = tmp_path / "tenant.blob"
    blob_file.write_text(_blob())
    monkeypatch.setenv("REF_KEK", KEK)
    argv = ["import", path, "--tenant", TENANT, "--tenant-config", str(blob_file), "--dry-run", *extra]
    assert main(_parser().parse_args([*argv, "--env-file", str(tmp_path / "none.env")])) == 2
    assert message in capsys.readouterr().err
