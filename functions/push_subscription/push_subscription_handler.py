"""PUT /push-subscription, GET /push-subscription, DELETE /push-subscription (served at / and under /api/v1/)."""

from amsg import runtime
from amsg.api.push_subscription import delete_push_subscription, get_push_subscription, put_push_subscription
from amsg.http.lambda_app import http_app, serve
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)

app = http_app()


@app.put("/push-subscription")
def put_route():
    return serve(app, put_push_subscription)


@app.get("/push-subscription")
def get_route():
    return serve(app, get_push_subscription)


@app.delete("/push-subscription")
def delete_route():
    return serve(app, delete_push_subscription)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
