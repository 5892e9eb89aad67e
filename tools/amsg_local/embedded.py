"""The default local backend: moto's ThreadedMotoServer (DynamoDB and SQS) in this process, on loopback.

Pure pip, ready in about 0.4 s. It cannot prove exactly-once claiming under races (moto's
conditional writes are not atomic across threads): use
DynamoDB Local for that.
"""

from __future__ import annotations

import logging
import urllib.request

__all__ = ["EmbeddedMoto"]

log = logging.getLogger("local_stack.embedded")


class EmbeddedMoto:
    """A moto server bound to 127.0.0.1 on a free port; ``endpoint_url`` serves every moto service.

    moto keeps its backends process-wide, so every moto server (and ``mock_aws``) in one process shares the
    same data; :meth:`stop` resets them by default so the next stack starts empty.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._server = None

    @property
    def endpoint_url(self) -> str:
        if self._server is None:
            raise RuntimeError("embedded moto server is not running")
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmbeddedMoto:
        from moto.server import ThreadedMotoServer

        # werkzeug installs its own stderr handler and logs every emulator call unless told otherwise
        werkzeug_log = logging.getLogger("werkzeug")
        if werkzeug_log.level == logging.NOTSET:
            werkzeug_log.setLevel(logging.WARNING)
        server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
        server.start()
        self.port = server.get_host_and_port()[1]
        self._server = server
        log.debug("moto server on %s", self.endpoint_url)
        return self

    def reset(self) -> None:
        """Drop every moto resource (all tables, queues) through moto's own reset endpoint."""
        url = f"{self.endpoint_url}/moto-api/reset"  # loopback http URL built here, never user input
        request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass

    def stop(self, *, reset: bool = True) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        if reset:
            self._server = server
            try:
                self.reset()
            except OSError:
                log.warning("could not reset moto backends", exc_info=True)
            self._server = None
        server.stop()

    def __enter__(self) -> EmbeddedMoto:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
