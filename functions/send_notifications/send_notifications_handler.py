"""POST /send-notifications (served at / and under /api/v1/): the multi-tenant line's cron webhook, authenticated
with the tenant's cron token (docs/tenancy.md); 404 on the single line."""

from amsg import runtime
from amsg.api.send_notifications import send_notifications
from amsg.http.lambda_app import http_app, serve
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(storage=True, secrets=("tenant_token_signing_key", "vapid_private_key"))  # init-phase work

app = http_app()


@app.post("/send-notifications")
def post_route():
    return serve(app, send_notifications)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
