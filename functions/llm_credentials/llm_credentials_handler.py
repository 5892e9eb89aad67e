"""PUT /llm-credentials, GET /llm-credentials, DELETE /llm-credentials (served at / and under /api/v1/)."""

from amsg import runtime
from amsg.api.llm_credentials import delete_llm_credentials, get_llm_credentials, put_llm_credentials
from amsg.http.lambda_app import http_app, serve
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)

app = http_app()


@app.put("/llm-credentials")
def put_route():
    return serve(app, put_llm_credentials)


@app.get("/llm-credentials")
def get_route():
    return serve(app, get_llm_credentials)


@app.delete("/llm-credentials")
def delete_route():
    return serve(app, delete_llm_credentials)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
