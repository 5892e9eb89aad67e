"""GET|POST /cloud-data/* (served at / and under /api/v1/): one function routes every sub-path itself, by suffix,
in the reference's order (so trailing slashes and unknown sub-paths answer exactly as the reference's): its
route table is empty and ``cloud_data`` takes everything as the fallback."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amsg import runtime
from amsg.api.cloud_data import cloud_data
from amsg.http.lambda_app import HttpApp, LambdaEvent, LambdaResult
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)

app = HttpApp({}, context=runtime.app_context, fallback=cloud_data)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event: LambdaEvent, context: LambdaContext) -> LambdaResult:
    return app.resolve(event, context)
