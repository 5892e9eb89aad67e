"""``amsg invoke``: ``sam local invoke`` without Docker, against the local stack's storage.

``amsg invoke TickFunction -e events/tick.json [--env-vars env-vars.json]`` runs one function of template.yaml
once, the way ``amsg local`` runs it (:mod:`amsg_local.process_runtime`): its handler in a sandbox process of
its own, with its template environment, ``Timeout`` and ``MemorySize``. Like ``sam local invoke`` it prints the
function's logs and Lambda's ``START``/``END``/``REPORT`` lines on stderr and the response on stdout (an error
as Lambda's ``{"errorMessage", "errorType"}``), so ``amsg invoke ... | jq`` sees only the response.

Storage: by default a running ``amsg local`` (``make run``), found at ``--stack-url``: its DynamoDB, its task
queue and its clock (``GET /_local/environment``; the secrets come from the ``.env`` the stack saved them to,
checked against its master key's fingerprint). ``--dynamodb-endpoint URL`` instead uses a DynamoDB you run (the
table is created from the template when missing) and an in-memory task queue that lives for this invocation.

``--env-vars`` reads the file ``sam local invoke --env-vars`` reads: ``{"Parameters": {...}, "<LogicalId>":
{...}}``, the function's own entries winning; as with SAM only variables the template declares for the function
are set (the others are named on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from amsg_local.envfile import read_env_file
from amsg_local.invocation import Invocation
from amsg_local.stack_info import DEFAULT_STACK_URL, StackUnreachable, fetch, master_key_fingerprint
from amsg_local.template import FunctionSpec, TemplateError, function_spec, layer_dirs, load_template

__all__ = ["InvokeError", "add_parser", "function_environment", "main", "read_env_vars"]

_REGION = "us-east-1"
_LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}


class InvokeError(RuntimeError):
    """The invocation cannot start (bad input, no stack, wrong keys); ``str(exc)`` is the message."""


@dataclass(frozen=True)
class _Offset:
    """The running stack's clock offset, handed to the sandbox as the stack hands it to its own."""

    offset_ms: int


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "invoke",
        help="invoke one function of template.yaml with an event, like `sam local invoke` (no Docker)",
        description="Prints the response on stdout, the function's logs and the REPORT line on stderr.",
    )
    parser.add_argument("function", metavar="LogicalId", help="the function's logical id, e.g. TickFunction")
    parser.add_argument("-e", "--event", default=None, help="event file (JSON); '-' reads stdin; default {}")
    parser.add_argument("-n", "--env-vars", type=Path, default=None, help="JSON overrides, as sam reads them")
    parser.add_argument("--stack-url", default=None, help=f"the running `amsg local` (default {DEFAULT_STACK_URL})")
    parser.add_argument("--dynamodb-endpoint", metavar="URL", help="a DynamoDB you run instead of a running stack")
    parser.add_argument("-t", "--template", type=Path, default=None, help="template.yaml (default: found from cwd)")
    parser.add_argument("--env-file", type=Path, default=Path(".env"), help="dotenv file (default ./.env)")


def main(args: argparse.Namespace) -> int:
    try:
        template = load_template(args.template)
        spec = function_spec(template, args.function)
    except (TemplateError, OSError) as exc:
        print(f"amsg invoke: {exc}", file=sys.stderr)
        return 2
    try:
        event = _read_event(args.event)
        overrides = read_env_vars(args.env_vars)
        values = {**read_env_file(args.env_file), **{k: v for k, v in os.environ.items() if k.startswith("AMSG_")}}
        with _storage(args, template, values) as (stack_env, offset):
            env, ignored = function_environment(spec, stack_env, values, overrides)
            if ignored:
                print(f"amsg invoke: not declared by {spec.logical_id}, ignored: {', '.join(ignored)}", file=sys.stderr)
            for directory in layer_dirs(template):
                if str(directory) not in sys.path:
                    sys.path.insert(0, str(directory))
            invocation = invoke_once(spec, env, event, offset)
    except (InvokeError, StackUnreachable) as exc:
        print(f"amsg invoke: {exc}", file=sys.stderr)
        return 2
    _print_response(invocation, sys.stdout)
    return 0 if invocation.ok else 1


