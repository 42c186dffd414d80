"""`Retry.timeout` reaches the fsspec backends: a real HTTP server on 127.0.0.1 that stalls (before its answer, or
mid-body) makes a FetchError naming the redacted URL within a bounded time, instead of the client's own
minutes-long default; a timeout the user set in storage_options wins."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from pairload.remote import schemes
from pairload.remote.cache import FetchError, Retry, ShardCache
from pairload.remote.urls import filesystem

TIMEOUT = Retry(attempts=2, backoff=0.01, timeout=0.5)
BODY = 4096


class StallingServer:
    """Answers `/stall-body/*` with headers and a first part of the body, `/stall-head/*` with nothing; then holds
    the connection open until stopped."""

    def __init__(self):
        self.release = threading.Event()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = self.request.recv(4096)
                    if not chunk:
                        return
                    request += chunk
                path = request.split(b" ", 2)[1].decode()
                if path.startswith("/stall-body/"):
                    self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                                         b"Content-Length: %d\r\n\r\n" % BODY + b"x" * 100)
                outer.release.wait(30)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def stalling():
    with StallingServer() as srv:
        yield srv


def test_a_stalled_download_is_a_fetch_error_within_the_timeout(stalling, tmp_path):
    url = stalling.url.replace("http://", "http://reader:hunter22@") + "/stall-body/x.tar"
    cache = ShardCache(tmp_path / "c", retry=TIMEOUT)
    start = time.monotonic()
    with pytest.raises(FetchError, match=r"^http://reader:\*\*\*@127\.0\.0\.1:\d+/stall-body/x\.tar: downloading "
                                         r"failed 2 times") as exc:
        cache.fetch(url, "0" * 64, BODY)
    assert time.monotonic() - start < 10  # 2 reads of 0.5 s silence each, and the backoff (aiohttp's default: 5 min)
    assert "hunter22" not in str(exc.value)
    assert list((tmp_path / "c" / "shards").iterdir()) == []  # the partial file went away


def test_a_server_that_never_answers_is_a_fetch_error_within_the_timeout(stalling, tmp_path):
    start = time.monotonic()
    with pytest.raises(FetchError, match=r"/stall-head/manifest\.json: reading failed 2 times"):
        ShardCache(tmp_path / "c", retry=TIMEOUT).read_small(stalling.url + "/stall-head/manifest.json")
    assert time.monotonic() - start < 10


def test_a_timeout_in_storage_options_wins(stalling):
    import aiohttp

    mine = aiohttp.ClientTimeout(total=123)
    fs, _ = filesystem(stalling.url + "/x", {"client_kwargs": {"timeout": mine}}, timeout=0.5)
    assert fs.client_kwargs["timeout"] is mine
    fs, _ = filesystem(stalling.url + "/x", {}, timeout=0.5)
    assert (fs.client_kwargs["timeout"].sock_read, fs.client_kwargs["timeout"].sock_connect) == (0.5, 0.5)
    # s3fs: the botocore timeouts go into config_kwargs, beside (never over) what the user put there
    options = schemes.with_timeouts("s3", {"config_kwargs": {"read_timeout": 99}, "anon": True}, 7)
    assert options == {"config_kwargs": {"read_timeout": 99, "connect_timeout": 7}, "anon": True}
    fs, _ = filesystem("s3://bucket/shards", {"anon": True}, timeout=7)
    assert fs.config_kwargs == {"connect_timeout": 7, "read_timeout": 7}
    assert schemes.with_timeouts("az", {}, 2.5) == {"connection_timeout": 3, "read_timeout": 3}
    assert schemes.with_timeouts("memory", {"x": 1}, 2) == {"x": 1}


def test_the_stalling_server_does_stall(stalling):
    """Without a client timeout the read would wait: the server holds the body back (the tests above measure
    something)."""
    with socket.create_connection(("127.0.0.1", int(stalling.url.rsplit(":", 1)[1]))) as s:
        s.sendall(b"GET /stall-body/x.tar HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(1.0)
        got = b""
        with pytest.raises(socket.timeout):
            while True:
                chunk = s.recv(65536)
                assert chunk
                got += chunk
        assert got.endswith(b"x" * 100) and len(got.split(b"\r\n\r\n", 1)[1]) == 100
