"""$default route: every unknown method/path answers the reference's 404 envelope."""

from amsg.http.lambda_app import http_app, serve, unknown_route
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

app = http_app()


@app.not_found
def answer_unknown_route(_exc):
    return serve(app, unknown_route)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return app.resolve(event, context)
