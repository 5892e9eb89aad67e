"""The inside of one process sandbox: a Lambda execution environment for one function.

Started by :mod:`amsg_local.process_runtime` as ``python sandbox_worker.py FD`` with the function's environment
(standard library only until the handler imports), it reads its configuration from the socket ``FD``, imports
the handler file (the "init" phase, timed for ``Init Duration``), then serves one invocation at a time over
that socket until it closes. A handler's
module state, environment changes, crash or runaway loop stay inside this process.

Wire format on the pipe (pickled tuples; events and results travel as JSON text, as Lambda serializes them):

* parent → child first: the :class:`SandboxConfig` fields as a dict;
* parent → child: ``(request_id, event_json, deadline_epoch_ms, clock_offset_ms)``; ``None`` ends the sandbox;
* child → parent after init: ``("ready", init_ms, max_rss_kb)`` or ``("init_error", error_type, message)``;
* child → parent per invocation: ``("ok", result_json, handler_ms, max_rss_kb)`` or
  ``("error", error_type, message, traceback, handler_ms, max_rss_kb)``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

__all__ = ["SandboxConfig", "main", "max_rss_kb", "serve"]


@dataclass(frozen=True)
class SandboxConfig:
    """What a sandbox needs to start (sent as a plain dict: the child unpickles nothing of ours)."""

    logical_id: str
    handler_file: str
    module_name: str
    function_name: str
    memory_size: int
    timeout: int
    region: str
    environment: dict[str, str]
    sys_path: list[str]
    movable_clock: bool


def max_rss_kb(pid: int | str = "self") -> int:
    """Peak resident memory (``VmHWM``) of a process in kB, 0 when unreadable."""
    return _status_kb(pid, "VmHWM:")


def _status_kb(pid: int | str, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return 0


class _Context:
    """The Python runtime's context object (awslambdaric's ``LambdaContext`` attributes and method)."""

    def __init__(self, config: SandboxConfig, request_id: str, deadline_ms: int) -> None:
        self.function_name = config.logical_id
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{config.region}:123456789012:function:{config.logical_id}"
        self.memory_limit_in_mb = str(config.memory_size)  # a string on Lambda too
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{config.logical_id}"
        self.log_stream_name = f"local/[$LATEST]{uuid.uuid4().hex}"
        self.identity = None
        self.client_context = None
        self.tenant_id = None
        self._deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def _install_clock(environment: dict[str, str]) -> Any:
    """The layer's context with a movable clock (what ``POST /_local/clock`` moves); None without the layer."""
    try:
        from amsg import runtime
        from amsg.clock import OffsetClock
    except ImportError:
        return None
    clock = OffsetClock()
    try:
        runtime.use(runtime.build_context(environment, clock=clock))
    except Exception as exc:  # the handler builds its own context and reports the error on its first call
        print(f"amsg local sandbox: no movable clock ({exc!r})", file=sys.stderr)
        return None
    return clock


def _import_handler(config: SandboxConfig) -> Callable[[Any, Any], Any]:
    spec = importlib.util.spec_from_file_location(config.module_name, config.handler_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"Unable to import module '{config.module_name}'")
    module = importlib.util.module_from_spec(spec)
    sys.modules[config.module_name] = module
    spec.loader.exec_module(module)
    handler = getattr(module, config.function_name, None)
    if not callable(handler):
        raise AttributeError(f"Handler '{config.function_name}' missing on module '{config.module_name}'")
    return cast(Callable[[Any, Any], Any], handler)


def _discard_disabled_metrics() -> None:
    """Powertools never flushes disabled metrics; drop them so a warm sandbox's memory stays flat."""
    metrics = sys.modules.get("aws_lambda_powertools.metrics.metrics")
    functions = sys.modules.get("aws_lambda_powertools.metrics.functions")
    if metrics is not None and functions is not None and functions.is_metrics_disabled():
        metrics.Metrics._metrics.clear()


def _invoke(handler: Callable[[Any, Any], Any], config: SandboxConfig, request: tuple[Any, ...]) -> tuple[Any, ...]:
    request_id, event_json, deadline_ms, _offset = request
    begun = time.perf_counter()
    try:
        value = handler(json.loads(event_json), _Context(config, request_id, deadline_ms))
        handler_ms = (time.perf_counter() - begun) * 1000
    except BaseException as exc:  # a handler may raise anything; Lambda reports it as the invocation's error
        handler_ms = (time.perf_counter() - begun) * 1000
        return ("error", type(exc).__name__, str(exc), traceback.format_exc(), handler_ms, max_rss_kb())
    finally:
        _discard_disabled_metrics()
    try:
        result = json.dumps(value)
    except (TypeError, ValueError) as exc:
        return ("error", "Runtime.MarshalError", f"Unable to marshal response: {exc}", "", handler_ms, max_rss_kb())
    return ("ok", result, handler_ms, max_rss_kb())


def serve(connection: Any) -> None:
    """The sandbox's life: init, then invocations until the parent says stop or goes away."""
    started = time.perf_counter()
    config = SandboxConfig(**connection.recv())
    sys.path[:] = config.sys_path
    try:
        handler = _import_handler(config)
    except Exception as exc:
        connection.send(("init_error", "Runtime.ImportModuleError", f"Unable to import module: {exc!r}"))
        return
    # the movable clock only for handlers on the amsg layer (they build their context per invocation); a
    # handler that never imports it does not pay for its import
    clock = _install_clock(dict(os.environ)) if config.movable_clock and "amsg.runtime" in sys.modules else None
    connection.send(("ready", (time.perf_counter() - started) * 1000, max_rss_kb()))
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        if clock is not None and request[3] != clock.offset_ms:
            clock.advance(request[3] - clock.offset_ms)
        connection.send(_invoke(handler, config, request))


def main(argv: list[str]) -> int:
    from multiprocessing.connection import Connection

    connection = Connection(int(argv[1]))
    try:
        serve(connection)
    finally:
        connection.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
