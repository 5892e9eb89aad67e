"""``amsg tenants``: the operator's commands for the multi-tenant line (docs/tenancy.md).

They run with the operator's credentials against the deployment the environment (or ``--env-file``) describes:
``AMSG_TENANCY=multi``, ``AMSG_TABLE_NAME``, ``AMSG_KMS_KEY_ID``, ``AMSG_TENANT_TOKEN_SIGNING_KEY[_PARAM]`` and AWS
credentials (or ``AWS_ENDPOINT_URL_DYNAMODB`` / ``AWS_ENDPOINT_URL_KMS`` for local endpoints).

* ``create [--tenant-id ID]``: a tenant, as init-tenant makes it; prints its tokens (shown only now);
* ``list``: every tenant with its status, token generation and dates (never a key);
* ``rotate-tokens ID``: revokes every token of the tenant at once and prints new ones (with the cron webhook URL,
  built on ``AMSG_PUBLIC_BASE_URL`` or else the stack's ``ApiUrl`` output; left out, with a hint, when neither
  is known);
* ``usage [ID]``: pending and settled tasks of each tenant, counted from its index partitions;
* ``set-rate-limit ID RPS|default``: the tenant's requests per second (429 above it);
* ``disable ID`` / ``enable ID``: a disabled tenant's requests and deliveries are refused; its data stays;
* ``delete ID [--wait]``: marks the tenant ``deleting`` (refused from then on) and starts the removal of all its
  items as resumable background work (the tick advances it, then removes the record); ``--wait`` stays until it
  has finished (at least the 15-minute grace for running deliveries), with progress on a terminal.

A tenant id is found as typed, else in its canonical spelling (a UUID in lower case, as init-tenant stores it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from amsg_local import public_base_url
from amsg_local.envfile import read_env_file


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("tenants", help="manage the tenants of a multi-tenant deployment (Tenancy=multi)")
    parser.add_argument("--env-file", type=Path, default=Path(".env"), help="dotenv file (default ./.env)")
    parser.add_argument(
        "--stack",
        default="amsg",
        help="the stack whose ApiUrl output builds the cron webhook URL when AMSG_PUBLIC_BASE_URL is not set "
        "(default amsg)",
    )
    actions = parser.add_subparsers(dest="tenants_command", required=True)
    create = actions.add_parser("create", help="create a tenant and print its tokens")
    create.add_argument("--tenant-id", help="a UUID v4 (default: a random one)")
    actions.add_parser("list", help="list every tenant")
    usage = actions.add_parser("usage", help="pending and settled tasks per tenant (every tenant without an id)")
    usage.add_argument("tenant_id", nargs="?")
    for name, text in (
        ("rotate-tokens", "revoke every token of the tenant and print new ones"),
        ("disable", "refuse the tenant's requests and deliveries (its data stays)"),
        ("enable", "serve a disabled tenant again"),
        ("delete", "mark the tenant deleting and start removing all its items"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("tenant_id")
    delete = actions.choices["delete"]
    delete.add_argument("--wait", action="store_true", help="wait until the tick has removed everything")
    delete.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS", help="--wait's limit (3600)")
    limit = actions.add_parser("set-rate-limit", help="the tenant's requests per second (overrides the default)")
    limit.add_argument("tenant_id")
    limit.add_argument("rps", help="requests per second (0: no limit), or 'default' for the deployment's")


def main(args: argparse.Namespace) -> int:
    from amsg import runtime
    from amsg.config import ConfigError
    from amsg.ports.tenants import TenantExists, TenantNotFound
    from amsg.tenancy.lifecycle import TenancyUnavailable
    from botocore.exceptions import BotoCoreError, ClientError

    values = {**read_env_file(args.env_file), **os.environ}
    try:
        if args.tenants_command in ("create", "rotate-tokens"):  # they print a cron webhook URL
            values = public_base_url.with_public_base_url(values, args.stack)
        ctx = runtime.build_context(values)
        return _run(ctx, args)
    except (ConfigError, TenancyUnavailable) as exc:
        print(f"amsg tenants: {exc}", file=sys.stderr)
        return 2
    except TenantExists as exc:
        print(f"amsg tenants: tenant {exc} exists already", file=sys.stderr)
        return 1
    except TenantNotFound as exc:
        print(f"amsg tenants: no tenant {exc}", file=sys.stderr)
        return 1
    except (BotoCoreError, ClientError) as exc:
        print(f"amsg tenants: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _run(ctx: Any, args: argparse.Namespace) -> int:
    from amsg.tenancy import lifecycle

    command = args.tenants_command
    if command == "create":
        new_id = _tenant_id(args.tenant_id)
        if new_id is None:
            print("amsg tenants: --tenant-id must be a UUID v4", file=sys.stderr)
            return 2
        _print_credentials(lifecycle.credentials(ctx, lifecycle.create(ctx, new_id)))
        return 0
    typed = getattr(args, "tenant_id", None)
    tenant_id = lifecycle.resolve_tenant_id(ctx, typed) if typed else ""
    if command == "list":
        _print([_row(record) for record in lifecycle.all_records(ctx)])
    elif command == "rotate-tokens":
        _print_credentials(lifecycle.rotate_tokens(ctx, tenant_id))
    elif command in ("disable", "enable"):
        _print(_row(lifecycle.set_status(ctx, tenant_id, "disabled" if command == "disable" else "active")))
    elif command == "delete":
        return _delete(ctx, tenant_id, args.timeout if args.wait else None)
    elif command == "usage":
        _print(_usage(ctx, tenant_id or None))
    elif command == "set-rate-limit":
        rps = None if args.rps == "default" else int(args.rps)
        _print(_row(lifecycle.registry_of(ctx).set_rate_limit(tenant_id, rps, ctx.now_ms())))
    return 0


def _print_credentials(credentials: dict[str, Any]) -> None:
    """The new tokens; a cron webhook URL nobody can call is left out, with how to get the real one."""
    if not credentials.get("cronWebhookUrl"):
        credentials = {k: v for k, v in credentials.items() if k != "cronWebhookUrl"}
        print(f"amsg tenants: {public_base_url.HOW_TO_SET}", file=sys.stderr)
    _print(credentials)


def _delete(ctx: Any, tenant_id: str, wait_s: float | None) -> int:
    from amsg.engine.tenant_deletion import start_tenant_deletion

    start_tenant_deletion(ctx, tenant_id)  # records the work, then marks the tenant deleting
    record = ctx.tenant_registry.get(tenant_id)
    status = _row(record) if record is not None else {"tenantId": tenant_id}
    if wait_s is None:
        _print({**status, "deletion": "started: the tick removes every item of the tenant, then its record"})
        return 0
    finished, deleted = _wait_for_purge(ctx, tenant_id, wait_s)
    outcome = "finished" if finished else f"still running after {wait_s:g} s: the tick carries on"
    _print({"tenantId": tenant_id, "deletion": outcome, "itemsDeleted": deleted})
    return 0 if finished else 1


def _wait_for_purge(ctx: Any, tenant_id: str, timeout_s: float, poll_s: float = 1.0) -> tuple[bool, int]:
    """Poll the deletion until its record is gone (the tick removed everything, then the tenant's record);
    ``(finished, items removed as last seen)``. Progress on a terminal, nothing in a pipe."""
    from amsg_local.progress import Progress

    progress = Progress()
    deadline = time.monotonic() + timeout_s
    deleted = 0
    while True:
        status = ctx.tenant_purge.status(tenant_id)
        if status is None or time.monotonic() >= deadline:
            progress.done()
            return status is None, deleted
        deleted = status.deleted
        grace = ", waiting for deliveries that were running to end" if status.clean_pass else ""
        progress.update(f"deleting tenant {tenant_id}: {deleted} items removed{grace}")
        time.sleep(poll_s)


def _usage(ctx: Any, tenant_id: str | None) -> list[dict[str, Any]]:
    from amsg.tenancy import lifecycle

    registry = lifecycle.registry_of(ctx)
    records = lifecycle.all_records(ctx) if tenant_id is None else [r for r in [registry.get(tenant_id)] if r]
    shards = ctx.settings.due_shards
    return [{"tenantId": r.tenant_id, "status": r.status, **registry.usage(r.tenant_id, shards)} for r in records]


def _tenant_id(given: str | None) -> str | None:
    from amsg.http.gates import UUID_V4_RE
    from amsg.tenancy.ids import canonical_tenant_id
    from amsg.tenancy.lifecycle import new_tenant_id

    if given is None:
        return new_tenant_id()
    return canonical_tenant_id(given) if UUID_V4_RE.match(given) else None


def _row(record: Any) -> dict[str, Any]:
    return {
        "tenantId": record.tenant_id,
        "status": record.status,
        "tokenGeneration": record.token_generation,
        "tokensNotBefore": _iso(record.tokens_not_before_s * 1000),
        "createdAt": _iso(record.created_at_ms),
        "updatedAt": _iso(record.updated_at_ms),
        "masterKeyFingerprint": record.master_key_fingerprint,
        "rateLimitRps": record.rate_limit_rps,
    }


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def _print(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))
