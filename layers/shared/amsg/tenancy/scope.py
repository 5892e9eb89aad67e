"""One tenant's view of the deployment (docs/tenancy-data.md): the same :class:`AppContext` API, every storage port
confined to the tenant's key space, the tenant's master key, and no client token.

API and engine functions stay tenant-unaware: they are handed a scoped context and cannot name another tenant's
items, because the adapters they reach build every partition key in the tenant's namespace. Scoping is cheap: the
tenant's ports are built once per sandbox on the deployment's own table client (no new client), kept for a bounded
number of tenants, and the scoped context itself is a small object made per request or per task.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from weakref import WeakKeyDictionary

from amsg.config import ConfigError, Secrets
from amsg.context import AppContext, StoragePorts

OPTIONAL_PORTS = ("owners", "policies", "cloud_data", "coalescer")
CACHED_TENANTS = 256  # tenants whose ports one sandbox keeps built (a few objects each, no client)
# what a tenant's context never reads from the deployment: its own master key replaces the deployment's, the
# single line's client token does not apply, and the control plane's secrets stay out of a tenant's reach
WITHHELD = frozenset({"client_token", "tenant_token_signing_key", "init_secret"})


class TenantContext(AppContext):
    """An :class:`AppContext` scoped to one tenant (``tenant_id`` says which, for the queue's messages)."""

    tenant_id: str | None


class _PortsCache:
    """A deployment's tenants' storage ports, least recently used dropped beyond :data:`CACHED_TENANTS`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ports: OrderedDict[str, StoragePorts] = OrderedDict()

    def get(self, tenant_id: str, build: Callable[[str], StoragePorts]) -> StoragePorts:
        with self.lock:
            ports = self.ports.get(tenant_id)
            if ports is not None:
                self.ports.move_to_end(tenant_id)
                return ports
        ports = build(tenant_id)
        with self.lock:
            ports = self.ports.setdefault(tenant_id, ports)
            self.ports.move_to_end(tenant_id)
            while len(self.ports) > CACHED_TENANTS:
                self.ports.popitem(last=False)
        return ports


_caches: WeakKeyDictionary[AppContext, _PortsCache] = WeakKeyDictionary()
_caches_lock = threading.Lock()


def _cache_of(ctx: AppContext) -> _PortsCache:
    with _caches_lock:
        cache = _caches.get(ctx)
        if cache is None:
            cache = _caches[ctx] = _PortsCache()
        return cache


def tenant_secrets(secrets: Secrets, master_key_hex: str | Callable[[], str | None]) -> Secrets:
    """The deployment's secrets with the tenant's master key (a value, or a reader asked on each use)."""

    def resolve(name: str) -> str | None:
        if name == "master_key":
            return master_key_hex() if callable(master_key_hex) else master_key_hex
        if name in WITHHELD:
            return None
        return secrets.resolve(name)

    return Secrets(resolve, secrets.prepare)


def scoped_context(ctx: AppContext, tenant_id: str, master_key_hex: str | Callable[[], str | None]) -> TenantContext:
    """``ctx`` (the deployment's context) confined to one tenant. The master key may be given as a reader (the
    tick reads a tenant's key only when its work needs it; an unreadable key then fails like an unset one).
    Raises ConfigError when ``ctx`` cannot be scoped (already a tenant's, or storage without a shared table)."""
    if isinstance(ctx, TenantContext):
        raise ConfigError("a tenant's context cannot be scoped to another tenant")
    cache = _cache_of(ctx)

    def storage() -> StoragePorts:
        build = ctx.storage.for_tenant
        if build is None:
            raise ConfigError("this deployment's storage cannot be confined to a tenant")
        return cache.get(tenant_id, build)

    scoped = TenantContext(
        settings=ctx.settings,
        secrets=tenant_secrets(ctx.secrets, master_key_hex),
        clock=ctx.clock,
        delivery=ctx.delivery,
        storage=storage,
        optional_ports=frozenset(port for port in OPTIONAL_PORTS if ctx.provides(port)),
    )
    scoped.tenant_id = tenant_id
    return scoped


def tenant_of(ctx: AppContext) -> str | None:
    """The tenant a context is scoped to (None: the single line's or the deployment's own context)."""
    return ctx.tenant_id if isinstance(ctx, TenantContext) else None
