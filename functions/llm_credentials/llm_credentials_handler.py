"""PUT /llm-credentials, GET /llm-credentials, DELETE /llm-credentials (served at / and under /api/v1/)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amsg import runtime
from amsg.api.llm_credentials import delete_llm_credentials, get_llm_credentials, put_llm_credentials
from amsg.http.lambda_app import HttpApp, LambdaEvent, LambdaResult
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)

app = HttpApp(
    {
        ("PUT", "/llm-credentials"): put_llm_credentials,
        ("GET", "/llm-credentials"): get_llm_credentials,
        ("DELETE", "/llm-credentials"): delete_llm_credentials,
    },
    context=runtime.app_context,
)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event: LambdaEvent, context: LambdaContext) -> LambdaResult:
    return app.resolve(event, context)
