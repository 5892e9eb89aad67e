"""A throwaway PostgreSQL server for the ``amsg import`` Postgres source: ``initdb`` into a temporary directory,
``postgres`` on a free loopback port with trust authentication, stopped by its PID. Runs the server as the
``postgres`` system user when the tests run as root (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class PostgresUnavailable(Exception):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yields ``postgresql://postgres@127.0.0.1:<port>/postgres``."""
    initdb, postgres = shutil.which("initdb"), shutil.which("postgres")
    if not initdb or not postgres:
        raise PostgresUnavailable("initdb/postgres not found")
    prefix: list[str] = []
    owner = None
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        try:
            import pwd

            owner = pwd.getpwnam("postgres")
        except KeyError:
            owner = None
        if not runuser or owner is None:
            raise PostgresUnavailable("running as root without a postgres user to run the server as")
        prefix = [runuser, "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="amsg-pg-"))
    data = root / "data"
    data.mkdir()
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
        os.chown(data, owner.pw_uid, owner.pw_gid)
    process: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run(
            [*prefix, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-instructions"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        port = _free_port()
        process = subprocess.Popen(
            [*prefix, postgres, "-D", str(data), "-p", str(port), "-h", "127.0.0.1", "-k", str(root), "-F"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise PostgresUnavailable("postgres did not start") from None
                time.sleep(0.2)
        time.sleep(0.3)  # accepting TCP before it accepts logins
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    except subprocess.CalledProcessError as exc:
        raise PostgresUnavailable(f"initdb failed: {exc.stderr[-300:]!r}") from None
    finally:
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)  # fast shutdown of the server we started
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        shutil.rmtree(root, ignore_errors=True)
