"""Composition root: reads the environment (lazily, on the first request) and wires adapters to ports.

Tests and the local stack call :func:`use` to install a context of their own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypedDict

from amsg import snapstart
from amsg.clock import SystemClock
from amsg.config import AwsAccess, ConfigError, Secrets, Settings
from amsg.context import AppContext, DeliveryPorts, StoragePorts
from amsg.observability import logger, start_tracing

if TYPE_CHECKING:  # annotations only (docs/cold-start.md)
    from amsg.adapters.dynamo.keys import KeySpace
    from amsg.adapters.dynamo.table import DynamoTable
    from amsg.adapters.ssm import SsmSecretReader
    from amsg.ports import (
        Clock,
        KeyWrapper,
        LlmClient,
        PushSender,
        TaskQueue,
        TenantAccessor,
        TenantDirectory,
        TenantStore,
    )

_current: AppContext | None = None

SECRET_ENV = {
    "master_key": ("AMSG_MASTER_KEY", "AMSG_MASTER_KEY_PARAM"),
    "client_token": ("AMSG_CLIENT_TOKEN", "AMSG_CLIENT_TOKEN_PARAM"),
    "vapid_private_key": ("AMSG_VAPID_PRIVATE_KEY", "AMSG_VAPID_PRIVATE_KEY_PARAM"),
    "tenant_token_signing_key": ("AMSG_TENANT_TOKEN_SIGNING_KEY", "AMSG_TENANT_TOKEN_SIGNING_KEY_PARAM"),
    "init_secret": ("AMSG_INIT_SECRET", "AMSG_INIT_SECRET_PARAM"),
}


def app_context() -> AppContext:
    global _current
    if _current is None:
        start_tracing(os.environ)
        _current = build_context(os.environ)
    return _current


def prepare(*, storage: bool = False, secrets: tuple[str, ...] = (), push: bool = False) -> None:
    """Init-phase work of a handler module: import and build, at module level, what its first request will
    need (the table's client, the SSM client, with ``push`` the Web Push stack's imports), reading and sending
    nothing.

    Only inside a Lambda init (``AWS_LAMBDA_INITIALIZATION_TYPE`` is set): Lambda runs init with a full CPU
    burst while a 512 MB invocation gets ~0.3 vCPU, so this work costs a user less here than on first use
    (docs/decisions.md, figures in docs/cold-start.md). Tests and the local stack import handlers without it.
    Never fatal: what fails here fails again on the first request, which reports it as usual."""
    if not os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE"):
        return
    try:
        context = app_context()
        context.secrets.prepare(secrets)
        if storage:
            context.storage.prepare()
        if push:
            from amsg.adapters.webpush_sender import load_push_stack

            load_push_stack()
    except Exception as exc:
        logger.warning("init-phase preparation failed; the first request builds it", extra={"error": repr(exc)})


def use(context: AppContext | None) -> None:
    """Install (or with None, forget) the process-wide context."""
    global _current
    _current = context


snapstart.on_reset(lambda: use(None))  # a restored sandbox builds its own context (docs/operations.md)


def _metrics_tenants(env: Mapping[str, str]) -> frozenset[str]:
    """``AMSG_METRICS_TENANTS``: comma-separated tenant ids, at most MAX_METRIC_TENANTS (each one is a metric)."""
    from amsg.observability import MAX_METRIC_TENANTS

    names = frozenset(part.strip().lower() for part in env.get("AMSG_METRICS_TENANTS", "").split(",") if part.strip())
    if len(names) > MAX_METRIC_TENANTS:
        raise ConfigError(f"AMSG_METRICS_TENANTS names at most {MAX_METRIC_TENANTS} tenants")
    return names


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer") from None


def _ttl_config(raw: str | None) -> dict[str, float]:
    if not raw or not raw.strip():
        return {}  # the default: the client-state rules (and amsg.ports with them) load when a route needs them
    from amsg.domain.client_state import parse_ttl_config

    return parse_ttl_config(raw)


def settings_from_env(env: Mapping[str, str]) -> Settings:
    table = env.get("AMSG_TABLE_NAME", "").strip()
    if not table:
        raise ConfigError("AMSG_TABLE_NAME is not set")
    return Settings(
        table_name=table,
        queue_url=env.get("AMSG_QUEUE_URL") or None,
        claim_queue_url=env.get("AMSG_CLAIM_QUEUE_URL") or None,
        vapid_public_key=env.get("AMSG_VAPID_PUBLIC_KEY", "").strip(),
        vapid_email=env.get("AMSG_VAPID_EMAIL", "").strip(),
        due_shards=_int_env(env, "AMSG_DUE_SHARDS", 1),
        tick_claim_limit=_int_env(env, "AMSG_TICK_CLAIM_LIMIT", 5000),
        tick_claim_workers=_int_env(env, "AMSG_TICK_CLAIM_WORKERS", 4),
        tick_claim_lease_ms=_int_env(env, "AMSG_TICK_CLAIM_LEASE_MS", 300_000),
        claim_writes=_claim_writes(env),
        dynamo_statements=env.get("AMSG_DYNAMO_STATEMENTS", "on").strip().lower() not in ("off", "false", "0", "no"),
        claim_page_size=_int_env(env, "AMSG_CLAIM_PAGE_SIZE", 500),
        claim_backlog_limit=_int_env(env, "AMSG_CLAIM_BACKLOG_LIMIT", 20_000),
        run_lease_ms=_int_env(env, "AMSG_RUN_LEASE_MS", 90_000),
        heartbeat_ms=_int_env(env, "AMSG_HEARTBEAT_MS", 30_000),
        max_delivery_retries=_int_env(env, "AMSG_MAX_DELIVERY_RETRIES", 3),
        stale_after_ms=_int_env(env, "AMSG_STALE_AFTER_MS", 3_600_000),
        instant_deadline_ms=_int_env(env, "AMSG_INSTANT_DEADLINE_MS", 27_000),
        hooks_module=env.get("AMSG_HOOKS_MODULE") or None,
        push_pacing_ms=_int_env(env, "AMSG_PUSH_PACING_MS", 1500),
        llm_timeout_ms=_int_env(env, "AMSG_LLM_TIMEOUT_MS", 300_000),
        push_timeout_ms=_int_env(env, "AMSG_PUSH_TIMEOUT_MS", 10_000),
        client_state_ttl_days=_ttl_config(env.get("AMSG_CLIENT_STATE_TTL")),
        max_tool_iterations=_int_env(env, "AMSG_MAX_TOOL_ITERATIONS", 5),
        total_timeout_ms=_int_env(env, "AMSG_TOTAL_TIMEOUT_MS", 240_000),
        max_scheduled_tasks_per_fire=_int_env(env, "AMSG_MAX_SCHEDULED_TASKS_PER_FIRE", 2),
        cloud_data_management=env.get("AMSG_CLOUD_DATA_MANAGEMENT", "true").strip().lower() not in ("false", "0", "no"),
        tenancy=_tenancy(env),
        public_base_url=env.get("AMSG_PUBLIC_BASE_URL", "").strip().rstrip("/"),
        tenant_key_cache_s=_int_env(env, "AMSG_TENANT_KEY_CACHE_S", 300),
        kms_key_id=env.get("AMSG_KMS_KEY_ID", "").strip(),
        tenant_rate_limit_rps=_int_env(env, "AMSG_TENANT_RATE_LIMIT_RPS", 0),
        tenant_max_pending_tasks=_int_env(env, "AMSG_TENANT_MAX_PENDING_TASKS", 0),
        metrics_tenants=_metrics_tenants(env),
    )


def _claim_writes(env: Mapping[str, str]) -> str:
    value = env.get("AMSG_CLAIM_WRITES", "").strip().lower() or "single"
    if value not in ("single", "transaction"):
        raise ConfigError("AMSG_CLAIM_WRITES must be 'single' or 'transaction'")
    return value


def _tenancy(env: Mapping[str, str]) -> str:
    value = env.get("AMSG_TENANCY", "").strip().lower() or "single"
    if value not in ("single", "multi"):
        raise ConfigError("AMSG_TENANCY must be 'single' or 'multi'")
    return value


def secrets_from_env(env: Mapping[str, str]) -> Secrets:
    max_age_s = _int_env(env, "AMSG_SECRETS_MAX_AGE_S", 300)
    readers: list[SsmSecretReader] = []  # one reader (one SSM client and cache), built on the first SSM read

    def reader() -> SsmSecretReader:
        if not readers:
            from amsg.adapters.ssm import SsmSecretReader

            readers.append(SsmSecretReader(max_age_s=max_age_s))
        return readers[0]

    def resolve(name: str) -> str | None:
        direct, param = SECRET_ENV[name]
        if env.get(direct):
            return env[direct]
        if env.get(param):
            return reader().read(env[param])
        return None

    def prepare(names: tuple[str, ...]) -> None:
        if any(env.get(SECRET_ENV[name][1]) and not env.get(SECRET_ENV[name][0]) for name in names):
            _ = reader().provider  # the SSM client; the values are read on first use (rotation stays live)

    return Secrets(resolve, prepare)


def build_context(env: Mapping[str, str], *, clock: Clock | None = None) -> AppContext:
    """The context of one deployment; ``clock`` defaults to the wall clock (the local stack injects its own).

    Only settings and the secret resolver are built here; the table's ports are built on the first access
    and the delivery ports on theirs, so a route pays only for what it uses (docs/cold-start.md)."""
    settings = settings_from_env(env)
    secrets = secrets_from_env(env)
    # the mapping's region, keys and endpoints reach every client (tests, tools and the local stack build
    # contexts for other endpoints without touching os.environ)
    access = AwsAccess.from_env(env)
    return AppContext(
        settings=settings,
        secrets=secrets,
        clock=clock or SystemClock(),
        delivery=delivery_ports(settings, secrets, access),
        storage=lambda: storage_ports(settings, access),
        optional_ports=frozenset({"owners", "policies", "cloud_data", "coalescer"}),
    )


def storage_ports(settings: Settings, access: AwsAccess) -> StoragePorts:
    """The DynamoDB adapters of every storage port, sharing one table client; ``for_tenant`` builds a tenant's
    ports on that same client (docs/tenancy-data.md)."""
    from amsg.adapters.dynamo.keys import SINGLE, tenant_space
    from amsg.adapters.dynamo.table import DynamoTable

    table = DynamoTable(
        settings.table_name,
        client_options=access.client_options("dynamodb"),
        statements=settings.dynamo_statements,
    )
    return ports_in_space(table, settings, SINGLE, tenant_space, access)


def ports_in_space(
    table: DynamoTable,
    settings: Settings,
    space: KeySpace,
    tenant_space: Callable[[str], KeySpace],
    access: AwsAccess | None = None,
) -> StoragePorts:
    """Every storage adapter confined to one key space of the table (the single line's, or one tenant's)."""
    from amsg.adapters.dynamo.claims import DynamoClaimStore
    from amsg.adapters.dynamo.client_state import DynamoClientStateStore
    from amsg.adapters.dynamo.cloud_data import DynamoCloudDataStore
    from amsg.adapters.dynamo.coalescing import DynamoCoalescer
    from amsg.adapters.dynamo.credentials import DynamoCredentialStore
    from amsg.adapters.dynamo.delivery_policy import DynamoDeliveryPolicyStore
    from amsg.adapters.dynamo.outbox import DynamoOutboxStore
    from amsg.adapters.dynamo.owners import DynamoOwnerStore
    from amsg.adapters.dynamo.schema import DynamoSchemaInspector
    from amsg.adapters.dynamo.subscriptions import DynamoPushSubscriptionStore
    from amsg.adapters.dynamo.tasks import DynamoTaskStore
    from amsg.adapters.dynamo.tenant_purge import DynamoTenantPurge

    def prepare() -> None:
        _ = table.table  # the table's botocore client: service model and endpoint rules loaded, no request sent

    def for_tenant(tenant_id: str) -> StoragePorts:
        return ports_in_space(table, settings, tenant_space(tenant_id), tenant_space, access)

    return StoragePorts(
        prepare=prepare,
        # the registry and tenants' keys belong to the deployment, never to a tenant's own ports
        **(tenant_ports(settings, table, access or AwsAccess()) if space.tenant_id is None else {}),
        tasks=DynamoTaskStore(
            table, due_shards=settings.due_shards, space=space, pending_limit=settings.tenant_max_pending_tasks
        ),
        claims=DynamoClaimStore(
            table, due_shards=settings.due_shards, space=space, single_claims=settings.claim_writes == "single"
        ),
        subscriptions=DynamoPushSubscriptionStore(table, space=space),
        outbox=DynamoOutboxStore(table, space=space),
        schema=DynamoSchemaInspector(table),
        credentials=DynamoCredentialStore(table, space=space),
        client_state=DynamoClientStateStore(table, space=space),
        owners=DynamoOwnerStore(table, space=space),
        policies=DynamoDeliveryPolicyStore(table, space=space),
        cloud_data=DynamoCloudDataStore(table, space=space),
        coalescer=DynamoCoalescer(table),
        for_tenant=None if space.tenant_id is not None else for_tenant,
        tenant_purge=DynamoTenantPurge(table) if settings.multi_tenant and space.tenant_id is None else None,
    )


class TenantPorts(TypedDict, total=False):
    """The deployment's tenant collaborators (the multi-tenant line only), as the storage ports take them."""

    tenant_registry: TenantStore
    tenant_keys: TenantAccessor
    tenants: TenantDirectory
    key_wrapper: KeyWrapper


