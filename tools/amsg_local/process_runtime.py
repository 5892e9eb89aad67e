"""One process per Lambda sandbox: a warm pool per function, with Lambda's limits and log lines.

Each concurrent invocation of a function runs in a sandbox process of its own (:mod:`amsg_local.sandbox_worker`),
reused for later invocations like a warm Lambda execution environment; a new one is a cold start whose init
(environment, layer context, handler import) is timed and reported as ``Init Duration``. The pool of a function
grows up to its ``max_sandboxes`` (reserved concurrency, the SQS consumer's concurrency, else
:data:`LOCAL_MAX_PROCESS_SANDBOXES`); an invocation beyond that waits for one to come free.

A sandbox is a fresh interpreter (``python sandbox_worker.py FD``, environment from the template and the stack)
talking over a socket pair: a cold start costs the interpreter's start plus the handler's real imports, and
never forks the threaded gateway nor re-imports the caller's ``__main__`` (as ``multiprocessing`` would).

Limits, as on Lambda:

* ``Timeout``: the sandbox is killed at the deadline and the invocation ends with ``Sandbox.Timedout``;
* ``MemorySize``: the parent polls the sandbox's resident memory (``VmRSS``) while it runs and kills it above
  the limit (``Runtime.OutOfMemory``); ``Max Memory Used`` is the sandbox's peak (``VmHWM``). A polled limit
  can be overshot between two polls (:data:`MEMORY_POLL_S`), unlike Lambda's cgroup;
* a sandbox that dies (``Runtime.ExitError``) is replaced by the next invocation's cold start.

Every invocation logs ``START``/``END``/``REPORT`` on ``local_stack.lambda`` at DEBUG (``amsg local -v``), and
a cold start ``INIT_START`` before them; :meth:`ProcessFunctionRuntime.stats` counts cold starts.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing.connection
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from amsg_local import sandbox_worker
from amsg_local.invocation import LAMBDA_SYNC_PAYLOAD_LIMIT, Invocation
from amsg_local.sandbox_worker import SandboxConfig, _status_kb
from amsg_local.template import FunctionSpec

__all__ = ["LOCAL_MAX_PROCESS_SANDBOXES", "MEMORY_POLL_S", "ProcessFunctionRuntime"]

log = logging.getLogger("local_stack.lambda")

# Process sandboxes per function when the template reserves no concurrency: each is a Python interpreter with
# the layer and boto3 imported (~60–100 MB), and on a developer machine more than a few per core only thrash.
LOCAL_MAX_PROCESS_SANDBOXES = 8
MEMORY_POLL_S = 0.02
# Lambda's init phase limit; past it Lambda retries the init within the first invocation's own timeout.
_INIT_TIMEOUT_S = 10.0
# Cold starts running at once, across functions: a burst of requests would otherwise start every sandbox
# together, each import competing for the same cores, and all of them blow the init limit.
_cold_starts = threading.BoundedSemaphore(max(2, os.cpu_count() or 2))
_GATE_POLL_S = 0.05


@dataclass
class _Sandbox:
    process: subprocess.Popen[bytes]
    connection: multiprocessing.connection.Connection
    init_ms: float | None  # set until the first invocation reports it
    max_rss_kb: int = 0

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(2)
        except subprocess.TimeoutExpired:
            log.warning("sandbox %d did not exit after SIGKILL", self.pid)
        self.connection.close()


@dataclass
class _Outcome:
    kind: str  # ok | error | timeout | oom | exit | caller
    payload: tuple[Any, ...] = ()


@dataclass
class ProcessFunctionRuntime:
    """One function's pool of sandbox processes."""

    spec: FunctionSpec
    region: str = "us-east-1"
    max_sandboxes: int = 0
    environment: Any = None  # callable returning the gateway's environment for a new sandbox
    clock: Any = None
    _idle: list[_Sandbox] = field(default_factory=list, repr=False)
    _lock: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _live: dict[int, _Sandbox] = field(default_factory=dict, repr=False)
    _starting: int = field(default=0, repr=False)
    _counts: dict[str, float] = field(default_factory=dict, repr=False)
    _closed: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_sandboxes <= 0:
            self.max_sandboxes = self.spec.reserved_concurrency or LOCAL_MAX_PROCESS_SANDBOXES

    def available(self) -> bool:
        return self.spec.handler_file.is_file()

    # ------------------------------------------------------------------ the pool

    def _config(self) -> SandboxConfig:
        base = dict(self.environment() if self.environment else {})
        template_env = {k: v for k, v in self.spec.environment.items() if not k.endswith("_PARAM") and k not in base}
        return SandboxConfig(
            logical_id=self.spec.logical_id,
            handler_file=str(self.spec.handler_file),
            module_name=self.spec.module_name,
            function_name=self.spec.function_name,
            memory_size=self.spec.memory_size,
            timeout=self.spec.timeout,
            region=self.region,
            environment={**template_env, **base},
            sys_path=[str(self.spec.code_uri), *sys.path],
            movable_clock=self.clock is not None,
        )

    def _cold_start(self) -> _Sandbox:
        """Fork a sandbox and wait for its init; raises RuntimeError with Lambda's error type on failure."""
        if not self.spec.handler_file.is_file():
            raise _InitFailed("Runtime.ImportModuleError", f"no file {self.spec.handler_file}")
        return self._start_sandbox(self._config())

    def _start_sandbox(self, config: SandboxConfig) -> _Sandbox:
        parent_sock, child_sock = socket.socketpair()
        log.debug("INIT_START Runtime Version: python:%d.%d (local process)", *sys.version_info[:2])
        started = time.monotonic()
        try:
            process = subprocess.Popen(  # noqa: S603 (our own worker, no shell)
                [sys.executable, sandbox_worker.__file__, str(child_sock.fileno())],
                env=config.environment,
                pass_fds=(child_sock.fileno(),),
            )
        finally:
            child_sock.close()
        connection = multiprocessing.connection.Connection(parent_sock.detach())
        sandbox = _Sandbox(process, connection, None)
        connection.send(config.__dict__)
        limit_s = _INIT_TIMEOUT_S + self.spec.timeout
        message: Any = ("init_error", "Sandbox.Timedout", f"Init phase did not finish within {limit_s:.0f} seconds")
        if connection.poll(limit_s):
            try:
                message = connection.recv()
            except (EOFError, OSError):
                code = _exit_code(process)
                message = ("init_error", "Runtime.ExitError", f"Runtime exited during init with exit status {code}")
        if message[0] != "ready":
            sandbox.kill()
            raise _InitFailed(message[1], message[2])
        sandbox.init_ms, sandbox.max_rss_kb = (time.monotonic() - started) * 1000, message[2]
        return sandbox

    def _acquire(self, timeout_s: float | None) -> _Sandbox | None:
        """An idle sandbox, else a cold start (under ``max_sandboxes`` and the machine's cold-start gate), else
        wait for either; None when ``timeout_s`` ran out. A sandbox freed while waiting wins over a cold start."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            while True:
                sandbox = self._pop_idle()
                if sandbox is not None:
                    return sandbox
                if len(self._live) + self._starting < self.max_sandboxes and _cold_starts.acquire(blocking=False):
                    self._starting += 1
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                # the gate is shared across functions, so poll it as well as waiting for a sandbox of ours
                self._lock.wait(_GATE_POLL_S if remaining is None else min(remaining, _GATE_POLL_S))
        try:
            sandbox = self._cold_start()
        except BaseException:
            with self._lock:
                self._starting -= 1
                self._lock.notify()
            raise
        finally:
            _cold_starts.release()
        with self._lock:
            self._starting -= 1
            self._live[sandbox.pid] = sandbox
        return sandbox

    def _pop_idle(self) -> _Sandbox | None:
        """A live idle sandbox (one that died while idle, killed from outside, is dropped); call under the lock."""
        while self._idle:
            sandbox = self._idle.pop()
            if sandbox.process.poll() is None:
                return sandbox
            self._live.pop(sandbox.pid, None)
            sandbox.connection.close()
        return None

    def _release(self, sandbox: _Sandbox) -> None:
        with self._lock:
            if self._closed:
                self._live.pop(sandbox.pid, None)
                sandbox.kill()
            else:
                self._idle.append(sandbox)
            self._lock.notify()

    def _discard(self, sandbox: _Sandbox) -> None:
        sandbox.kill()
        with self._lock:
            self._live.pop(sandbox.pid, None)
            self._lock.notify()

    def warm(self, count: int = 1) -> None:
        """Start ``count`` sandboxes now, side by side (import errors surface at start-up, not on a request)."""
        held: list[_Sandbox] = []
        errors: list[BaseException] = []

        def one() -> None:
            try:
                sandbox = self._acquire(None)
            except BaseException as exc:
                errors.append(exc)
                return
            if sandbox is not None:
                held.append(sandbox)

        threads = [threading.Thread(target=one, daemon=True) for _ in range(max(1, count))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for sandbox in held:
            self._release(sandbox)
        if errors:
            raise errors[0]

    def pids(self) -> list[int]:
        with self._lock:
            return list(self._live)

    def busy_pids(self) -> list[int]:
        """Sandboxes running an invocation now (what a fault injector kills: ``amsg_local.sandbox_kills``)."""
        with self._lock:
            idle = {sandbox.pid for sandbox in self._idle}
            return [pid for pid in self._live if pid not in idle]

    def close(self) -> None:
        """Stop every sandbox (idle ones now; busy ones when their invocation ends)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            for sandbox in idle:
                self._live.pop(sandbox.pid, None)
        for sandbox in idle:
            sandbox.kill()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = dict(self._counts)
            live, idle = len(self._live), len(self._idle)
        cold = int(counts.get("coldStarts", 0))
        return {
            "invocations": int(counts.get("invocations", 0)),
            "coldStarts": cold,
            "initMsAvg": round(counts.get("initMs", 0.0) / cold, 1) if cold else None,
            "errors": {k: int(v) for k, v in counts.items() if k.startswith(("Sandbox.", "Runtime."))},
            "sandboxes": {"live": live, "idle": idle, "max": self.max_sandboxes},
            "memorySizeMb": self.spec.memory_size,
            "maxMemoryUsedMb": int(counts.get("maxRssKb", 0)) // 1024,
        }

    def _count(self, key: str, amount: float = 1) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + amount

    # ------------------------------------------------------------------ one invocation

    def invoke(self, event: Any, *, wait_cap_s: float | None = None, request_id: str | None = None) -> Any:
        """Run the handler in a sandbox process; Lambda's errors for timeouts, memory and crashes."""

        request_id = request_id or str(uuid.uuid4())
        started = time.monotonic()
        name = self.spec.logical_id

        def failed(error_type: str, message: str, **extra: Any) -> Invocation:
            self._count(error_type)
            log.error("%s: %s: %s", name, error_type, message)
            return Invocation(name, request_id, (time.monotonic() - started) * 1000, None, error_type, message, **extra)

        event_json = json.dumps(event, default=str)
        if len(event_json.encode("utf-8")) > LAMBDA_SYNC_PAYLOAD_LIMIT:
            return failed("RequestEntityTooLargeException", "Request must be smaller than 6291456 bytes")
        try:
            sandbox = self._acquire(wait_cap_s)
        except _InitFailed as exc:
            return failed(exc.error_type, str(exc))
        if sandbox is None:
            return failed("Caller.Timeout", f"no sandbox free within {wait_cap_s:g} seconds", timed_out=True)
        self._count("invocations")
        init_ms, sandbox.init_ms = sandbox.init_ms, None
        if init_ms is not None:
            self._count("coldStarts")
            self._count("initMs", init_ms)
        limit = float(self.spec.timeout)
        if wait_cap_s is not None:
            wait_cap_s = max(0.0, wait_cap_s - (time.monotonic() - started))
        caller_first = wait_cap_s is not None and wait_cap_s < limit
        log.debug("START RequestId: %s Version: $LATEST", request_id)
        begun = time.monotonic()
        offset = int(getattr(self.clock, "offset_ms", 0) or 0)
        try:
            sandbox.connection.send((request_id, event_json, int(time.time() * 1000 + limit * 1000), offset))
        except OSError:  # died between the pool's check and now
            outcome = _Outcome("exit", (_exit_code(sandbox.process),))
        else:
            outcome = self._await(
                sandbox, wait_cap_s if caller_first and wait_cap_s is not None else limit, caller_first
            )
        duration_ms = (time.monotonic() - begun) * 1000
        if outcome.kind in ("ok", "error"):
            sandbox.max_rss_kb = max(sandbox.max_rss_kb, int(outcome.payload[-1]))
            self._release(sandbox)
        else:
            sandbox.max_rss_kb = max(sandbox.max_rss_kb, _status_kb(sandbox.pid, "VmHWM:"))
            self._discard(sandbox)
        self._report(request_id, duration_ms, sandbox.max_rss_kb, init_ms)
        return self._result(outcome, request_id, started, limit, wait_cap_s, failed)

    def _await(self, sandbox: _Sandbox, wait_s: float, caller_first: bool) -> _Outcome:
        """Wait for the answer, watching memory; kill the sandbox on timeout or past ``MemorySize``."""
        deadline = time.monotonic() + wait_s
        limit_kb = self.spec.memory_size * 1024
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return _Outcome("caller" if caller_first else "timeout")
            if sandbox.connection.poll(min(MEMORY_POLL_S, remaining)):
                try:
                    message = sandbox.connection.recv()
                except (EOFError, OSError):  # the process is gone without an answer
                    return _Outcome("exit", (_exit_code(sandbox.process),))
                return _Outcome(message[0], tuple(message[1:]))
            if _status_kb(sandbox.pid, "VmRSS:") > limit_kb:
                return _Outcome("oom")

    def _report(self, request_id: str, duration_ms: float, rss_kb: int, init_ms: float | None) -> None:
        with self._lock:
            self._counts["maxRssKb"] = max(self._counts.get("maxRssKb", 0), rss_kb)
        init = f"\tInit Duration: {init_ms:.2f} ms" if init_ms is not None else ""
        log.debug("END RequestId: %s", request_id)
        log.debug(
            "REPORT RequestId: %s\tDuration: %.2f ms\tBilled Duration: %d ms\tMemory Size: %d MB\t"
            "Max Memory Used: %d MB%s",
            request_id,
            duration_ms,
            math.ceil(duration_ms),
            self.spec.memory_size,
            max(1, rss_kb // 1024),
            init,
        )

    def _result(
        self, outcome: _Outcome, request_id: str, started: float, limit: float, cap: float | None, failed: Any
    ) -> Any:

        name = self.spec.logical_id
        if outcome.kind == "caller":
            return failed("Caller.Timeout", f"no response within {cap or 0:g} seconds", timed_out=True)
        if outcome.kind == "timeout":
            message = f"RequestId: {request_id} Error: Task timed out after {limit:.2f} seconds"
            return failed("Sandbox.Timedout", message, timed_out=True)
        if outcome.kind == "oom":
            message = f"RequestId: {request_id} Error: Runtime exited with error: signal: killed"
            return failed("Runtime.OutOfMemory", message)
        if outcome.kind == "exit":
            code = outcome.payload[0] if outcome.payload else None
            if isinstance(code, int) and code < 0:
                status = "signal: killed" if code == -9 else f"signal: {signal.Signals(-code).name}"
            else:
                status = f"exit status {code}"
            return failed("Runtime.ExitError", f"RequestId: {request_id} Error: Runtime exited with error: {status}")
        if outcome.kind == "error":
            error_type, message, trace, _ms, _rss = outcome.payload
            log.error("%s: unhandled %s\n%s", name, error_type, trace)
            self._count("Function.Error")
            duration_ms = (time.monotonic() - started) * 1000
            return Invocation(name, request_id, duration_ms, None, error_type, message)
        result_json, handler_ms, _rss = outcome.payload
        if len(result_json.encode("utf-8")) > LAMBDA_SYNC_PAYLOAD_LIMIT:
            message = f"Response payload size ({len(result_json)} bytes) exceeded maximum allowed payload size"
            return failed("Function.ResponseSizeTooLarge", message)
        duration_ms = (time.monotonic() - started) * 1000
        return Invocation(name, request_id, duration_ms, json.loads(result_json), handler_ms=handler_ms)


def _exit_code(process: subprocess.Popen[bytes]) -> int | None:
    try:
        return process.wait(1)
    except subprocess.TimeoutExpired:
        return None


class _InitFailed(RuntimeError):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
