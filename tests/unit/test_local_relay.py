"""The DynamoDB Local relay copies bytes in a process of its own (tools/amsg_local/relay.py): it relays both
ways, leaves the gateway's process out of the copying, and is gone once the relay is closed."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest
from amsg_local.dynamodb_local import LoopbackRelay

pytestmark = [
    pytest.mark.slow,  # starts a process
    pytest.mark.skipif(not hasattr(os, "setns") or os.geteuid() != 0, reason="joining a namespace needs root"),
]


class _Echo(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        while line := self.rfile.readline():
            self.wfile.write(line.upper())


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_the_relay_process_relays_both_ways_and_stops_with_the_relay(echo_port: int) -> None:
    relay = LoopbackRelay("/proc/self/ns/net", echo_port)  # our own namespace stands in for DynamoDB Local's
    try:
        assert relay.process.pid != os.getpid() and relay.process.poll() is None
        assert relay.target_answers()
        for _ in range(3):  # several connections, several round trips each
            with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as sock:
                stream = sock.makefile("rwb")
                for word in (b"ping\n", b"x" * 300_000 + b"\n"):
                    stream.write(word)
                    stream.flush()
                    assert stream.readline() == word.upper()
    finally:
        relay.close()
    assert relay.process.poll() is not None
    with socket.socket() as sock:
        sock.settimeout(2)
        assert sock.connect_ex(("127.0.0.1", relay.port)) != 0
