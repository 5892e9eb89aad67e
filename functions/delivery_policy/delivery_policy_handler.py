"""PUT /delivery-policy, GET /delivery-policy, DELETE /delivery-policy (served at / and under /api/v1/)."""

from amsg import runtime
from amsg.api.delivery_policy import delete_delivery_policy, get_delivery_policy, put_delivery_policy
from amsg.http.lambda_app import http_app, serve
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)

app = http_app()


@app.put("/delivery-policy")
def put_route():
    return serve(app, put_delivery_policy)


@app.get("/delivery-policy")
def get_route():
    return serve(app, get_delivery_policy)


@app.delete("/delivery-policy")
def delete_route():
    return serve(app, delete_delivery_policy)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
