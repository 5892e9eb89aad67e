"""Record every AWS API call the code makes (service, operation, parameters), attributed to a "function".

Patches botocore's one request entry point, so it sees calls from every client and resource, in every
thread (the lease heartbeat runs in one). Used to derive what each Lambda function really needs from IAM.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import botocore.client


@dataclass(frozen=True)
class Call:
    function: str
    service: str  # botocore's service id, lower case ("dynamodb", "ssm", "sqs")
    operation: str  # "GetItem", "TransactWriteItems", ...
    params: dict[str, Any] = field(hash=False, compare=False)


@dataclass
class CallRecorder:
    function: str = "-"
    calls: list[Call] = field(default_factory=list)

    @contextlib.contextmanager
    def acting_as(self, function: str) -> Iterator[None]:
        previous, self.function = self.function, function
        try:
            yield
        finally:
            self.function = previous


@contextlib.contextmanager
def record_aws_calls() -> Iterator[CallRecorder]:
    recorder = CallRecorder()
    original = botocore.client.BaseClient._make_api_call

    def spy(client: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
        service = client.meta.service_model.service_id.hyphenize()
        recorder.calls.append(Call(recorder.function, service, operation_name, dict(api_params)))
        return original(client, operation_name, api_params)

    botocore.client.BaseClient._make_api_call = spy  # type: ignore[method-assign]
    try:
        yield recorder
    finally:
        botocore.client.BaseClient._make_api_call = original  # type: ignore[method-assign]
