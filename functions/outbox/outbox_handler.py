"""GET /outbox, DELETE /outbox (served at / and under /api/v1/)."""

from amsg import runtime
from amsg.api.outbox import delete_outbox, list_outbox
from amsg.http.lambda_app import http_app, serve
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)

app = http_app()


@app.get("/outbox")
def get_route():
    return serve(app, list_outbox)


@app.delete("/outbox")
def delete_route():
    return serve(app, delete_outbox)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
