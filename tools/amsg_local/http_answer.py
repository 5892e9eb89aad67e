"""The local gateway's HTTP answer and the transport constants the gateway and its server share."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["LISTEN_BACKLOG", "GatewayResponse", "json_body"]

LISTEN_BACKLOG = 1024  # pending connections the kernel queues (it caps this at net.core.somaxconn)


def json_body(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass
class GatewayResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""

    @classmethod
    def message(cls, status: int, text: str) -> GatewayResponse:
        """API Gateway's own error shape: ``{"message": ...}``."""
        return cls(status, [("content-type", "application/json")], json_body({"message": text}))
