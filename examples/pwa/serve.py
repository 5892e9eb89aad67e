"""``make demo``: serve the PWA example on loopback, beside the local stack (started here unless one runs).

    .venv/bin/python examples/pwa/serve.py [--port 8000] [--api http://127.0.0.1:3000]

The page and the service worker import the published ``@rei-standard/amsg-client`` and ``amsg-sw`` (installed
from npm into ``.cache/pwa`` on first use, at the versions ``package.json`` pins). A browser cannot resolve the
packages' bare ``@rei-standard/amsg-shared`` import, and a service worker has no import maps, so the files are
served under ``/vendor/`` with that one specifier pointed at the served copy; an app of your own lets its
bundler do this. ``/config.json`` tells the page where the API is.

When nothing answers at ``--api``, the local stack is started in this process (``amsg local``), with the
page's origin added to ``AMSG_CORS_ORIGINS``: the page calls the API from another origin, as a deployed app does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NODE_DIR = ROOT / ".cache" / "pwa"
PAGE_FILES = ("index.html", "app.js", "sw.js", "envelope.js", "manifest.webmanifest", "icon.svg")
VENDOR = {
    "amsg-client.mjs": "amsg-client",
    "amsg-sw.mjs": "amsg-sw",
    "amsg-shared.mjs": "amsg-shared",
}
_TYPES = {".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".svg": "image/svg+xml"}
_TYPES[".webmanifest"] = "application/manifest+json"


class PackagesUnavailable(RuntimeError):
    """npm is missing or could not install the published packages."""


def install_packages(node_dir: Path = NODE_DIR) -> Path:
    """The pinned packages in ``node_dir/node_modules`` (npm install on first use or after a version change)."""
    wanted = json.loads((HERE / "package.json").read_text(encoding="utf-8"))["dependencies"]
    modules = node_dir / "node_modules" / "@rei-standard"
    if all(_installed_version(modules / name.split("/")[1]) == version for name, version in wanted.items()):
        return modules
    npm = shutil.which("npm")
    if npm is None:
        raise PackagesUnavailable("npm not found: install Node.js (npm) to fetch the published client")
    node_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "package.json", node_dir / "package.json")
    done = subprocess.run(  # noqa: S603 (npm found on PATH, fixed arguments)
        [npm, "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(node_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise PackagesUnavailable(f"npm install failed: {done.stderr[-500:]}")
    return modules


def _installed_version(package_dir: Path) -> str | None:
    try:
        return str(json.loads((package_dir / "package.json").read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError):
        return None


def vendor_file(modules: Path, name: str) -> bytes | None:
    """A package's ES module with its bare ``@rei-standard/amsg-shared`` import pointed at the served copy."""
    package = VENDOR.get(name)
    if package is None:
        return None
    text = (modules / package / "dist" / "index.mjs").read_text(encoding="utf-8")
    return text.replace('from "@rei-standard/amsg-shared"', 'from "./amsg-shared.mjs"').encode("utf-8")


class DemoServer(ThreadingHTTPServer):
    """Loopback only; Nagle off on every connection (small responses are not held back for the client's ACK).
    ``api_url`` is what ``/config.json`` tells the page (settable: a test knows it only after both started)."""

    daemon_threads = True
    api_url = ""

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, address


def make_server(api_url: str, port: int = 0, modules: Path | None = None) -> DemoServer:
    """The demo's HTTP server on 127.0.0.1 (``port`` 0: any free one); call ``serve_forever`` to run it."""
    vendor = modules or install_packages()

    class Handler(SimpleHTTPRequestHandler):
        server: DemoServer

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            name = path.rsplit("/", 1)[-1] or "index.html"
            if path == "/config.json":
                body: bytes | None = json.dumps({"apiUrl": self.server.api_url.rstrip("/")}).encode("utf-8")
            elif path.startswith("/vendor/"):
                body = vendor_file(vendor, name)
            elif path.count("/") == 1 and name in PAGE_FILES:
                body = (HERE / name).read_bytes()
            else:
                body = None
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            kind = ".json" if path == "/config.json" else Path(name).suffix
            self.send_header("Content-Type", _TYPES.get(kind, "application/json") + "; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = DemoServer(("127.0.0.1", port), Handler)
    server.api_url = api_url
    return server


def _stack_answers(api_url: str) -> bool:
    from amsg_local.stack_info import StackUnreachable, fetch

    try:
        fetch(api_url, timeout_s=2.0)
    except StackUnreachable:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=8000, help="the page's port on 127.0.0.1 (default 8000)")
    parser.add_argument("--api", default="http://127.0.0.1:3000", help="the amsg API (default: make run's)")
    parser.add_argument("--tick-interval", default="5", help="the started stack's tick interval (seconds)")
    args = parser.parse_args(argv)
    try:
        server = make_server(args.api, args.port)
    except (PackagesUnavailable, OSError) as exc:
        print(f"make demo: {exc}", file=sys.stderr)
        return 2
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, name="pwa-demo", daemon=True).start()
    print(f"PWA example: {origin}/ (API {args.api})", flush=True)
    if _stack_answers(args.api):
        print(f"  a stack runs at {args.api}: it must allow {origin} (AMSG_CORS_ORIGINS in .env); Ctrl-C to stop")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            return 0
    from amsg_local.cli import main as amsg

    origins = [o for o in os.environ.get("AMSG_CORS_ORIGINS", "").split(",") if o.strip()]
    os.environ["AMSG_CORS_ORIGINS"] = ",".join([*origins, origin])
    port = str(urlsplit(args.api).port or 3000)
    return amsg(["local", "--port", port, "--tick-interval", args.tick_interval])


if __name__ == "__main__":
    raise SystemExit(main())
