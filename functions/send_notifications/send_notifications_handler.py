"""POST /send-notifications (served at / and under /api/v1/): the multi-tenant line's cron webhook, authenticated
with the tenant's cron token (docs/tenancy.md); 404 on the single line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amsg import runtime
from amsg.api.send_notifications import send_notifications
from amsg.http.lambda_app import HttpApp, LambdaEvent, LambdaResult
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

runtime.prepare(storage=True, secrets=("tenant_token_signing_key", "vapid_private_key"))  # init-phase work

app = HttpApp(
    {
        ("POST", "/send-notifications"): send_notifications,
    },
    context=runtime.app_context,
)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event: LambdaEvent, context: LambdaContext) -> LambdaResult:
    return app.resolve(event, context)
