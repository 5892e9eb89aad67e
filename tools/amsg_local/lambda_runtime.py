"""Invoke the template's Lambda handlers the way the Lambda service would.

:class:`LambdaRuntime` runs each concurrent invocation in a sandbox **process** by default
(:mod:`amsg_local.process_runtime`). This module also keeps the in-process sandboxes (``sandboxes="thread"``),
for tests that script a hooks module from the test process:

Each function gets a pool of "sandboxes": one private import of its handler file under a unique module name
(every function dir has its own ``*_handler.py``, and a Powertools resolver keeps per-request state, so two
concurrent requests must never share one module instance). A sandbox serves one invocation at a time, like a
Lambda execution environment; a sandbox whose invocation timed out is thrown away, as Lambda does. The pool is
bounded (the function's ``ReservedConcurrentExecutions``, else :data:`LOCAL_MAX_SANDBOXES`): an invocation
beyond it waits for a sandbox to come free.

Powertools' HTTP resolver stores the current event and Lambda context on its base *class*
(``BaseRouter.current_event``), which is harmless on Lambda (one event per process at a time) but lets two
concurrent invocations in one process read each other's event, whatever module instance they run in.
:func:`isolate_powertools_router_state` makes those two class attributes per thread (each invocation runs in
its own thread), which restores Lambda's one-event-per-sandbox view. The Powertools logger of the shared layer
is one object too, and ``inject_lambda_context`` appends the request id and correlation id to it:
:func:`isolate_powertools_logger_keys` gives every invocation its own copy of the appended keys.

What thread sandboxes do not model (process sandboxes do): every sandbox shares this process, its environment
and the already-imported layer package (``amsg``), and a timed-out handler thread keeps running in the
background (Python cannot kill a thread); its result is discarded.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import os
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amsg_local.invocation import LAMBDA_SYNC_PAYLOAD_LIMIT, Invocation
from amsg_local.template import FunctionSpec, function_spec, layer_dirs

__all__ = [
    "LAMBDA_SYNC_PAYLOAD_LIMIT",
    "LOCAL_MAX_SANDBOXES",
    "SANDBOX_MODES",
    "FunctionRuntime",
    "Invocation",
    "LambdaContext",
    "LambdaRuntime",
    "isolate_powertools_logger_keys",
    "isolate_powertools_router_state",
]

log = logging.getLogger("local_stack.lambda")

# Sandboxes per function when the template reserves no concurrency (Lambda would scale to the account limit;
# one process cannot, and would only thrash).
LOCAL_MAX_SANDBOXES = 32

_sandbox_ids = itertools.count(1)
_isolation_lock = threading.Lock()

Handler = Callable[[Any, Any], Any]


class LambdaContext:
    """The attributes and method the Python runtime's context object has (awslambdaric's LambdaContext)."""

    def __init__(self, spec: FunctionSpec, request_id: str | None = None, region: str = "us-east-1") -> None:
        self.function_name = spec.logical_id
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:123456789012:function:{spec.logical_id}"
        # awslambdaric reads this from AWS_LAMBDA_FUNCTION_MEMORY_SIZE, so on Lambda it is a string too.
        self.memory_limit_in_mb = str(spec.memory_size)
        self.aws_request_id = request_id or str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{spec.logical_id}"
        self.log_stream_name = f"local/[$LATEST]{uuid.uuid4().hex}"
        self.identity = None
        self.client_context = None
        self.tenant_id = None
        self._deadline_ms = int(time.time() * 1000) + spec.timeout * 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


class _PerThread:
    """A data descriptor whose value is per thread (unset → AttributeError, like a missing attribute)."""

    def __init__(self, name: str, store: threading.local) -> None:
        self.name = name
        self.store = store

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        try:
            return getattr(self.store, self.name)
        except AttributeError:
            raise AttributeError(self.name) from None

    def __set__(self, instance: object, value: Any) -> None:
        setattr(self.store, self.name, value)


_ROUTER_STATE = ("current_event", "lambda_context")


def isolate_powertools_router_state() -> bool:
    """Make ``BaseRouter.current_event``/``lambda_context`` per thread (idempotent; False without Powertools).

    Powertools writes them on the class (``BaseRouter.current_event = ...``) and reads them through instances
    and the class, so the descriptor goes both on the class (instance access) and on a metaclass (class access).
    """
    try:
        from aws_lambda_powertools.event_handler import api_gateway
    except ImportError:
        return False
    base = api_gateway.BaseRouter
    with _isolation_lock:
        if getattr(type(base), "_amsg_local_isolated", False):
            return True
        store = threading.local()
        slots = {name: _PerThread(name, store) for name in _ROUTER_STATE}
        for name, slot in slots.items():
            type.__setattr__(base, name, slot)
        isolated_meta = type(type(base))(  # type: ignore[misc]
            f"PerThread{type(base).__name__}", (type(base),), {**slots, "_amsg_local_isolated": True}
        )
        base.__class__ = isolated_meta  # type: ignore[method-assign]
    return True


_invocation = threading.local()  # ``active`` is True on a thread running a handler


class _PerInvocationKeys:
    """``log_format`` of Powertools' formatter: outside invocations the shared dict; inside one, a copy of it
    made on first use, so keys an invocation appends stay its own (and die with its thread)."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        shared = instance.__dict__.get("_local_shared_log_format", instance.__dict__.get("log_format"))
        if not getattr(_invocation, "active", False):
            return shared
        mine = instance.__dict__.setdefault("_local_invocation_log_format", threading.local())
        keys = getattr(mine, "value", None)
        if keys is None:
            keys = mine.value = dict(shared or {})
        return keys

    def __set__(self, instance: Any, value: Any) -> None:
        if getattr(_invocation, "active", False):
            instance.__dict__.setdefault("_local_invocation_log_format", threading.local()).value = value
        else:
            instance.__dict__["_local_shared_log_format"] = value


