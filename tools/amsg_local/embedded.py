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

Time: that rollback copy is a deep copy of every item of the table, for every transaction, so a
``schedule-message`` took longer the more rows the table held (over a second per write at a few thousand
rows). :func:`install_fast_transactions` keeps moto's transaction logic but makes its table copy shallow (the
item maps are copied, the items shared) and deep-copies only the items the transaction names; when moto rolls
back, those are put back as they were. Only valid while requests are serialized (they are, here).
"""

from __future__ import annotations

import copy
import logging
import socket
import threading
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["EmbeddedMoto", "SerializedApp", "install_fast_transactions", "stop_instance_tracking"]

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
        BaseModel.__new__ = staticmethod(_untracked_new)  # type: ignore[method-assign]
    reset_model_data()


_rollback = threading.local()  # set while a transaction runs on this thread with the shallow table copy
_Saved = list[tuple[str, Any, Any, Any]]  # (table name, hash key, range key or None, item copy or None)


def _shallow_table(table: Any) -> Any:
    """A rollback copy of a moto table that shares its items (the touched ones are saved separately)."""
    snapshot = copy.copy(table)
    if table.range_key_attr:
        snapshot.items = defaultdict(dict, {key: dict(bucket) for key, bucket in table.items.items()})
    else:
        snapshot.items = defaultdict(dict, table.items)
    return snapshot


class _RollbackCopies:
    """Stands in for the ``copy`` module inside moto's DynamoDB backend module."""

    copy = staticmethod(copy.copy)

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        from moto.dynamodb.models.table import Table

        if getattr(_rollback, "active", False) and isinstance(value, Table):
            return _shallow_table(value)
        return copy.deepcopy(value, memo)


def _touched_items(backend: Any, transact_items: list[dict[str, Any]]) -> _Saved | None:
    """Copies of the items a transaction names as they are now; None when its shape is unusual."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    saved: _Saved = []
    try:
        for entry in transact_items:
            ((op_type, op),) = entry.items()
            table = backend.tables.get(op.get("TableName"))
            if table is None:
                continue
            key = op["Item"] if op_type == "Put" else op["Key"]
            hash_value = DynamoType(key[table.hash_key_attr])
            if table.range_key_attr:
                range_value = DynamoType(key[table.range_key_attr])
                current = table.items.get(hash_value, {}).get(range_value)
            else:
                range_value = None
                current = table.items.get(hash_value)
            saved.append((table.name, hash_value, range_value, copy.deepcopy(current)))
    except Exception:  # malformed request: moto's own code path answers it
        return None
    return saved


def _restore(backend: Any, saved: _Saved) -> None:
    for name, hash_value, range_value, item in reversed(saved):
        table = backend.tables.get(name)
        if table is None:
            continue
        if range_value is None:
            if item is None:
                table.items.pop(hash_value, None)
            else:
                table.items[hash_value] = item
        elif item is None:
            table.items.get(hash_value, {}).pop(range_value, None)
        else:
            table.items[hash_value][range_value] = item


def install_fast_transactions() -> None:
    """Make moto's ``TransactWriteItems`` cost what it touches, not the table's size (idempotent)."""
    from moto.dynamodb import models

    backend_class = models.DynamoDBBackend
    original = backend_class.transact_write_items
    if getattr(original, "amsg_fast", False):
        return

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = _touched_items(self, transact_items)
        if saved is None:
            return original(self, transact_items)
        _rollback.active = True
        try:
            return original(self, transact_items)
        except BaseException:
            _restore(self, saved)  # the shallow rollback copy still shares the items the transaction changed
            raise
        finally:
            _rollback.active = False

    transact_write_items.amsg_fast = True  # type: ignore[attr-defined]
    backend_class.transact_write_items = transact_write_items  # type: ignore[method-assign]
    models.copy = _RollbackCopies  # type: ignore[assignment,attr-defined]


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
        install_fast_transactions()

        class NoDelayHandler(MotoRequestHandler):
            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_request(self, *args: Any, **kwargs: Any) -> None:
                pass  # werkzeug would log every emulator call

        app = SerializedApp(DomainDispatcherApplication(create_backend_app))
        server = make_server(self.host, self.port, app, threaded=True, request_handler=NoDelayHandler)
        server.daemon_threads = True  # type: ignore[attr-defined]  # werkzeug builds a ThreadingMixIn server
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