def tenant_ports(settings: Settings, table: DynamoTable, access: AwsAccess) -> TenantPorts:
    """The registry, tenants' master keys (KMS, cached per sandbox) and the active tenants; none in single mode."""
    if not settings.multi_tenant:
        return {}
    from amsg.adapters.dynamo.tenants import DynamoTenantStore
    from amsg.adapters.kms import KmsKeyWrapper
    from amsg.tenancy.keys import RegistryDirectory, TenantKeys

    if not settings.kms_key_id:
        raise ConfigError("AMSG_KMS_KEY_ID is not set (the multi-tenant line wraps master keys with it)")
    registry = DynamoTenantStore(table)
    wrapper = KmsKeyWrapper(settings.kms_key_id, client_options=access.client_options("kms"))
    keys = TenantKeys(registry, wrapper, time.monotonic, max_age_s=settings.tenant_key_cache_s)
    return {
        "tenant_registry": registry,
        "tenant_keys": keys,
        "tenants": RegistryDirectory(registry),
        "key_wrapper": wrapper,
    }


def delivery_ports(settings: Settings, secrets: Secrets, access: AwsAccess | None = None) -> DeliveryPorts:
    """Delivery collaborators, built on first use: API routes that never deliver never import them."""

    unusable: list[str] = []
    built: dict[str | None, PushSender | None] = {}

    def push_sender() -> PushSender | None:
        # rebuilt when the private key read from SSM changes (rotation without a redeploy)
        private_key = secrets.vapid_private_key
        if private_key not in built:
            built.clear()
            built[private_key] = build_push_sender(private_key)
        return built[private_key]

    def build_push_sender(private_key: str | None) -> PushSender | None:
        unusable.clear()
        if not (settings.vapid_public_key and settings.vapid_email and private_key):
            return None  # VAPID incomplete: the tick claims nothing, run_task releases its claim
        from amsg.adapters.webpush_sender import WebPushSender
        from amsg.vapid import VapidConfigError

        try:
            return WebPushSender(
                private_key, settings.vapid_public_key, settings.vapid_email, timeout_s=settings.push_timeout_ms / 1000
            )
        except VapidConfigError as exc:  # unusable keys count as "VAPID not configured" (logged, never the key)
            logger.error("VAPID configuration is unusable", extra={"error": str(exc)})
            unusable.append(f"the VAPID keys are unusable ({exc})")
            return None

    def push_problem() -> str | None:
        """Why there is no push sender, naming the settings (asked after ``push_sender`` came back None)."""
        missing = [
            name
            for name, value in (
                ("AMSG_VAPID_PUBLIC_KEY", settings.vapid_public_key),
                ("AMSG_VAPID_EMAIL", settings.vapid_email),
                ("AMSG_VAPID_PRIVATE_KEY (or AMSG_VAPID_PRIVATE_KEY_PARAM)", secrets.vapid_private_key),
            )
            if not value
        ]
        if missing:
            return "missing " + ", ".join(missing)
        return unusable[0] if unusable else None

    def llm() -> LlmClient:
        from amsg.adapters.llm_httpx import HttpxLlmClient

        return HttpxLlmClient()

    return DeliveryPorts(
        make_push_sender=push_sender,
        make_llm=llm,
        make_queue=lambda: _sqs_queue(settings.queue_url, access),
        describe_push_problem=push_problem,
        make_claim_queue=lambda: _sqs_queue(settings.claim_queue_url, access),
    )


def _sqs_queue(url: str | None, access: AwsAccess | None) -> TaskQueue | None:
    """An SQS queue port (imported on first use), or None when the queue is not configured."""
    if not url:
        return None
    from amsg.adapters.sqs_queue import SqsTaskQueue

    return SqsTaskQueue(url, client_options=(access or AwsAccess()).client_options("sqs"))
