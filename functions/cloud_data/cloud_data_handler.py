"""GET|POST /cloud-data/* (served at / and under /api/v1/): one function routes every sub-path itself, by suffix,
in the reference's order (so trailing slashes and unknown sub-paths answer exactly as the reference's)."""

from amsg import runtime
from amsg.api.cloud_data import cloud_data
from amsg.http.lambda_app import handle
from amsg.observability import logger
from aws_lambda_powertools.logging import correlation_paths

runtime.prepare(storage=True, secrets=("client_token", "master_key"))  # init-phase work (docs/decisions.md)


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event, context):
    return handle(event, cloud_data)
