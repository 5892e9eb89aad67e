"""POST /init-tenant (served at / and under /api/v1/): the single line's schema check, or in multi mode the
creation of a tenant (docs/tenancy.md)."""

from amsg import runtime
from amsg.api.tenants import init_tenant
from amsg.http.lambda_app import http_app, serve
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)

app = http_app()


@app.post("/init-tenant")
def post_route():
    return serve(app, init_tenant)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
