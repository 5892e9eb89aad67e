"""Secrets from SSM Parameter Store (SecureString), read through Powertools Parameters with a max age.

A value is cached for ``max_age_s`` seconds per sandbox, then read again: a rotated secret reaches every
warm sandbox within that time, without a redeploy. Nothing is read before the first request asks.
"""

from __future__ import annotations

from typing import Any

from amsg.config import ConfigError

DEFAULT_MAX_AGE_S = 300


class SsmSecretReader:
    def __init__(self, max_age_s: int = DEFAULT_MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self._provider: Any = None

    @property
    def provider(self) -> Any:
        # one provider (and cache) per reader, built on first use: importing this module reads nothing
        if self._provider is None:
            import boto3
            from aws_lambda_powertools.utilities.parameters import SSMProvider

            self._provider = SSMProvider(boto3_client=boto3.client("ssm"))
        return self._provider

    def read(self, name: str) -> str:
        from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
        from botocore.exceptions import ClientError

        try:
            value = self.provider.get(name, max_age=self.max_age_s, decrypt=True)
        except GetParameterError as exc:
            # the parameter name is configuration, not a secret; the value never appears in errors
            cause = exc.__cause__ or exc.__context__  # Powertools wraps the boto error without "from"
            code = cause.response["Error"]["Code"] if isinstance(cause, ClientError) else type(cause).__name__
            raise ConfigError(f"cannot read SSM parameter {name}: {code}") from None
        return str(value)
