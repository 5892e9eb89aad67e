"""$default route: every unknown method/path answers the reference's 404 envelope."""

from amsg import runtime
from amsg.api.keys import not_found
from amsg.http.lambda_app import http_app, serve
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(secrets=("client_token",))  # init-phase work (docs/decisions.md)

app = http_app()


@app.not_found
def unknown_route(_exc):
    return serve(app, not_found)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
