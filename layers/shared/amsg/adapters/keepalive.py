"""Keep-alive connections shared by the project's own HTTP/1.1 transports (the Web Push sender's, push_http.py,
and the DynamoDB client's, dynamo/transport.py): the idle pool, the check that an idle connection is still
usable, and the verifying TLS contexts. Standard library only: both transports load on a cold start.

An idle connection is reused only within the pool's expiry and only while nothing is readable on it: a readable
idle socket means the server closed it (or sent something unasked), and a request written into it could lose its
answer.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Hashable
from typing import Protocol


class Pooled(Protocol):
    """What the pool keeps: a connection with its socket (None once closed) and a way to close it."""

    @property
    def sock(self) -> socket.socket | None: ...

    def close(self) -> None: ...


def still_open(sock: socket.socket | None) -> bool:
    """True while an idle connection's socket is usable: open, and nothing readable on it."""
    if sock is None:
        return False
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False  # TLS bytes nobody asked for
    try:
        poller = select.poll()  # not select(): a descriptor above FD_SETSIZE is fine
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


class IdlePool[C: Pooled]:
    """Thread-safe idle connections per origin: at most ``max_idle`` in all (the least recently used closed
    first), none older than ``expiry_s``. A connection is out of the pool while it serves a request."""

    def __init__(self, *, expiry_s: float, max_idle: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.expiry_s = expiry_s
        self.max_idle = max_idle
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: dict[Hashable, list[tuple[C, float]]] = {}
        self._count = 0  # connections in _idle
        self._evict_at = float("inf")  # no connection in the pool expires before this

    def take(self, origin: Hashable) -> C | None:
        """The most recently released usable connection to ``origin`` (None: connect anew); the expired or
        closed ones met on the way are closed."""
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                if not idle:
                    return None
                conn, since = idle.pop()
                self._count -= 1
            if self._clock() - since < self.expiry_s and still_open(conn.sock):
                return conn
            conn.close()

    def give_back(self, origin: Hashable, conn: C) -> None:
        """Keep ``conn`` (its answer read in full) for the next request to ``origin``."""
        now = self._clock()
        with self._lock:
            self._idle.setdefault(origin, []).append((conn, now))
            self._count += 1
            self._evict_at = min(self._evict_at, now + self.expiry_s)
            if self._count <= self.max_idle and now < self._evict_at:
                return  # nothing to close: the pool is neither full nor holding an expired connection
            closing = self._evict(now)
        for stale in closing:
            stale.close()

    def _evict(self, now: float) -> list[C]:
        """Take out of the pool (the caller closes them) every expired connection, then the oldest ones past
        ``max_idle``; origins left with none are dropped. Linear in the pool, which is at most max_idle + 1."""
        pooled = [(since, origin, conn) for origin, idle in self._idle.items() for conn, since in idle]
        pooled.sort(key=lambda entry: entry[0], reverse=True)  # the most recently used first
        kept = [entry for entry in pooled if now - entry[0] < self.expiry_s][: self.max_idle]
        kept_ids = {id(conn) for _, _, conn in kept}
        self._idle = {}
        for since, origin, conn in reversed(kept):  # oldest first: a list's last is the next one reused
            self._idle.setdefault(origin, []).append((conn, since))
        self._count = len(kept)
        self._evict_at = kept[-1][0] + self.expiry_s if kept else float("inf")
        return [conn for _, _, conn in pooled if id(conn) not in kept_ids]

    def idle_connections(self) -> int:
        with self._lock:
            return self._count

    def close(self) -> None:
        with self._lock:
            pooled, self._idle = self._idle, {}
            self._count, self._evict_at = 0, float("inf")
        for idle in pooled.values():
            for conn, _ in idle:
                conn.close()


_contexts: dict[str, ssl.SSLContext] = {}
_contexts_lock = threading.Lock()


def verifying_context(ca_bundle: str) -> ssl.SSLContext:
    """A TLS client context that verifies the server's certificate and name against ``ca_bundle`` (a file, or a
    directory of hashed certificates), HTTP/1.1 by ALPN; built once per bundle and process (loading a bundle
    costs ~17 ms of CPU) and shared by every pool (an ``SSLContext`` is safe to share between threads)."""
    with _contexts_lock:
        context = _contexts.get(ca_bundle)
        if context is None:
            if os.path.isdir(ca_bundle):
                context = ssl.create_default_context(capath=ca_bundle)
            else:
                context = ssl.create_default_context(cafile=ca_bundle)
            context.set_alpn_protocols(["http/1.1"])
            _contexts[ca_bundle] = context
        return context
