"""The embedded moto server (SQS always; DynamoDB when Java is missing), in this process, on loopback.

Pure pip, ready in about 0.4 s. moto evaluates a condition and applies the write in plain Python with no lock,
so two concurrent conditional writes (or transactions) can both succeed; DynamoDB never lets that happen. This
server therefore runs one request at a time (a process-wide lock around moto's WSGI application), which makes
every request atomic with respect to every other, as on DynamoDB. Accepted sockets get ``TCP_NODELAY``
(werkzeug writes the status line, headers and body separately; without it each response waits for the
client's delayed ACK, ~40 ms).

Memory: moto's ``BaseModel.__new__`` appends every model object it ever creates (every DynamoDB item, every
SQS message) to a class-level list that only its dashboard (``/moto-api/data.json``) reads and only a reset
empties. A ``TransactWriteItems`` deep-copies each table it touches (moto's rollback copy), so every
transaction added a copy of the whole table to that list: memory grew by megabytes per write and never came
down. :func:`stop_instance_tracking` turns that list off for the process (the dashboard then lists nothing);
what remains is the data itself (see ``tools/amsg_local/README.md``).
"""

from __future__ import annotations

import logging
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["EmbeddedMoto", "SerializedApp", "stop_instance_tracking"]

log = logging.getLogger("local_stack.embedded")


def _untracked_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    return object.__new__(cls)


def stop_instance_tracking() -> None:
    """Make moto's models stop recording every instance (idempotent; process-wide, as moto's backends are).

    The emulated data is unaffected: moto's backends hold their objects themselves; the tracking list only
    feeds moto's dashboard. Objects already tracked are dropped too.
    """
    from moto.core.common_models import BaseModel
    from moto.core.model_instances import reset_model_data

    current = BaseModel.__dict__.get("__new__")
    if getattr(current, "__func__", None) is not _untracked_new:
        BaseModel.__new__ = staticmethod(_untracked_new)  # type: ignore[method-assign,assignment]
    reset_model_data()


class SerializedApp:
    """A WSGI wrapper that runs one request at a time (the whole response is produced under the lock)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self.lock:
            result = self.app(environ, start_response)
            try:
                return list(result)
            finally:
                close = getattr(result, "close", None)
                if callable(close):
                    close()


class EmbeddedMoto:
    """A moto server bound to 127.0.0.1 on a free port; ``endpoint_url`` serves every moto service.

    moto keeps its backends process-wide, so every moto server (and ``mock_aws``) in one process shares the
    same data; :meth:`stop` resets them by default so the next stack starts empty.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("embedded moto server is not running")
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmbeddedMoto:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        stop_instance_tracking()

        class NoDelayHandler(MotoRequestHandler):
            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_request(self, *args: Any, **kwargs: Any) -> None:
                pass  # werkzeug would log every emulator call

        app = SerializedApp(DomainDispatcherApplication(create_backend_app))
        server = make_server(self.host, self.port, app, threaded=True, request_handler=NoDelayHandler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="amsg-local-moto", daemon=True
        )
        self._thread.start()
        log.debug("moto server on %s", self.endpoint_url)
        return self

    def reset(self) -> None:
        """Drop every moto resource (all tables, queues) through moto's own reset endpoint."""
        url = f"{self.endpoint_url}/moto-api/reset"  # loopback http URL built here, never user input
        request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass

    def stop(self, *, reset: bool = True) -> None:
        server = self._server
        if server is None:
            return
        if reset:
            try:
                self.reset()
            except OSError:
                log.warning("could not reset moto backends", exc_info=True)
        self._server = None
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> EmbeddedMoto:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
