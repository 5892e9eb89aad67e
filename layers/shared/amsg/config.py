"""Deployment settings and secrets, as plain values. Built by :mod:`amsg.runtime` from the environment.

Numeric knobs are ``AMSG_<SNAKE_CASE>`` variables; their defaults are the reference's (the README lists them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


class ConfigError(Exception):
    """The deployment is misconfigured (a 500 with ``cause.stage = 'config'``)."""

    code = "CONFIG_ERROR"


@dataclass(frozen=True)
class Settings:
    table_name: str
    queue_url: str | None = None
    claim_queue_url: str | None = None  # claim fan-out to the claimer function (None: the tick claims itself)
    vapid_public_key: str = ""
    vapid_email: str = ""
    due_shards: int = 1
    tick_claim_limit: int = 5000
    tick_claim_workers: int = 4  # claims (or claim transactions of the claim store's batch size) in flight at once
    tick_claim_lease_ms: int = 300_000
    # how a batch of claims is written: "single" (one conditional UpdateItem each, returning the row: 3 write units
    # a claim) or "transaction" (25 per TransactWriteItems + a read back: 6 and a read unit, less CPU)
    claim_writes: str = "single"
    # conditional single writes (delivered marks, settlements) as PartiQL statements, several per
    # BatchExecuteStatement (False: one UpdateItem / DeleteItem each, for stores without conditional PartiQL)
    dynamo_statements: bool = True
    claim_page_size: int = 500  # due tasks one claim job claims (one page of the due index)
    claim_backlog_limit: int = 20_000  # claim jobs pause while the task queue holds more (0: never)
    run_lease_ms: int = 90_000
    heartbeat_ms: int = 30_000
    max_delivery_retries: int = 3
    stale_after_ms: int = 3_600_000
    instant_deadline_ms: int = 27_000
    hooks_module: str | None = None
    push_pacing_ms: int = 1500
    llm_timeout_ms: int = 300_000
    push_timeout_ms: int = 10_000
    client_state_ttl_days: dict[str, float] = field(default_factory=dict)
    # agentic fire budgets (hooks module): LLM rounds, wall budget after on_before_fire, follow-ups per fire
    max_tool_iterations: int = 5
    total_timeout_ms: int = 240_000
    max_scheduled_tasks_per_fire: int = 2
    cloud_data_management: bool = True  # the /cloud-data routes (owners, inventory); off: they answer 501
    # the multi-tenant line (docs/tenancy.md): "single" (one master key) or "multi" (tenants, Bearer tokens)
    tenancy: str = "single"
    public_base_url: str = ""  # init-tenant's cronWebhookUrl is built on it ('' without)
    tenant_key_cache_s: int = 300  # how long a sandbox keeps a tenant's unwrapped master key
    kms_key_id: str = ""  # the stack's KMS key that wraps tenants' master keys (multi only)
    tenant_rate_limit_rps: int = 0  # requests per second per tenant (0: no limit; a tenant's record may override)
    tenant_max_pending_tasks: int = 0  # pending tasks per tenant (0: no limit; the tenant's counter may override)
    # tenants whose delivery metrics carry their own Tenant dimension; every other tenant's is "other"
    metrics_tenants: frozenset[str] = frozenset()

    @property
    def multi_tenant(self) -> bool:
        return self.tenancy == "multi"


@dataclass(frozen=True)
class AwsAccess:
    """How the adapters reach AWS, as the context's mapping states it: a region, keys, an endpoint per service.

    On Lambda the mapping is the process environment and these are the values boto3 would read from it anyway;
    a context built from another mapping (the local stack's, a tool's, a test's) talks to what that mapping
    names without anyone rewriting ``os.environ``. What the mapping leaves out, boto3 resolves as usual."""

    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    endpoints: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AwsAccess:
        return cls(
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            endpoints={
                service: url
                for service in ("dynamodb", "sqs", "kms")
                if (url := env.get(f"AWS_ENDPOINT_URL_{service.upper()}") or env.get("AWS_ENDPOINT_URL"))
            },
        )

    def client_options(self, service: str) -> dict[str, str]:
        """``boto3.client(service, **options)`` arguments: only what the mapping set (keys only as a pair)."""
        options = {"region_name": self.region, "endpoint_url": self.endpoints.get(service)}
        if self.access_key_id and self.secret_access_key:
            options |= {
                "aws_access_key_id": self.access_key_id,
                "aws_secret_access_key": self.secret_access_key,
                "aws_session_token": self.session_token,
            }
        return {name: value for name, value in options.items() if value}


@dataclass
class Secrets:
    """Secrets resolved on every access: from the environment locally, or from SSM Parameter Store on AWS,
    where the reader caches each value for a bounded time so a rotated secret is picked up without a
    redeploy (see ``amsg.adapters.ssm``)."""

    resolve: Callable[[str], str | None] = field(repr=False)
    # builds what reading the named secrets will need (the SSM client), reading nothing: init-phase work
    prepare: Callable[[tuple[str, ...]], None] = field(default=lambda names: None, repr=False)

    @property
    def master_key(self) -> str:
        value = self.resolve("master_key")
        if not value:
            raise ConfigError("master key is not configured (AMSG_MASTER_KEY or AMSG_MASTER_KEY_PARAM)")
        return value

    @property
    def client_token(self) -> str | None:
        value = self.resolve("client_token")
        return value.strip() if value and value.strip() else None

    @property
    def vapid_private_key(self) -> str | None:
        return self.resolve("vapid_private_key") or None

    @property
    def tenant_token_signing_key(self) -> str:
        value = (self.resolve("tenant_token_signing_key") or "").strip()
        if not value:
            raise ConfigError(
                "tenant token signing key is not configured "
                "(AMSG_TENANT_TOKEN_SIGNING_KEY or AMSG_TENANT_TOKEN_SIGNING_KEY_PARAM)"
            )
        return value

    @property
    def init_secret(self) -> str | None:
        """None when unset: init-tenant is then closed (docs/tenancy.md)."""
        value = self.resolve("init_secret")
        return value.strip() if value and value.strip() else None


def missing_vapid_keys(settings: Settings, secrets: Secrets) -> list[str]:
    """The reference's names of the VAPID settings that are not configured (``VAPID_CONFIG_ERROR`` details)."""
    missing = []
    if not settings.vapid_email:
        missing.append("VAPID_EMAIL")
    if not settings.vapid_public_key:
        missing.append("NEXT_PUBLIC_VAPID_PUBLIC_KEY")
    if not secrets.vapid_private_key:
        missing.append("VAPID_PRIVATE_KEY")
    return missing