def isolate_powertools_logger_keys() -> bool:
    """Make the keys appended to Powertools loggers per invocation (idempotent; False without Powertools)."""
    try:
        from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
    except ImportError:
        return False
    with _isolation_lock:
        if not isinstance(LambdaPowertoolsFormatter.__dict__.get("log_format"), _PerInvocationKeys):
            LambdaPowertoolsFormatter.log_format = _PerInvocationKeys()  # type: ignore[assignment]
    return True


def discard_disabled_metrics() -> None:
    """With ``POWERTOOLS_METRICS_DISABLED`` Powertools never flushes, so its process-wide metric set only grows,
    and at 100 values of one metric it prints an EMF blob anyway. Locally (metrics off) drop them after each
    invocation: memory stays bounded and the console stays readable."""
    try:
        from aws_lambda_powertools.metrics.functions import is_metrics_disabled
        from aws_lambda_powertools.metrics.metrics import Metrics
    except ImportError:
        return
    if is_metrics_disabled():
        Metrics._metrics.clear()


class HandlerImportError(RuntimeError):
    """Runtime.ImportModuleError / Runtime.HandlerNotFound: the handler file or function is missing."""


@dataclass
class _Sandbox:
    sandbox_id: int
    module_name: str
    handler: Handler


@dataclass
class FunctionRuntime:
    """One function's sandbox pool."""

    spec: FunctionSpec
    region: str = "us-east-1"
    max_sandboxes: int = 0  # 0 = the function's reserved concurrency, else LOCAL_MAX_SANDBOXES
    _idle: list[_Sandbox] = field(default_factory=list, repr=False)
    _lock: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _live: int = field(default=0, repr=False)
    _retired: list[str] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.max_sandboxes <= 0:
            self.max_sandboxes = self.spec.reserved_concurrency or LOCAL_MAX_SANDBOXES

    def available(self) -> bool:
        return self.spec.handler_file.is_file()

    def _new_sandbox(self) -> _Sandbox:
        spec = self.spec
        path = spec.handler_file
        if not path.is_file():
            raise HandlerImportError(f"Unable to import module '{spec.module_name}': no file {path}")
        sandbox_id = next(_sandbox_ids)
        module_name = f"_amsg_local_{spec.logical_id}_{spec.module_name.replace('.', '_')}_{sandbox_id}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        if module_spec is None or module_spec.loader is None:
            raise HandlerImportError(f"Unable to import module '{spec.module_name}' from {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(module_name, None)
            raise HandlerImportError(f"Unable to import module '{spec.module_name}': {exc!r}") from exc
        handler = getattr(module, spec.function_name, None)
        if not callable(handler):
            sys.modules.pop(module_name, None)
            raise HandlerImportError(f"Handler '{spec.function_name}' missing on module '{spec.module_name}'")
        return _Sandbox(sandbox_id, module_name, handler)

    def _acquire(self, timeout_s: float | None = None) -> _Sandbox | None:
        """An idle sandbox, a new one while under ``max_sandboxes``, else wait; None when ``timeout_s`` ran out."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            while not self._idle and self._live >= self.max_sandboxes:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._lock.wait(remaining)
            if self._idle:
                return self._idle.pop()
            self._live += 1
        try:
            return self._new_sandbox()  # a cold start; imports happen outside the pool lock
        except BaseException:
            with self._lock:
                self._live -= 1
                self._lock.notify()
            raise

    def _release(self, sandbox: _Sandbox) -> None:
        with self._lock:
            self._idle.append(sandbox)
            self._lock.notify()

    def _retire(self, sandbox: _Sandbox) -> None:
        # Keep the module in sys.modules: its thread may still be running code that looks itself up.
        with self._lock:
            self._retired.append(sandbox.module_name)
            self._live -= 1
            self._lock.notify()

    def warm(self) -> None:
        """Import one sandbox now (surfaces import errors at start-up instead of on the first request)."""
        sandbox = self._acquire()
        if sandbox is not None:
            self._release(sandbox)

    def invoke(self, event: Any, *, wait_cap_s: float | None = None, request_id: str | None = None) -> Invocation:
        """Run the handler in its own thread; give up after the function Timeout (or ``wait_cap_s`` if sooner).

        ``wait_cap_s`` models a caller that stops waiting earlier (API Gateway's 30 s integration timeout):
        the result then has ``timed_out`` set and ``error_type`` ``Caller.Timeout`` rather than Lambda's.
        """
        request_id = request_id or str(uuid.uuid4())
        started = time.monotonic()
        try:
            sandbox = self._acquire(wait_cap_s)
        except HandlerImportError as exc:
            log.error("%s: Runtime.ImportModuleError: %s", self.spec.logical_id, exc)
            return Invocation(self.spec.logical_id, request_id, 0.0, None, "Runtime.ImportModuleError", str(exc))
        if sandbox is None:
            log.error("%s: no free sandbox within %.1fs", self.spec.logical_id, wait_cap_s or 0.0)
            message = f"no sandbox free within {wait_cap_s:g} seconds"
            return Invocation(
                self.spec.logical_id,
                request_id,
                (time.monotonic() - started) * 1000,
                None,
                "Caller.Timeout",
                message,
                timed_out=True,
            )
        if wait_cap_s is not None:
            wait_cap_s = max(0.0, wait_cap_s - (time.monotonic() - started))
        context = LambdaContext(self.spec, request_id, self.region)
        outcome: dict[str, Any] = {}
        finished = threading.Event()

        def run() -> None:
            _invocation.active = True
            begun = time.perf_counter()
            try:
                outcome["value"] = sandbox.handler(event, context)
                outcome["handler_ms"] = (time.perf_counter() - begun) * 1000
            except BaseException as exc:  # a handler may raise anything; Lambda reports it as an error
                outcome["error"] = exc
                outcome["traceback"] = traceback.format_exc()
            finally:
                discard_disabled_metrics()
                finished.set()

        thread = threading.Thread(target=run, name=f"lambda-{self.spec.logical_id}-{sandbox.sandbox_id}", daemon=True)
        thread.start()
        limit = float(self.spec.timeout)
        caller_gave_up_first = wait_cap_s is not None and wait_cap_s < limit
        wait_s = wait_cap_s if caller_gave_up_first else limit
        done = finished.wait(wait_s)
        duration_ms = (time.monotonic() - started) * 1000
        if not done:
            self._retire(sandbox)
            if caller_gave_up_first:
                log.error("%s: caller stopped waiting after %.1fs", self.spec.logical_id, wait_s)
                return Invocation(
                    self.spec.logical_id,
                    request_id,
                    duration_ms,
                    None,
                    "Caller.Timeout",
                    f"no response within {wait_s:g} seconds",
                    timed_out=True,
                )
            log.error("%s: Task timed out after %.2f seconds", self.spec.logical_id, limit)
            return Invocation(
                self.spec.logical_id,
                request_id,
                duration_ms,
                None,
                "Sandbox.Timedout",
                f"Task timed out after {limit:.2f} seconds",
                timed_out=True,
            )
        self._release(sandbox)
        if "error" in outcome:
            error = outcome["error"]
            log.error("%s: unhandled %s\n%s", self.spec.logical_id, type(error).__name__, outcome["traceback"])
            return Invocation(self.spec.logical_id, request_id, duration_ms, None, type(error).__name__, str(error))
        value = outcome.get("value")
        try:
            size = len(json.dumps(value, default=str).encode("utf-8"))
        except (TypeError, ValueError) as exc:
            return Invocation(self.spec.logical_id, request_id, duration_ms, None, "Runtime.MarshalError", str(exc))
        if size > LAMBDA_SYNC_PAYLOAD_LIMIT:
            message = f"Response payload size ({size} bytes) exceeded maximum allowed payload size"
            log.error("%s: %s", self.spec.logical_id, message)
            return Invocation(
                self.spec.logical_id, request_id, duration_ms, None, "Function.ResponseSizeTooLarge", message
            )
        return Invocation(self.spec.logical_id, request_id, duration_ms, value, handler_ms=outcome.get("handler_ms"))


SANDBOX_MODES = ("process", "thread")


class LambdaRuntime:
    """Every function of a template, invocable by logical id; layer dirs go on ``sys.path`` like /opt/python.

    ``sandboxes="process"`` (the default) runs each concurrent invocation in a sandbox process of its own
    (:mod:`amsg_local.process_runtime`): isolated module state and environment, ``Timeout`` and ``MemorySize``
    enforced, cold starts measured. ``"thread"`` keeps every sandbox in this process (a module instance per
    sandbox), for tests that script a hooks module or inspect handler state from the test process.
    ``clock`` is the stack's movable clock: its offset reaches every process sandbox with each invocation.
    """

    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        parameters: Mapping[str, Any] | None = None,
        region: str = "us-east-1",
        sandboxes: str = "process",
        clock: Any = None,
        environment: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        if sandboxes not in SANDBOX_MODES:
            raise ValueError(f"sandboxes must be one of {SANDBOX_MODES}, not {sandboxes!r}")
        self.template = template
        self.region = region
        self.sandboxes = sandboxes
        self.clock = clock
        # a new process sandbox's environment (the stack's, laid over the caller's; default: the process's own)
        self.environment = environment or (lambda: dict(os.environ))
        self._parameters = parameters
        self._functions: dict[str, Any] = {}
        self._lock = threading.Lock()
        for directory in layer_dirs(template):
            if str(directory) not in sys.path:
                sys.path.insert(0, str(directory))
        isolate_powertools_router_state()
        isolate_powertools_logger_keys()

    def function(self, logical_id: str) -> Any:
        """The function's sandbox pool (a :class:`FunctionRuntime` or a ``ProcessFunctionRuntime``)."""
        with self._lock:
            runtime = self._functions.get(logical_id)
            if runtime is None:
                spec = function_spec(self.template, logical_id, self._parameters)
                if self.sandboxes == "process":
                    from amsg_local.process_runtime import ProcessFunctionRuntime

                    runtime = ProcessFunctionRuntime(spec, self.region, environment=self.environment, clock=self.clock)
                else:
                    runtime = FunctionRuntime(spec, self.region)
                self._functions[logical_id] = runtime
            return runtime

    def invoke(self, logical_id: str, event: Any, **kwargs: Any) -> Invocation:
        invocation: Invocation = self.function(logical_id).invoke(event, **kwargs)
        return invocation

    def handler_file(self, logical_id: str) -> Path:
        return Path(self.function(logical_id).spec.handler_file)

    def stats(self) -> dict[str, Any]:
        """Per function: invocations, cold starts and their mean init time, errors, sandboxes (process mode)."""
        with self._lock:
            functions = dict(self._functions)
        return {
            "sandboxes": self.sandboxes,
            "functions": {name: fn.stats() for name, fn in sorted(functions.items()) if hasattr(fn, "stats")},
        }

    def close(self) -> None:
        """Stop every sandbox process (nothing to do for thread sandboxes)."""
        with self._lock:
            functions = list(self._functions.values())
        for function in functions:
            close = getattr(function, "close", None)
            if close is not None:
                close()
