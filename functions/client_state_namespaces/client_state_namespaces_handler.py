"""GET /client-state/namespaces (served at / and under /api/v1/)."""

from amsg import runtime
from amsg.api.client_state_namespaces import list_client_state_namespaces
from amsg.http.lambda_app import http_app, serve
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)

app = http_app()


@app.get("/client-state/namespaces")
def get_route():
    return serve(app, list_client_state_namespaces)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
