"""The loopback relay's own process: accept on 127.0.0.1 here, connect to a port in another network namespace.

Started by :class:`amsg_local.dynamodb_local.LoopbackRelay` as ``python relay.py NETNS_PATH TARGET_PORT FD``
with the listening socket (bound to 127.0.0.1 in the caller's namespace) passed as ``FD``. It joins the target
namespace before it starts any thread, so every connection it opens lands there while the inherited listener
keeps accepting on the host's loopback. A process of its own because copying every DynamoDB request and
response took the gateway's interpreter lock once per chunk (``docs/performance.md``). It exits when its
standard input closes (the stack stopped, or died), so it never outlives the stack. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

__all__ = ["main", "serve"]

CHUNK = 262_144


def _pump(source: socket.socket, sink: socket.socket, done: threading.Event) -> None:
    try:
        while chunk := source.recv(CHUNK):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        if done.is_set():  # the other direction finished first: both sockets are ours to close
            source.close()
            sink.close()
        done.set()


def serve(listener: socket.socket, target_port: int) -> None:
    """Relay every accepted connection to ``127.0.0.1:target_port`` (in this thread's namespace) until closed."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", target_port), timeout=10)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        done = threading.Event()
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, sink, done), daemon=True).start()


def _exit_when_stdin_closes() -> None:
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    os._exit(0)


def main(argv: list[str]) -> int:
    netns_path, target_port, listen_fd = argv[1], int(argv[2]), int(argv[3])
    listener = socket.socket(fileno=listen_fd)
    namespace = os.open(netns_path, os.O_RDONLY)
    os.setns(namespace, os.CLONE_NEWNET)  # before any thread: every thread of this process is then inside
    os.close(namespace)
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    serve(listener, target_port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
