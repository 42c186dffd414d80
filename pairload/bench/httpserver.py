"""A static HTTP server on loopback for benchmarks and tests of remote sources: the standard library's threading
HTTP server serving one folder, with a link bandwidth to throttle to (shared by all connections, like one
network link), a log of every request, and faults to inject (a status per path, corrupted bodies, connections
cut after some bytes). Readers reach it through fsspec's real HTTP client."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHUNK = 1 << 16


class Link:
    """A shared bandwidth: each chunk sent reserves its transfer time on one timeline."""

    def __init__(self, rate: float | None):
        self.rate = rate
        self._next = 0.0
        self._lock = threading.Lock()

    def send(self, nbytes: int) -> None:
        if not self.rate:
            return
        with self._lock:
            start = max(time.monotonic(), self._next)
            self._next = start + nbytes / self.rate
            until = self._next
        delay = until - time.monotonic()
        if delay > 0:
            time.sleep(delay)


@dataclass
class Faults:
    status: dict[str, int] = field(default_factory=dict)  # URL path -> status to answer with
    corrupt: set[str] = field(default_factory=set)  # URL paths whose body has one byte changed
    cut_after: dict[str, int] = field(default_factory=dict)  # URL path -> bytes sent before the connection drops


class StaticServer:
    """`with StaticServer(folder, rate=...) as srv:` serves `folder` at `srv.url`; `srv.log` lists (method, path,
    status) of every request; `srv.faults` injects failures; `stop()` makes the server go away."""

    def __init__(self, root: str | os.PathLike, *, rate: float | None = None, host: str = "127.0.0.1", port: int = 0):
        self.root = Path(root)
        self.link = Link(rate)
        self.faults = Faults()
        self.log: list[tuple[str, str, int]] = []
        self._log_lock = threading.Lock()
        self._conns: set = set()  # open client connections (kept alive between requests)
        server = self

        class Handler(SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(server.root), **kwargs)

            def log_message(self, *args):  # the server's own log is `log`
                pass

            def setup(self):
                super().setup()
                with server._log_lock:
                    server._conns.add(self.connection)

            def finish(self):
                with server._log_lock:
                    server._conns.discard(self.connection)
                super().finish()

            def _record(self, status: int) -> None:
                with server._log_lock:
                    server.log.append((self.command, self.path.split("?")[0], status))

            def _serve(self, body: bool) -> None:
                path = self.path.split("?")[0]
                status = server.faults.status.get(path)
                if status is not None:
                    self._record(status)
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                local = Path(self.translate_path(path))
                if not local.is_file():
                    self._record(404)
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                size = local.stat().st_size
                self._record(200)
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                if not body:
                    return
                cut = server.faults.cut_after.get(path)
                sent = 0
                with open(local, "rb") as fh:
                    while chunk := fh.read(CHUNK):
                        if path in server.faults.corrupt and sent == 0:
                            chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
                        if cut is not None and sent + len(chunk) > cut:
                            self.wfile.write(chunk[:max(0, cut - sent)])
                            self.close_connection = True
                            self.connection.shutdown(2)
                            return
                        server.link.send(len(chunk))
                        self.wfile.write(chunk)
                        sent += len(chunk)

            def do_GET(self):
                self._serve(body=True)

            def do_HEAD(self):
                self._serve(body=False)

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="pairload-http", daemon=True)
        self._thread.start()
        self._stopped = False

    def gets(self, suffix: str = "") -> list[str]:
        """Paths of the successful GETs (downloads) whose path ends with `suffix`."""
        with self._log_lock:
            return [p for m, p, s in self.log if m == "GET" and s == 200 and p.endswith(suffix)]

    def stop(self) -> None:
        """Shut the server down: later connections are refused."""
        if not self._stopped:
            self._stopped = True
            self._httpd.shutdown()
            self._httpd.server_close()
            with self._log_lock:
                conns = list(self._conns)
            for conn in conns:  # kept-alive connections and transfers under way end too
                try:
                    conn.shutdown(2)
                except OSError:
                    pass
            self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
