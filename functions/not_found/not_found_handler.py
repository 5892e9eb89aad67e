"""$default route: every unknown method/path answers the reference's 404 envelope."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amsg.http.lambda_app import HttpApp, LambdaEvent, LambdaResult
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

if TYPE_CHECKING:
    from amsg.context import AppContext
    from aws_lambda_powertools.utilities.typing import LambdaContext


def app_context() -> AppContext:
    """The context, built on the first request (a configuration failure still answers stage ``config``): the
    404 function's init imports the router and nothing of the composition root (docs/cold-start.md)."""
    from amsg import runtime

    return runtime.app_context()


app = HttpApp({}, context=app_context)  # no route: every event takes the fallback, ``unknown_route``


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event: LambdaEvent, context: LambdaContext) -> LambdaResult:
    return app.resolve(event, context)
