"""What the operator's commands need to act on a running local multi-tenant stack (docs/tenancy.md, "The local
stack"): ``amsg tenants`` and ``amsg import --tenant`` read the table and wrap or unwrap tenant keys with the
stack's KMS key, which locally lives on the embedded moto server, made at start unless ``AMSG_KMS_KEY_ID`` named
one. The banner prints these variables; no secret is among them (the token signing key stays in ``.env``).
"""

from __future__ import annotations

import shlex
import textwrap
from typing import Any


def operator_environment(stack: Any) -> dict[str, str]:
    """The variables that point ``amsg tenants`` / ``amsg import --tenant`` at ``stack`` (a running
    ``LocalStack`` in multi mode), read from its functions' environment."""
    environ = stack.function_environment()
    env = {
        "AMSG_TENANCY": "multi",
        "AMSG_TABLE_NAME": stack.table_name,
        "AWS_ENDPOINT_URL_KMS": environ.get("AWS_ENDPOINT_URL_KMS", ""),
        "AMSG_KMS_KEY_ID": environ.get("AMSG_KMS_KEY_ID", ""),
        "AMSG_PUBLIC_BASE_URL": environ.get("AMSG_PUBLIC_BASE_URL") or stack.base_url,
        "AWS_DEFAULT_REGION": stack.region,
    }
    if stack.dynamodb_endpoint:  # a local DynamoDB: any credentials do
        env.update(
            AWS_ENDPOINT_URL_DYNAMODB=stack.dynamodb_endpoint, AWS_ACCESS_KEY_ID="local", AWS_SECRET_ACCESS_KEY="local"
        )
    return env


def banner_lines(stack: Any) -> list[str]:
    """The banner's tenancy entry: init-tenant, and the environment of the operator's commands."""
    assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in operator_environment(stack).items())
    wrapped = textwrap.wrap(assignments, width=92, break_long_words=False, break_on_hyphens=False)
    return [
        f"  tenancy        multi: POST {stack.base_url}/api/v1/init-tenant with X-Init-Secret",
        "                 amsg tenants / amsg import --tenant against this stack (its KMS key is on the embedded",
        "                 moto server, valid while the stack runs), with AMSG_TENANT_TOKEN_SIGNING_KEY and:",
        *(f"                   export {line}" for line in wrapped),
    ]
