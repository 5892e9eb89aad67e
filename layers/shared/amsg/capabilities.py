"""``GET /capabilities``: the reference's feature names, in its order, filtered to what this deployment
implements and has enabled (decision 18, R20). A feature is listed only when its predicate holds."""

from __future__ import annotations

from collections.abc import Callable

from amsg.context import AppContext


def _always(ctx: AppContext) -> bool:
    return True


def _has(name: str) -> Callable[[AppContext], bool]:
    return lambda ctx: ctx.extras.get(name) is not None


# (reference feature name, predicate). Features we do not implement are simply absent from this table.
FEATURES: list[tuple[str, Callable[[AppContext], bool]]] = [
    ("client-state", _has("client_state")),
    ("client-state-chunking", _has("client_state")),
    ("client-state-partial-failure", _has("client_state")),
    ("vapid-public-key", lambda ctx: bool(ctx.settings.vapid_public_key)),
    ("tick-stale-guard", _has("delivery")),
    ("recurring-skip-occurrence", _has("delivery")),
    ("occurrence-scoped-push-ids", _has("delivery")),
    ("push-task-identity", _has("delivery")),
    ("push-envelope-reserved-bytes", _has("delivery")),
    ("task-timezone", _always),
    ("user-push-subscription", _always),
    ("get-message-detail", _always),
    ("update-message-contact-name", _always),
    ("update-message-credentials", _always),
    ("client-state-version-guard", _has("client_state")),
    ("schedule-immediate", _always),
    ("schedule-supersede", _always),
    ("tick-lease-heartbeat", _has("delivery")),
    ("run-task-entrypoint", _has("delivery")),
    ("task-last-error", _has("delivery")),
    ("message-outbox", _has("outbox_api")),
    ("llm-extra-body", _always),
    ("error-cause", _always),
    ("schema-self-check", _always),
    ("worker-run-task", _has("delivery")),
    ("llm-credentials", _has("credentials")),
    ("gzip-request-body", _always),
    ("client-state-ttl", _has("client_state_ttl")),
    ("client-state-delete", _has("client_state")),
    ("client-state-namespaces", _has("client_state")),
    ("client-state-delete-namespace", _has("client_state")),
    ("llm-credentials-delete-prefix", _has("credentials")),
    ("outbox-delete", _has("outbox_api")),
    ("llm-permanent-errors", _has("delivery")),
    ("redeliver-committed-batch", _has("delivery")),
    ("max-delivery-retries", _has("delivery")),
]


def implemented_features(ctx: AppContext) -> list[str]:
    return [name for name, enabled in FEATURES if enabled(ctx)]
