"""GET /capabilities (served at / and under /api/v1/)."""

from amsg import runtime
from amsg.api.keys import capabilities
from amsg.http.lambda_app import http_app, serve
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(secrets=("client_token",))  # init-phase work (docs/decisions.md)

app = http_app()


@app.get("/capabilities")
def get_route():
    return serve(app, capabilities)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
