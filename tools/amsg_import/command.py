"""``amsg import``: the command line, the master-key check, progress and the end report.

Order of work: open the source and recognise its schema version → check that a sample of every encrypted kind
decrypts with the master key (a wrong key stops here, before any write) → raise per-user id counters → write
every kind with conditional writes (see :mod:`amsg_import.writer`) → report. Nothing secret is printed: no
key, no plaintext, no ciphertext; rows are named by user id and uuid / message id / namespace and key.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

from amsg.adapters.dynamo.keys import tenant_space
from amsg.tenancy.ids import valid_tenant_id

from amsg_import.reader import KINDS, OutboxRecord, Problem, Record, ReferenceReader
from amsg_import.sources import Source, SourceError, open_source
from amsg_import.tenant import MAX_BLOB_CHARS, TenantConfigError, open_tenant_config, register_tenant
from amsg_import.vapid_check import vapid_warning
from amsg_import.writer import FAILED, RETENTION_SKIP, SKIPPED, WRITTEN, Outcome, TargetWriter, outbox_ttl

KEY_SAMPLE = 3
EXAMPLES_PER_REASON = 3


class ImportStopped(Exception):
    """The import cannot start (wrong master key, unreadable source, missing table); nothing was written."""


# ---- report -------------------------------------------------------------------------------------------------


@dataclass
class KindStats:
    read: int = 0
    written: int = 0
    skipped: int = 0
    failed: int = 0
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)
    examples: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def add(self, outcome: Outcome, ref: str) -> None:
        self.read += 1
        if outcome.status == WRITTEN:
            self.written += 1
        elif outcome.status == SKIPPED:
            self.skipped += 1
        else:
            self.failed += 1
        if outcome.reason:
            key = (outcome.status, outcome.reason)
            self.reasons[key] += 1
            if outcome.status != WRITTEN:
                examples = self.examples.setdefault(key, [])
                if len(examples) < EXAMPLES_PER_REASON:
                    examples.append(ref)


@dataclass
class Report:
    dry_run: bool
    source: dict[str, Any]
    key_check: dict[str, dict[str, int]] = field(default_factory=dict)
    kinds: dict[str, KindStats] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(s.failed for s in self.kinds.values())

    def totals(self) -> dict[str, int]:
        return {
            name: sum(getattr(s, name) for s in self.kinds.values())
            for name in ("read", "written", "skipped", "failed")
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "source": self.source,
            "keyCheck": self.key_check,
            "counters": self.counters,
            "kinds": {
                kind: {
                    "read": s.read,
                    "written": s.written,
                    "skipped": s.skipped,
                    "failed": s.failed,
                    "reasons": [
                        {
                            "status": status,
                            "reason": reason,
                            "count": count,
                            "examples": s.examples.get((status, reason), []),
                        }
                        for (status, reason), count in sorted(s.reasons.items())
                    ],
                }
                for kind, s in self.kinds.items()
            },
            "totals": self.totals(),
            "seconds": round(self.seconds, 2),
            "warnings": self.warnings,
        }

    def render(self) -> str:
        written = "would write" if self.dry_run else "written"
        lines = [
            f"source   {self.source.get('source')}: schema {self.source.get('schema')}",
            f"tables   {', '.join(self.source.get('tables', []))}",
            "key      "
            + (
                ", ".join(f"{k} {v['decrypted']}/{v['sampled']}" for k, v in self.key_check.items())
                or "nothing encrypted to check"
            ),
        ]
        if self.counters:
            lines.append("counters " + ", ".join(f"{k} ids continue after {v}" for k, v in self.counters.items()))
        lines.append("")
        lines.append(f"{'kind':<14}{'read':>8}{written:>13}{'skipped':>9}{'failed':>8}")
        for kind, s in self.kinds.items():
            lines.append(f"{kind:<14}{s.read:>8}{s.written:>13}{s.skipped:>9}{s.failed:>8}")
        t = self.totals()
        lines.append(f"{'total':<14}{t['read']:>8}{t['written']:>13}{t['skipped']:>9}{t['failed']:>8}")
        details = [
            (kind, status, reason, count, s.examples.get((status, reason), []))
            for kind, s in self.kinds.items()
            for (status, reason), count in sorted(s.reasons.items())
        ]
        if details:
            lines.append("")
            for kind, status, reason, count, examples in details:
                shown = f" (e.g. {'; '.join(examples)})" if examples else ""
                lines.append(f"  {kind}: {count} {status}: {reason}{shown}")
        lines.append("")
        lines += [f"WARNING  {warning}" for warning in self.warnings]
        if self.dry_run:
            lines.append("dry run: nothing was written.")
        elif self.failed:
            lines.append(
                f"{self.failed} row(s) failed; fix the cause and run the same command again (done rows are skipped)."
            )
        else:
            lines.append("done. Running the same command again is safe: it skips what is already here.")
        return "\n".join(lines)


# ---- progress -----------------------------------------------------------------------------------------------


class Progress:
    """Counts per kind on one line (:class:`amsg_local.progress.Progress`: redrawn on a terminal; in a pipe, a
    line every few thousand rows and one per finished kind, so a long import's log shows how far it got)."""

    def __init__(self, stream: TextIO, *, every: int = 2000) -> None:
        from amsg_local.progress import Progress as Line

        self.line = Line(stream, every=every)

    def _text(self, kind: str, s: KindStats, label: str) -> str:
        return f"{kind:<14}{s.read:>8} read {s.written:>8} {label} {s.skipped:>7} skipped {s.failed:>6} failed"

    def update(self, kind: str, s: KindStats, label: str) -> None:
        self.line.update(self._text(kind, s, label), s.read)

    def done(self, kind: str, s: KindStats, label: str) -> None:
        self.line.done(self._text(kind, s, label))


# ---- the import ---------------------------------------------------------------------------------------------


SINGLE_KEY_HINT = "Use the reference deployment's master key (AMSG_MASTER_KEY)"
TENANT_KEY_HINT = (
    "--tenant reads the master key from the tenant config it opens with the KEK (--kek-env/--kek-file), not "
    "AMSG_MASTER_KEY: check that the config blob, its KEK and the database (--database-url or the config's) are "
    "the same tenant's"
)


def check_master_key(
    reader: ReferenceReader, sample: int = KEY_SAMPLE, *, hint: str = SINGLE_KEY_HINT
) -> dict[str, dict[str, int]]:
    """Decrypt the first ``sample`` ciphertexts of every kind; a kind where none decrypts stops the import with
    ``hint``: where the key came from."""
    results: dict[str, dict[str, int]] = {}
    for kind in KINDS:
        tried = ok = 0
        for user_id, ciphertext in islice(reader.ciphertexts(kind), sample):
            tried += 1
            ok += reader.decrypts(user_id, ciphertext)
        if tried:
            results[kind] = {"sampled": tried, "decrypted": ok}
    wrong = [kind for kind, r in results.items() if r["decrypted"] == 0]
    if wrong:
        raise ImportStopped(
            "the master key does not decrypt the source's data "
            f"({', '.join(f'{k}: 0 of {results[k]["sampled"]}' for k in wrong)}). {hint}; nothing was written."
        )
    return results


class DryRunWriter:
    """Decides from the source alone what an import into an empty table would do (touches no table)."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def dispatch(self, kind: str, record: Record) -> Outcome:
        if isinstance(record, OutboxRecord) and outbox_ttl(record) <= self.now_ms // 1000:
            return Outcome(SKIPPED, RETENTION_SKIP)
        if kind == "tasks" and getattr(record, "uuid_derived", False):
            return Outcome(WRITTEN, "legacy row without uuid: given a derived uuid")
        if kind == "state" and getattr(record, "chunked", False):
            return Outcome(WRITTEN, "chunked value joined")
        return Outcome(WRITTEN)


def _dispatcher(writer: TargetWriter) -> Callable[[str, Record], Outcome]:
    def dispatch(kind: str, record: Record) -> Outcome:
        outcome = writer.write(kind, record)
        if kind == "tasks" and outcome.status == WRITTEN and getattr(record, "uuid_derived", False):
            return Outcome(WRITTEN, "legacy row without uuid: given a derived uuid")
        return outcome

    return dispatch


def run_import(
    source: Source,
    *,
    master_key: str,
    table: Any = None,
    due_shards: int = 1,
    dry_run: bool = False,
    now_ms: int | None = None,
    progress: TextIO | None = None,
    kinds: tuple[str, ...] = KINDS,
    space: Any = None,
) -> Report:
    """Import ``source`` into ``table`` (a :class:`~amsg.adapters.dynamo.table.DynamoTable`); returns the
    report. Raises :class:`ImportStopped` before any write when the source or the key is wrong. ``space`` (an
    ``amsg.adapters.dynamo.keys.KeySpace``) is the tenant's for ``--tenant``; the single-user line's otherwise."""
    started = time.monotonic()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    reader = ReferenceReader(source, master_key)
    report = Report(dry_run=dry_run, source=reader.describe())
    report.key_check = check_master_key(reader)
    report.counters = {name: reader.id_floor(name) for name in ("tasks", "outbox") if reader.has(name)}
    dispatch: Callable[[str, Record], Outcome]
    if dry_run:
        dispatch = DryRunWriter(now).dispatch
    else:
        if table is None:
            raise ImportStopped("no target table")
        writer = TargetWriter(
            table,
            due_shards=due_shards,
            now_ms=now,
            task_floor=report.counters.get("tasks", 0),
            outbox_floor=report.counters.get("outbox", 0),
            **({"space": space} if space is not None else {}),
        )
        dispatch = _dispatcher(writer)
    label = "would write" if dry_run else "written"
    bar = Progress(progress) if progress is not None else None
    for kind in kinds:
        if not reader.has(kind):
            continue
        stats = report.kinds.setdefault(kind, KindStats())
        for item in reader.read(kind):
            if isinstance(item, Problem):
                stats.add(Outcome(FAILED, item.reason), f"{item.user_id} {item.ref}")
            else:
                ref = f"{item.user_id} {item.ref}"
                try:
                    outcome = dispatch(kind, item)
                except Exception as exc:  # one bad row must not stop the rest; the type is enough to act on
                    outcome = Outcome(FAILED, f"write error ({type(exc).__name__})")
                stats.add(outcome, ref)
            if bar:
                bar.update(kind, stats, label)
        if bar:
            bar.done(kind, stats, label)
    report.seconds = time.monotonic() - started
    return report


# ---- command line -------------------------------------------------------------------------------------------


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "import",
        help="import a reference deployment's database (D1/SQLite file, `wrangler d1 export` dump, Postgres URL)",
        description="Copy a reference amsg-server database into this deployment's table, with the same master "
        "key. Safe to run again: conditional writes skip what is already here and never overwrite newer data.",
    )
    parser.add_argument(
        "source",
        nargs="?",
        help="a .sqlite/.db file, a .sql dump, or postgres://user@host/db (with --tenant: default the database "
        "named in the tenant config)",
    )
    parser.add_argument("--dry-run", action="store_true", help="read and check everything, write nothing")
    parser.add_argument("--dynamodb-endpoint", metavar="URL", help="target DynamoDB endpoint (e.g. DynamoDB Local)")
    parser.add_argument("--table", metavar="NAME", help="target table (default AMSG_TABLE_NAME)")
    parser.add_argument("--region", help="AWS region of the table (default from the environment)")
    parser.add_argument("--env-file", type=Path, default=Path(".env"), help="dotenv file (default ./.env)")
    parser.add_argument("--json", action="store_true", help="print the end report as JSON")
    parser.add_argument(
        "--reference-vapid-public-key",
        metavar="KEY",
        help="the reference's VAPID public key (default NEXT_PUBLIC_VAPID_PUBLIC_KEY): checked against "
        "AMSG_VAPID_PUBLIC_KEY, since the imported push subscriptions only accept pushes signed with it",
    )
    tenant = parser.add_argument_group(
        "a tenant of a reference multi-tenant deployment (this deployment runs with AMSG_TENANCY=multi)"
    )
    tenant.add_argument("--tenant", metavar="ID", help="the tenant id to move in, with its master key")
    tenant.add_argument(
        "--tenant-config", metavar="FILE", help="the tenant's exported v1. config blob (a file, or - for stdin)"
    )
    tenant.add_argument("--kek-env", metavar="VAR", help="the environment variable holding the reference's KEK")
    tenant.add_argument("--kek-file", metavar="FILE", type=Path, help="a file holding the reference's KEK")
    tenant.add_argument("--database-url", metavar="URL", help="read the tenant's data here, not from its config")
    tenant.add_argument(
        "--resume", action="store_true", help="the tenant exists from an earlier run of this import: continue it"
    )


def _table(values: Mapping[str, str], args: argparse.Namespace) -> Any:
    from amsg.adapters.dynamo.table import DynamoTable

    name = (args.table or values.get("AMSG_TABLE_NAME") or "").strip()
    if not name:
        raise ImportStopped("no target table: pass --table NAME or set AMSG_TABLE_NAME")
    endpoint = args.dynamodb_endpoint or values.get("AWS_ENDPOINT_URL_DYNAMODB") or None
    region = args.region or values.get("AWS_REGION") or values.get("AWS_DEFAULT_REGION") or None
    if endpoint:
        region = region or "us-east-1"
        if not values.get("AWS_ACCESS_KEY_ID"):  # DynamoDB Local accepts any credentials
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    table = DynamoTable(name, endpoint_url=endpoint, region=region)
    try:
        table.client.describe_table(TableName=name)
    except Exception as exc:
        raise ImportStopped(f"target table {name} is not reachable ({type(exc).__name__})") from None
    return table


def main(args: argparse.Namespace) -> int:
    from amsg_local.envfile import read_env_file

    values = {**read_env_file(args.env_file), **os.environ}
    if args.tenant or args.tenant_config:
        return tenant_main(args, values)
    if not args.source:
        print("amsg import: name the source (a file or a postgres:// URL)", file=sys.stderr)
        return 2
    return _single_main(args, values)


def _single_main(args: argparse.Namespace, values: Mapping[str, str]) -> int:
    from amsg.config import ConfigError
    from amsg.runtime import secrets_from_env

    source: Source | None = None
    try:
        try:
            master_key = secrets_from_env(values).master_key
        except ConfigError as exc:
            raise ImportStopped(str(exc)) from None
        source = open_source(args.source)
        table = None if args.dry_run else _table(values, args)
        due_shards = int(values.get("AMSG_DUE_SHARDS") or 1)
        report = run_import(
            source,
            master_key=master_key,
            table=table,
            due_shards=due_shards,
            dry_run=args.dry_run,
            progress=sys.stderr,
        )
    except (ImportStopped, SourceError) as exc:
        print(f"amsg import: {exc}", file=sys.stderr)
        return 2
    finally:
        if source is not None:
            source.close()
    _warn_about_push(report, values, args)
    print(json.dumps(report.as_json(), ensure_ascii=False, indent=2) if args.json else report.render())
    return 1 if report.failed else 0


def _warn_about_push(report: Report, values: Mapping[str, str], args: argparse.Namespace) -> None:
    """Push keeps working only with the reference's VAPID pair (:mod:`amsg_import.vapid_check`)."""
    subscribed = sum(report.kinds[kind].read for kind in ("subscriptions", "tasks") if kind in report.kinds)
    warning = vapid_warning(values, args.reference_vapid_public_key, subscribed)
    if warning:
        report.warnings.append(warning)


# ---- --tenant: a tenant of a reference multi-tenant deployment (docs/tenancy.md, "moving in") -------------


def _read_kek(args: argparse.Namespace, values: Mapping[str, str]) -> str:
    """The KEK from an environment variable or a file, never from the command line (shell history, ps)."""
    if bool(args.kek_env) == bool(args.kek_file):
        raise ImportStopped("name the reference's KEK with exactly one of --kek-env VAR or --kek-file FILE")
    if args.kek_env:
        kek = values.get(args.kek_env, "")
        if not kek.strip():
            raise ImportStopped(f"the environment variable {args.kek_env} is empty or not set")
        return kek
    try:
        kek = Path(args.kek_file).read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise ImportStopped(f"cannot read the KEK file ({type(exc).__name__})") from None
    if not kek.strip():
        raise ImportStopped("the KEK file is empty")
    return kek


def _read_blob(name: str | None) -> str:
    if not name:
        raise ImportStopped("--tenant needs --tenant-config FILE (or - for stdin): the tenant's exported v1. blob")
    try:
        if name == "-":
            blob = sys.stdin.read(MAX_BLOB_CHARS + 1)
        else:
            with open(name, encoding="utf-8") as handle:
                blob = handle.read(MAX_BLOB_CHARS + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportStopped(f"cannot read the tenant config ({type(exc).__name__})") from None
    return blob.strip()


def _tenant_target(values: Mapping[str, str], args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(table, registry, key wrapper) of a multi-tenant deployment."""
    from amsg.adapters.dynamo.tenants import DynamoTenantStore
    from amsg.adapters.kms import KmsKeyWrapper

    if (values.get("AMSG_TENANCY") or "").strip().lower() != "multi":
        raise ImportStopped("--tenant imports into a multi-tenant deployment: set AMSG_TENANCY=multi")
    kms_key = (values.get("AMSG_KMS_KEY_ID") or "").strip()
    if not kms_key:
        raise ImportStopped("AMSG_KMS_KEY_ID is not set (the tenant's master key is stored wrapped by it)")
    table = _table(values, args)
    region = args.region or values.get("AWS_REGION") or values.get("AWS_DEFAULT_REGION") or None
    endpoint = values.get("AWS_ENDPOINT_URL_KMS") or None
    wrapper = KmsKeyWrapper(kms_key, endpoint_url=endpoint, region=region or ("us-east-1" if endpoint else None))
    return table, DynamoTenantStore(table), wrapper


def import_tenant(
    config: Any,
    source: Source,
    *,
    target: tuple[Any, Any, Any] | None,
    due_shards: int = 1,
    resume: bool = False,
    dry_run: bool = False,
    now_ms: int | None = None,
    progress: TextIO | None = None,
) -> Report:
    """Check the key against the source, register the tenant (its own master key, wrapped), then import the
    source into the tenant's key space. ``target`` is (table, registry, wrapper); None only for a dry run."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    # a wrong key stops before the tenant exists
    check_master_key(ReferenceReader(source, config.master_key), hint=TENANT_KEY_HINT)
    registered = "would be created"
    table = None
    if not dry_run:
        if target is None:
            raise ImportStopped("no target table")
        table, registry, wrapper = target
        _, created = register_tenant(registry, wrapper, config, now, resume=resume)
        registered = "created" if created else "resumed (exists with this master key)"
    report = run_import(
        source,
        master_key=config.master_key,
        table=table,
        due_shards=due_shards,
        dry_run=dry_run,
        now_ms=now,
        progress=progress,
        space=tenant_space(config.tenant_id),
    )
    report.source = {**report.source, "tenant": config.tenant_id, "tenantRecord": registered}
    return report


def tenant_main(args: argparse.Namespace, values: Mapping[str, str]) -> int:
    source: Source | None = None
    try:
        if not args.tenant or not valid_tenant_id(args.tenant):
            raise ImportStopped("--tenant ID (a reference tenant id, a UUID) is required with --tenant-config")
        config = open_tenant_config(_read_blob(args.tenant_config), _read_kek(args, values), args.tenant)
        location = args.database_url or args.source or config.connection_string
        if not location:
            raise ImportStopped("the tenant config names no database: pass --database-url URL")
        source = open_source(location)
        report = import_tenant(
            config,
            source,
            target=None if args.dry_run else _tenant_target(values, args),
            due_shards=int(values.get("AMSG_DUE_SHARDS") or 1),
            resume=args.resume,
            dry_run=args.dry_run,
            progress=sys.stderr,
        )
    except (ImportStopped, SourceError, TenantConfigError) as exc:
        print(f"amsg import: {exc}", file=sys.stderr)
        return 2
    finally:
        if source is not None:
            source.close()
    _warn_about_push(report, values, args)
    if args.json:
        print(json.dumps(report.as_json(), ensure_ascii=False, indent=2))
    else:
        print(f"tenant   {report.source['tenant']}: record {report.source['tenantRecord']}\n{report.render()}")
    return 1 if report.failed else 0
