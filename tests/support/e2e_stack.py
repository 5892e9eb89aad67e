"""The local stack with a loopback push service that trusts its VAPID key: what every end-to-end test starts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def stack_with_push(
    master_key: str = "d" * 64,
    *,
    sandboxes: str = "process",
    dynamodb_faults: object = None,
    warm: bool = False,
    **config: str,
) -> Iterator[tuple[object, object]]:
    """Yields ``(stack, push)``: a running local stack (fresh VAPID keys, no push pacing unless ``config`` says
    otherwise) and the ``FakePushService`` that verifies its pushes. ``config`` adds or overrides variables.
    ``sandboxes="thread"`` runs the handlers in this process (for a hooks module scripted by the test);
    ``dynamodb_faults`` (a ``FaultPlan``) puts the handlers' DynamoDB behind the fault proxy."""
    from amsg.vapid import generate_vapid_keys
    from amsg_local.cli import start_local_stack

    from tests.support.fake_push import FakePushService

    public, private = generate_vapid_keys()
    settings = {
        "AMSG_MASTER_KEY": master_key,
        "AMSG_VAPID_PUBLIC_KEY": public,
        "AMSG_VAPID_PRIVATE_KEY": private,
        "AMSG_VAPID_EMAIL": "e2e@example.test",
        "AMSG_PUSH_PACING_MS": "0",
        **config,
    }
    with (
        FakePushService(vapid_public_key=public) as push,
        start_local_stack(config=settings, sandboxes=sandboxes, dynamodb_faults=dynamodb_faults, warm=warm) as stack,
    ):
        yield stack, push
