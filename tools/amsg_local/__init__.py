"""Developer-side local stack for amsg-aws (never deployed): ``amsg local`` and :func:`start_local_stack`.

Modules: ``template`` (read template.yaml), ``tables`` (create its table/queue on an emulator), ``embedded``
(moto server), ``dynamodb_local`` (the DynamoDB Local jar), ``lambda_runtime`` (in-process handlers),
``gateway`` (API Gateway HTTP API imitation) with ``transport`` (its HTTP server), ``framing`` (request-line
checks) and ``local_input`` (``/_local/*`` input checks), ``delivery`` (tick + SQS consumer), ``local_settings``
(keys and settings), ``stack`` (start-up and tear-down), ``cli`` (the command line).
"""

from __future__ import annotations

from typing import Any

__all__ = ["LocalStack", "start_local_stack"]


def __getattr__(name: str) -> Any:
    # Lazy so that importing amsg_local.template (tests, tools) does not pull boto3/moto in.
    if name in __all__:
        from amsg_local import stack

        return getattr(stack, name)
    raise AttributeError(name)
