"""PUT /push-subscription, GET /push-subscription, DELETE /push-subscription (served at / and under /api/v1/)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amsg import runtime
from amsg.api.push_subscription import delete_push_subscription, get_push_subscription, put_push_subscription
from amsg.http.lambda_app import HttpApp, LambdaEvent, LambdaResult
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)

app = HttpApp(
    {
        ("PUT", "/push-subscription"): put_push_subscription,
        ("GET", "/push-subscription"): get_push_subscription,
        ("DELETE", "/push-subscription"): delete_push_subscription,
    },
    context=runtime.app_context,
)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event: LambdaEvent, context: LambdaContext) -> LambdaResult:
    return app.resolve(event, context)