def _read_event(path: str | None) -> Any:
    if path is None:
        return {}
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        return json.loads(text)
    except OSError as exc:
        raise InvokeError(f"cannot read the event {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvokeError(f"the event {path} is not JSON: {exc}") from None


def read_env_vars(path: Path | None) -> dict[str, dict[str, str]]:
    """The ``--env-vars`` file: ``{"Parameters" | LogicalId: {VAR: value}}`` with every value as text."""
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvokeError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvokeError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise InvokeError(f'{path}: expected {{"Parameters": {{...}}, "<LogicalId>": {{...}}}} (objects of variables)')
    return {
        section: {str(k): _text(v) for k, v in variables.items() if v is not None}
        for section, variables in data.items()
    }


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def function_environment(
    spec: FunctionSpec,
    stack_env: Mapping[str, str],
    values: Mapping[str, str],
    overrides: Mapping[str, Mapping[str, str]],
) -> tuple[dict[str, str], list[str]]:
    """The sandbox's environment and the override names the template does not declare (SAM ignores them too).

    Lowest first: this process's environment (PATH, HOME...; no AMSG_* of the shell), the template's variables
    (SSM ``*_PARAM`` names dropped: the secrets come as values), the ``.env``/shell AMSG_* values, the stack's
    endpoints and names, then the overrides (``Parameters``, then the function's own).
    """
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AMSG_", "AWS_ENDPOINT_URL"))}
    template_env = {k: v for k, v in spec.environment.items() if not k.endswith("_PARAM")}
    env = {**base, **template_env, **values, **stack_env}
    env.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    ignored: list[str] = []
    for section in ("Parameters", spec.logical_id):
        for key, value in (overrides.get(section) or {}).items():
            if key in spec.environment:
                env[key] = value
            elif key not in ignored:
                ignored.append(key)
    return env, ignored


@contextlib.contextmanager
def _storage(
    args: argparse.Namespace, template: Mapping[str, Any], values: Mapping[str, str]
) -> Iterator[tuple[dict[str, str], int | None]]:
    """``(stack environment, clock offset)`` of the running stack, or of ``--dynamodb-endpoint`` plus a queue."""
    if args.dynamodb_endpoint:
        with _own_queue(template, args.dynamodb_endpoint, values) as env:
            yield env, None
        return
    answer = fetch(args.stack_url or os.environ.get("AMSG_STACK_URL") or DEFAULT_STACK_URL)
    _check_master_key(answer.get("masterKeyFingerprint"), values, args.env_file)
    env = dict(answer["environment"])
    if env.get("AWS_ENDPOINT_URL_DYNAMODB"):  # local endpoints take any key; a stack on AWS uses yours
        env.update(_LOCAL_CREDENTIALS)
    env.setdefault("AWS_REGION", env.get("AWS_DEFAULT_REGION", _REGION))
    offset = answer.get("clockOffsetMs")
    yield env, int(offset) if isinstance(offset, int) else None


def _check_master_key(expected: str | None, values: Mapping[str, str], env_file: Path) -> None:
    """The events and the stack's data are encrypted under the stack's key: refuse another one, loudly."""
    if not expected:
        return
    mine = values.get("AMSG_MASTER_KEY", "").strip()
    if not mine:
        raise InvokeError(
            f"the running stack's master key is not in {env_file} or AMSG_MASTER_KEY (start `amsg local` with "
            "--save-keys, its default, or set the key it uses)"
        )
    if master_key_fingerprint(mine) != expected:
        raise InvokeError(
            f"the master key in {env_file}/AMSG_MASTER_KEY (fingerprint {master_key_fingerprint(mine)}) is not the "
            f"running stack's ({expected})"
        )


@contextlib.contextmanager
def _own_queue(template: Mapping[str, Any], endpoint: str, values: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """The table at ``endpoint`` (created from the template when missing) and a task queue for this run only."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from amsg_local.sqs_model import LocalSqsClient
    from amsg_local.sqs_server import SqsServer
    from amsg_local.tables import create_queue_from_template, create_tables_from_template

    table = values.get("AMSG_TABLE_NAME") or "amsg-local"
    ddb = boto3.client("dynamodb", region_name=_REGION, endpoint_url=endpoint, **_boto_credentials())
    try:
        create_tables_from_template(ddb, template, table, timeout_s=30.0)
    except (BotoCoreError, ClientError, TimeoutError) as exc:
        raise InvokeError(f"cannot reach the table {table} at {endpoint}: {exc}") from None
    server = SqsServer(region=_REGION).start()
    try:
        queue = create_queue_from_template(LocalSqsClient(server.sqs), template, f"{table}-tasks")
        yield {
            "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
            "AWS_ENDPOINT_URL_SQS": server.endpoint_url,
            "AWS_REGION": _REGION,
            "AWS_DEFAULT_REGION": _REGION,
            "AMSG_TABLE_NAME": table,
            "AMSG_QUEUE_URL": queue.url,
            **_LOCAL_CREDENTIALS,
        }
    finally:
        server.stop()


def _boto_credentials() -> dict[str, str]:
    return {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


def invoke_once(spec: FunctionSpec, env: Mapping[str, str], event: Any, offset_ms: int | None) -> Invocation:
    """One invocation in a fresh sandbox process; its stdout joins stderr, where the REPORT line goes too."""
    from amsg_local.process_runtime import ProcessFunctionRuntime

    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or _REGION
    clock = _Offset(offset_ms) if offset_ms is not None else None
    runtime = ProcessFunctionRuntime(spec, region, max_sandboxes=1, environment=lambda: dict(env), clock=clock)
    with _lambda_lines(), _stdout_to_stderr():
        try:
            invocation: Invocation = runtime.invoke(event)
            return invocation
        finally:
            runtime.close()


@contextlib.contextmanager
def _lambda_lines() -> Iterator[None]:
    """The runtime's INIT_START/START/END/REPORT lines (and its errors) on stderr, as Lambda writes them."""
    logger = logging.getLogger("local_stack.lambda")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """The sandbox inherits file descriptor 1: point it at stderr while it runs, so stdout holds the response."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _print_response(invocation: Invocation, out: TextIO) -> None:
    if invocation.ok:
        out.write(json.dumps(invocation.value, ensure_ascii=False) + "\n")
    else:
        error = {"errorMessage": invocation.error_message or "", "errorType": invocation.error_type}
        out.write(json.dumps(error, ensure_ascii=False) + "\n")
    out.flush()
