"""Secrets from SSM Parameter Store (SecureString). One GetParameter per secret per sandbox."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.exceptions import ClientError

from amsg.config import ConfigError


class SsmSecretReader:
    def __init__(self) -> None:
        self._client: Any = None

    def read(self, name: str) -> str:
        if self._client is None:
            self._client = boto3.client("ssm")
        try:
            return self._client.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
        except ClientError as exc:
            # the parameter name is configuration, not a secret; the value never appears in errors
            raise ConfigError(f"cannot read SSM parameter {name}: {exc.response['Error']['Code']}") from None
