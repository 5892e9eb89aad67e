"""``amsg local`` in multi mode with in-process sandboxes (``sandboxes="thread"``): the handlers run on the context
built at start, which is rebuilt once the gateway is bound, so a free port still gives init-tenant the right
cronWebhookUrl. A module of its own: two stacks in one process would share the process environment."""

from __future__ import annotations

import pytest
from amsg_local.cli import start_local_stack

from tests.e2e.test_local_stack_multi_tenant import INIT_SECRET, SIGNING_KEY, call

pytestmark = pytest.mark.e2e


def test_in_process_sandboxes_get_the_bound_port_too() -> None:
    """``sandboxes="thread"`` runs the handlers on the context built at start: it is rebuilt once the port is
    bound, so a free port still gives the right webhook URL."""
    config = {"AMSG_TENANCY": "multi", "AMSG_TENANT_TOKEN_SIGNING_KEY": SIGNING_KEY, "AMSG_INIT_SECRET": INIT_SECRET}
    with start_local_stack(config={**config, "AMSG_MASTER_KEY": "b" * 64}, sandboxes="thread") as running:
        status, body = call(running, "POST", "/api/v1/init-tenant", {"X-Init-Secret": INIT_SECRET}, {})
        assert status == 201, body
        assert body["data"]["cronWebhookUrl"].startswith(f"{running.base_url}/api/v1/send-notifications?token=")
