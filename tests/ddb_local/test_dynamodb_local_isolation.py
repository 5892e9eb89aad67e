"""DynamoDB Local listens on every interface; as root it runs in its own network namespace, so only this
machine's loopback (through our relay) reaches it."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
from amsg_local.dynamodb_local import DynamoDBLocal, netns_isolation_available


def _non_loopback_ipv4() -> list[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=False).stdout
    addresses = [line.split()[3].split("/")[0] for line in out.splitlines() if len(line.split()) > 3]
    return [address for address in addresses if not address.startswith("127.")]


def _refused(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        return sock.connect_ex((address, port)) != 0


def test_dynamodb_local_is_reachable_from_loopback_only(ddb_local_server: DynamoDBLocal, ddb_local_client) -> None:
    if not netns_isolation_available():
        if os.geteuid() == 0 and os.environ.get("CI"):
            pytest.fail("running as root in CI but DynamoDB Local could not get its own network namespace")
        pytest.skip("not root (or unshare/ip missing): DynamoDB Local shares this host's interfaces")
    assert ddb_local_server.isolated
    assert ddb_local_client.list_tables()["ResponseMetadata"]["HTTPStatusCode"] == 200  # through the relay
    addresses = _non_loopback_ipv4()
    if not addresses:
        pytest.skip("this machine has no non-loopback IPv4 address to try")
    for address in addresses:
        # neither DynamoDB Local's own port (it lives in another namespace) nor the relay (bound to 127.0.0.1)
        assert _refused(address, ddb_local_server.port), address
        assert _refused(address, int(ddb_local_server.endpoint_url.rsplit(":", 1)[1])), address
