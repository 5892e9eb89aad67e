"""PUT /client-state, GET /client-state, DELETE /client-state (served at / and under /api/v1/)."""

from amsg import runtime
from amsg.api.client_state import delete_client_state, get_client_state, put_client_state
from amsg.http.lambda_app import http_app, serve
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)

app = http_app()


@app.put("/client-state")
def put_route():
    return serve(app, put_client_state)


@app.get("/client-state")
def get_route():
    return serve(app, get_client_state)


@app.delete("/client-state")
def delete_route():
    return serve(app, delete_client_state)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
