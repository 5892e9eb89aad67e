"""GET /capabilities is honest: the reference's names in the reference's order,
and every advertised feature that has a route actually answers on it (no 404, no *_NOT_SUPPORTED)."""

from __future__ import annotations

import uuid

import pytest
from amsg import __version__
from amsg.capabilities import FEATURES

from tests.support.wire_client import WireClient

# The reference's list at next.34, in order (57 static names) + the one dynamic flag
REFERENCE = """
client-state client-state-chunking client-state-partial-failure agentic-hooks agentic-scratch agentic-write-state
agentic-fire-tools agentic-schedule-task vapid-public-key tick-stale-guard recurring-skip-occurrence
occurrence-scoped-push-ids after-send-hook update-message-credentials hook-state-accessors after-send-scratch
fire-task-identity push-task-identity push-envelope-reserved-bytes schedule-task-duplicate-row
recurring-stale-skip-hook task-timezone user-push-subscription get-message-detail update-message-contact-name
tick-serialize-by fire-settled-hook client-state-version-guard schedule-immediate schedule-supersede
tick-lease-heartbeat run-task-entrypoint task-last-error non-retryable-error agentic-cancel-renew-task
message-outbox fire-settled-metadata hook-usage llm-extra-body error-cause schema-self-check worker-run-task
llm-credentials gzip-request-body client-state-ttl emit-result client-state-delete client-state-namespaces
client-state-delete-namespace llm-credentials-delete-prefix outbox-delete llm-permanent-errors
redeliver-committed-batch hook-usage-total max-delivery-retries max-generation-retries before-fire-defer
""".split()
DYNAMIC = ["cloud-data-management"]
# our own features (no reference name), listed after the reference's; the last three on the multi-tenant line only
OWN = ["delivery-policy", "multi-tenant", "tenant-token-revocation", "tenant-rate-limit"]

ENC = {"X-Payload-Encrypted": "true", "X-Encryption-Version": "1"}


def test_reference_list_is_complete():
    assert len(REFERENCE) == 57 and len(set(REFERENCE)) == 57


def test_table_uses_reference_names_in_reference_order():
    names = [name for name, _ in FEATURES]
    assert len(names) == len(set(names))
    order = REFERENCE + DYNAMIC + OWN
    assert all(name in order for name in names), set(names) - set(order)
    assert names == sorted(names, key=order.index)


@pytest.mark.memory_store
def test_response_shape(api):
    resp = api.capabilities()
    assert resp.status == 200
    assert set(resp.body) == {"success", "serverVersion", "features"}
    assert resp.body["serverVersion"] == __version__
    features = resp.body["features"]
    assert features == sorted(features, key=(REFERENCE + DYNAMIC + OWN).index)


def _probe(api: WireClient, method: str, path: str, body=None):
    if body is None:
        return api.request(method, path)
    return api.send_encrypted(method, path, body)


# feature -> requests that must be served (not the $default 404, not a *_NOT_SUPPORTED 501)
PROBES: dict[str, list[tuple[str, str, object]]] = {
    "client-state": [("PUT", "/client-state", {"entries": []}), ("GET", "/client-state?namespace=n", None)],
    "client-state-delete": [("DELETE", "/client-state", None)],
    "client-state-namespaces": [("GET", "/client-state/namespaces", None)],
    "client-state-delete-namespace": [("DELETE", "/client-state?namespace=n", None)],
    "vapid-public-key": [("GET", "/vapid-public-key", None)],
    "user-push-subscription": [("GET", "/push-subscription", None), ("DELETE", "/push-subscription", None)],
    "get-message-detail": [("GET", f"/message?id={uuid.uuid4()}", None)],
    "schema-self-check": [("POST", "/init-tenant", None)],
    "message-outbox": [("GET", "/outbox", None), ("POST", "/outbox/ack", {"messageIds": ["m"]})],
    "outbox-delete": [("DELETE", "/outbox", {"all": True})],
    "llm-credentials": [
        (
            "PUT",
            "/llm-credentials",
            {"credentials": [{"credId": "c", "value": {"apiUrl": "u", "apiKey": "k", "primaryModel": "m"}}]},
        ),
        ("GET", "/llm-credentials", None),
        ("DELETE", "/llm-credentials", {"credIds": ["c"]}),
    ],
    "llm-credentials-delete-prefix": [("DELETE", "/llm-credentials", {"credIdPrefix": "c"})],
    "delivery-policy": [
        ("PUT", "/delivery-policy", {"quietHours": None, "caps": []}),
        ("GET", "/delivery-policy", None),
        ("DELETE", "/delivery-policy", None),
    ],
    "cloud-data-management": [
        ("GET", "/cloud-data/summary", None),
        ("GET", "/cloud-data/resources", None),
        ("GET", "/cloud-data/owners", None),
        ("GET", "/cloud-data/owner?ownerType=c&ownerId=a", None),
        ("GET", "/cloud-data/cleanup-operations", None),
        ("POST", "/cloud-data/owner", {"action": "restore", "owner": {"type": "c", "id": "a"}}),
    ],
}


def test_every_advertised_route_is_served(api):  # on moto: it probes routes whose ports have no fake
    features = api.capabilities().body["features"]
    for feature in features:
        for method, path, body in PROBES.get(feature, []):
            for prefix in ("", "/api/v1"):
                resp = _probe(api, method, prefix + path, body)
                code = resp.code or ""
                assert code != "NOT_FOUND" and not code.endswith("NOT_SUPPORTED"), (feature, method, path, resp.text)
                assert resp.status < 500, (feature, method, path, resp.text)


@pytest.mark.memory_store
def test_gzip_request_body(api):
    assert "gzip-request-body" in api.capabilities().body["features"]
    resp = api.send_encrypted(
        "PUT", "/push-subscription", {"subscription": {"endpoint": "https://p.test/1"}}, gzip_body=True
    )
    assert resp.status == 200, resp.text


@pytest.mark.memory_store
def test_no_unimplemented_reference_features_are_advertised(api):
    # without a hooks module the hook features are not advertised
    features = set(api.capabilities().body["features"])
    for name in ("agentic-hooks", "after-send-hook", "fire-settled-hook", "before-fire-defer"):
        assert name not in features
