"""``GET /capabilities``: the reference's feature names, in its order, filtered to what this deployment
implements and has enabled. A feature is listed only when its predicate holds."""

from __future__ import annotations

from collections.abc import Callable

from amsg.context import AppContext


def _hook(*names: str, agentic: bool = False) -> Callable[[AppContext], bool]:
    """The hooks module is configured, loads, and exports the hooks the feature needs (and, for agentic
    features, the fire hooks themselves); the delivery engine honours them."""

    def enabled(ctx: AppContext) -> bool:
        if not ctx.settings.hooks_module:
            return False  # no hooks: not even amsg.hooks is imported (asyncio with it; docs/cold-start.md)
        from amsg.hooks import load_hooks

        try:
            hooks = load_hooks(ctx.settings.hooks_module)
        except ImportError:
            return False
        if agentic and (hooks.on_before_fire is None or hooks.on_llm_output is None):
            return False
        return all(getattr(hooks, name) is not None for name in names)

    return enabled


_serialize_by_enabled = _hook("serialize_by")
_agentic = _hook(agentic=True)


def _always(ctx: AppContext) -> bool:
    return True


# (reference feature name, predicate), in the reference's order. Features we do not implement
# are simply absent from this table; tests/handlers/test_capabilities.py keeps it honest.
FEATURES: list[tuple[str, Callable[[AppContext], bool]]] = [
    ("client-state", _always),
    ("client-state-chunking", _always),
    ("client-state-partial-failure", _always),
    ("agentic-hooks", _agentic),
    ("agentic-scratch", _agentic),
    ("agentic-write-state", _agentic),
    ("agentic-fire-tools", _hook("execute_tool_calls", agentic=True)),
    ("agentic-schedule-task", _agentic),
    ("vapid-public-key", lambda ctx: bool(ctx.settings.vapid_public_key)),
    ("tick-stale-guard", _always),
    ("recurring-skip-occurrence", _always),
    ("occurrence-scoped-push-ids", _always),
    ("after-send-hook", _hook("on_after_send", agentic=True)),
    ("update-message-credentials", _always),
    ("hook-state-accessors", _agentic),
    ("after-send-scratch", _hook("on_after_send", agentic=True)),
    ("fire-task-identity", _agentic),
    ("push-task-identity", _always),
    ("push-envelope-reserved-bytes", _always),
    ("schedule-task-duplicate-row", _agentic),
    ("recurring-stale-skip-hook", _hook("on_stale_skip")),
    ("task-timezone", _always),
    ("user-push-subscription", _always),
    ("get-message-detail", _always),
    ("update-message-contact-name", _always),
    ("tick-serialize-by", _serialize_by_enabled),
    ("fire-settled-hook", _hook("on_fire_settled", agentic=True)),
    ("client-state-version-guard", _always),
    ("schedule-immediate", _always),
    ("schedule-supersede", _always),
    ("tick-lease-heartbeat", _always),
    ("run-task-entrypoint", _always),
    ("task-last-error", _always),
    ("non-retryable-error", _agentic),
    ("agentic-cancel-renew-task", _agentic),
    ("message-outbox", _always),
    ("fire-settled-metadata", _hook("on_fire_settled", agentic=True)),
    ("hook-usage", _agentic),
    ("llm-extra-body", _always),
    ("error-cause", _always),
    ("schema-self-check", lambda ctx: not ctx.settings.multi_tenant),  # multi: init-tenant creates tenants
    ("worker-run-task", _always),
    ("llm-credentials", _always),
    ("gzip-request-body", _always),
    ("client-state-ttl", lambda ctx: bool(ctx.settings.client_state_ttl_days)),
    ("emit-result", _agentic),
    ("client-state-delete", _always),
    ("client-state-namespaces", _always),
    ("client-state-delete-namespace", _always),
    ("llm-credentials-delete-prefix", _always),
    ("outbox-delete", _always),
    ("llm-permanent-errors", _always),
    ("redeliver-committed-batch", _always),
    ("hook-usage-total", _agentic),
    ("max-delivery-retries", _always),
    ("max-generation-retries", _agentic),
    ("before-fire-defer", _agentic),
    ("cloud-data-management", lambda ctx: ctx.settings.cloud_data_management),
    # our own features, after the reference's
    ("delivery-policy", lambda ctx: ctx.provides("policies")),  # asked without building the storage
    # the multi-tenant line (docs/tenancy.md): tenants, revocable tokens, a per-tenant request rate
    ("multi-tenant", lambda ctx: ctx.settings.multi_tenant),
    ("tenant-token-revocation", lambda ctx: ctx.settings.multi_tenant),
    ("tenant-rate-limit", lambda ctx: ctx.settings.multi_tenant),
]


def implemented_features(ctx: AppContext) -> list[str]:
    return [name for name, enabled in FEATURES if enabled(ctx)]
