"""The API's public base URL for the operator's commands (the cron webhook URL they print): docs/tenancy.md.

``AMSG_PUBLIC_BASE_URL`` when set; else, on AWS, the stack's ``ApiUrl`` output read from CloudFormation. Locally
(an ``AWS_ENDPOINT_URL_DYNAMODB`` is set) there is no CloudFormation: the local stack's banner prints the
variables, this one included.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

log = logging.getLogger(__name__)

OUTPUT = "ApiUrl"
HOW_TO_SET = (
    "cronWebhookUrl left out: the API's base URL is unknown. Set AMSG_PUBLIC_BASE_URL (on AWS the stack's "
    f"{OUTPUT} output or your custom domain, read automatically with --stack NAME and cloudformation:DescribeStacks; "
    "locally the base URL `amsg local` prints), then the URL is <base>/api/v1/send-notifications?token=<cronToken>"
)


def with_public_base_url(values: Mapping[str, str], stack: str) -> dict[str, str]:
    """``values`` with ``AMSG_PUBLIC_BASE_URL`` filled in from the stack's output when it was not set and the
    output can be read (unchanged otherwise: the caller then says how to set it)."""
    out = dict(values)
    if (out.get("AMSG_PUBLIC_BASE_URL") or "").strip() or (out.get("AWS_ENDPOINT_URL_DYNAMODB") or "").strip():
        return out
    url = stack_api_url(stack, region=out.get("AWS_REGION") or out.get("AWS_DEFAULT_REGION") or None)
    if url:
        out["AMSG_PUBLIC_BASE_URL"] = url
    return out


def stack_api_url(stack: str, *, region: str | None = None) -> str | None:
    """The ``ApiUrl`` output of ``stack``, or None when it cannot be read (no stack, no access, no region)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client = boto3.client("cloudformation", **({"region_name": region} if region else {}))
        stacks = client.describe_stacks(StackName=stack)["Stacks"]
    except (BotoCoreError, ClientError) as exc:
        log.debug("no %s output of stack %s: %s", OUTPUT, stack, type(exc).__name__)
        return None
    outputs = {item["OutputKey"]: item.get("OutputValue", "") for item in stacks[0].get("Outputs", [])}
    return outputs.get(OUTPUT, "").strip().rstrip("/") or None
