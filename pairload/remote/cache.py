"""One node-local cache of downloaded shards, shared by every rank and worker of a node.

Layout under `cache_dir`: `shards/<sha256>.tar` (a shard is named by its manifest's sha256, so a file there is
always exactly the bytes the manifest lists: the same shard reached through two URLs is kept once, and a re-packed
bucket can never be mixed with old cached bytes), `shards/<sha256>.index` (a version-5 split's index file, kept the
same way) and `locks/<sha256>.lock`. Coordination between processes is
the kernel's: `flock` on the lock file and `rename`, nothing home-made.
- A download holds the lock exclusively, streams into `shards/<sha256>.tar.partial-<pid>` while hashing, and is
  renamed into place only if its size and sha256 match the manifest. The next holder of the lock deletes partial
  files left by a killed process, so a half-written shard is never used.
- A process that uses a shard holds its lock shared; eviction takes it exclusively without waiting, so it only
  ever removes shards no process holds.
- `limit` bounds the bytes kept (None: what the disk has free, less a margin); eviction removes the least recently
  used shards no one holds.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import units
from ..errors import ConfigError, LoaderError, PairloadError, ShardError
from ..units import human_bytes
from . import schemes
from .urls import filesystem, redact, redact_text, scheme

FREE_MARGIN = 1 << 30  # with no limit, never fill the cache's disk beyond this much free space
SHARD, INDEX = ".tar", ".index"  # the suffixes of cached files: shards, and splits' index files (format version 5)


def parse_bytes(text: str | int | None, what: str = "--cache-limit") -> int | None:
    """`pairload.units.parse_bytes`, naming --cache-limit by default."""
    return units.parse_bytes(text, what)


class FetchError(LoaderError):
    """A shard or manifest could not be fetched (the server went away, access denied, not found)."""


@dataclass(frozen=True)
class Retry:
    """Bounded retries of transient failures: `attempts` tries with `backoff` seconds doubling between them, and
    `timeout` seconds allowed to connect and per read (given to the fsspec backend, `schemes`)."""

    attempts: int = 4
    backoff: float = 0.5
    timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.backoff < 0 or not self.timeout > 0:
            raise ConfigError(f"retries: attempts={self.attempts} (>= 1), backoff={self.backoff} (>= 0) and "
                              f"timeout={self.timeout} (> 0) expected")


def _status(exc: BaseException) -> int | None:
    """The HTTP status a backend's exception carries (aiohttp, botocore), if any."""
    for attr in ("status", "status_code", "code"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return None


def classify(exc: BaseException, url: str) -> FetchError | None:
    """A final error for failures a retry cannot fix (not found, access denied); None for transient ones. The
    message names `url` redacted."""
    status, url = _status(exc), redact(url)
    if isinstance(exc, FileNotFoundError) or status == 404:
        return FetchError(f"{url}: not found (404); check the URL, and that the whole shard folder (manifest.json "
                          "and every shard it lists) was uploaded")
    if isinstance(exc, PermissionError) or status in (401, 403):
        return FetchError(f"{url}: access denied ({status or 403}); check the credentials the storage backend reads "
                          "from its usual places (environment, config files, instance role) or pass storage_options")
    return None


def retrying(what: str, url: str, retry: Retry, fn: Callable[[], object], on_retry: Callable[[], None] = lambda: None):
    """fn() with bounded retries and backoff for transient failures; a `FetchError` naming `url` when they run
    out or the failure is final (`url` and the backend's text redacted). Pairload errors from fn pass through."""
    last: BaseException | None = None
    for attempt in range(retry.attempts):
        if attempt:
            time.sleep(retry.backoff * 2 ** (attempt - 1))
            on_retry()
        try:
            return fn()
        except PairloadError:
            raise
        except Exception as exc:  # noqa: BLE001 - every backend has its own exception types
            final = classify(exc, url)
            if final is not None:
                raise final from None
            last = exc
    raise FetchError(f"{redact(url)}: {what} failed {retry.attempts} times, last with {type(last).__name__}: "
                     f"{redact_text(str(last), url)[:200]}; is the server reachable? (retries with backoff are "
                     "exhausted)") from None


def read_object(url: str, storage_options: dict | None = None, retry: Retry = Retry()) -> bytes:
    """A small object (a manifest) read whole through fsspec, with bounded retries."""
    fs, path = filesystem(url, storage_options, timeout=retry.timeout)
    return retrying("reading", url, retry, lambda: fs.cat_file(path))


@dataclass
class Counters:
    downloads: int = 0
    hits: int = 0
    bytes: int = 0
    evicted: int = 0
    refetched: int = 0


@dataclass
class _Held:
    fd: int
    count: int = 0


class ShardCache:
    """Shards of any remote source, fetched once per node (see the module docstring). Thread-safe."""

    def __init__(self, cache_dir: str | os.PathLike, limit: int | None = None, *, storage_options: dict | None = None,
                 retry: Retry = Retry()):
        if limit is not None and limit <= 0:
            raise ConfigError(f"cache_limit={limit}: expected a positive number of bytes (or None: the disk's free "
                              "space)")
        self.root = Path(cache_dir)
        self.limit = limit
        self.storage_options = dict(storage_options or {})
        self.retry = retry
        try:
            (self.root / "shards").mkdir(parents=True, exist_ok=True)
            (self.root / "locks").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cache_dir {self.root}: cannot create it ({exc.strerror}); pass a writable node-local "
                              "folder") from None
        self.counters = Counters()
        self._held: dict[str, _Held] = {}
        self._mutex = threading.Lock()
        self._fs: dict[str, object] = {}

    def __getstate__(self):
        raise TypeError("a ShardCache stays in the process that made it")

    # ------------------------------------------------------------------ places

    def path(self, sha: str, suffix: str = SHARD) -> Path:
        return self.root / "shards" / f"{sha}{suffix}"

    def _open_lock(self, sha: str) -> int:
        """A new descriptor of the shard's lock file (flock locks belong to it: one per holder)."""
        return os.open(self.root / "locks" / f"{sha}.lock", os.O_RDWR | os.O_CREAT, 0o644)

    def has(self, sha: str, size: int, suffix: str = SHARD) -> bool:
        try:
            return self.path(sha, suffix).stat().st_size == size
        except FileNotFoundError:
            return False

    def used(self) -> int:
        """Bytes of finished shards in the cache (partial downloads included: they take room too)."""
        total = 0
        for entry in os.scandir(self.root / "shards"):
            try:
                total += entry.stat().st_size
            except FileNotFoundError:
                pass
        return total

    # ------------------------------------------------------------------ holds

    def unhold(self, sha: str) -> None:
        """Give back one hold `fetch` took; with none left, other processes may evict the shard."""
        with self._mutex:
            held = self._held.get(sha)
            if held is None:
                return
            held.count -= 1
            if held.count <= 0:
                os.close(held.fd)  # closing the last descriptor releases the shared lock
                del self._held[sha]

    # ------------------------------------------------------------------ room

    def room_for(self, size: int, keep: set[str] = frozenset()) -> bool:
        """Make room for `size` more bytes within the limit (and the disk's free space), evicting the least recently
        used shards no process holds and that are not in `keep`; False if that is not enough."""
        def short() -> int:
            free = shutil.disk_usage(self.root).free - FREE_MARGIN
            over = size - free
            if self.limit is not None:
                over = max(over, self.used() + size - self.limit)
            return over

        need = short()
        if need <= 0:
            return True
        candidates = []
        for entry in os.scandir(self.root / "shards"):
            sha, dot, ext = entry.name.partition(".")
            suffix = dot + ext
            if suffix in (SHARD, INDEX) and sha not in keep and sha not in self._held:
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue
                candidates.append((st.st_atime, sha, suffix, st.st_size))
        for _, sha, suffix, nbytes in sorted(candidates):
            if self._evict(sha, suffix):
                need -= nbytes
                if need <= 0:
                    return True
        return short() <= 0

    def _evict(self, sha: str, suffix: str) -> bool:
        fd = self._open_lock(sha)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False  # some process holds it
        try:
            self.path(sha, suffix).unlink(missing_ok=True)
            self.counters.evicted += 1
            return True
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ fetching

    def read_small(self, url: str) -> bytes:
        """A small object (a manifest) read whole, with this cache's retries."""
        return read_object(url, self.storage_options, self.retry)

    def fetch(self, url: str, sha: str, size: int, *, wait: float = 600.0, suffix: str = SHARD) -> Path:
        """The local path of shard `sha` (`size` bytes at `url`; `suffix` INDEX: a split's index file), downloading
        it if no process of this node has: one download per node, verified against the sha256 while it streams in.
        The file is held (see `hold`): call `unhold(sha)` when done with it. A download in progress elsewhere is
        waited for, at most `wait` s."""
        with self._mutex:
            held = self._held.get(sha)
            if held is not None and self.has(sha, size, suffix):
                held.count += 1
                self.counters.hits += 1
                return self.path(sha, suffix)
        deadline = time.monotonic() + wait
        there = lambda: self.has(sha, size, suffix)  # noqa: E731 - only ever renamed into place whole and verified
        evicted = 0
        while evicted < 4:  # a shard evicted between its download and the shared lock is fetched again
            fd = self._lock(sha, fcntl.LOCK_SH, deadline, url)
            if there():
                self._touch(sha, suffix)
                self.counters.hits += 1
                self._register(sha, fd)
                return self.path(sha, suffix)
            os.close(fd)
            # another process may be downloading it, and once done it holds it shared for as long as it uses it:
            # the exclusive lock is then never free, so the wait ends as soon as the file is there too
            fd = self._lock(sha, fcntl.LOCK_EX, deadline, url, unless=there)
            if fd is None:
                continue  # finished elsewhere meanwhile: take it shared
            try:
                if not self.has(sha, size, suffix):  # another process may have finished it meanwhile
                    self._download(url, sha, size, suffix)
                else:
                    self.counters.hits += 1
                fcntl.flock(fd, fcntl.LOCK_SH)  # not atomic: an eviction may slip in, hence the check below
            except BaseException:
                os.close(fd)
                raise
            if self.has(sha, size, suffix):
                self._register(sha, fd)
                return self.path(sha, suffix)
            os.close(fd)
            evicted += 1
        raise LoaderError(f"{redact(url)}: downloaded into {self.root} but evicted again before it could be used, 4 "
                          "times; the cache_limit is too small for the shards in use on this node: raise it")

    def _register(self, sha: str, fd: int) -> None:
        with self._mutex:
            held = self._held.get(sha)
            if held is None:
                self._held[sha] = _Held(fd, 1)
            else:  # another thread of this process registered it meanwhile
                held.count += 1
                os.close(fd)

    def _lock(self, sha: str, mode: int, deadline: float, url: str,
              unless: Callable[[], bool] = lambda: False) -> int | None:
        """A new descriptor of the shard's lock file, locked in `mode`; polled so a stopped process holding the lock
        exclusively becomes an error instead of a hang. None (nothing held) as soon as `unless()` holds while
        waiting."""
        fd = self._open_lock(sha)
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if unless():
                    os.close(fd)
                    return None
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise FetchError(f"{redact(url)}: waited for another process of this node to finish downloading "
                                     f"it into {self.root} and gave up; is that process stopped?") from None
                time.sleep(0.02)

    def _touch(self, sha: str, suffix: str) -> None:
        try:
            os.utime(self.path(sha, suffix))  # least recently used is judged by access time
        except OSError:
            pass

    def _download(self, url: str, sha: str, size: int, suffix: str) -> None:
        for stale in (self.root / "shards").glob(f"{sha}{suffix}.partial-*"):  # left by a killed download
            stale.unlink(missing_ok=True)
        deadline = time.monotonic() + self.retry.timeout
        while not (room := self.room_for(size, keep={sha})) and time.monotonic() < deadline:
            time.sleep(0.05)  # shards in use elsewhere are released as their batches finish
        if not room:
            raise LoaderError(f"{redact(url)}: no room in the cache {self.root} for its {human_bytes(size)} "
                              f"(limit {human_bytes(self.limit) if self.limit else 'none'}, "
                              f"{human_bytes(shutil.disk_usage(self.root).free)} free on its disk, every cached "
                              "shard in use); raise cache_limit, free disk space, or lower shuffle_buffer") from None
        for attempt in (1, 2):  # a mismatch is fetched once more before the shard is refused
            digest = retrying("downloading", url, self.retry, lambda: self._stream(url, sha, size, suffix))
            if digest == sha:
                os.replace(self._partial(sha, suffix), self.path(sha, suffix))
                self.counters.downloads += 1
                self.counters.bytes += size
                return
            self._partial(sha, suffix).unlink(missing_ok=True)
            self.counters.refetched += attempt == 1
        raise ShardError(f"{redact(url)}: its bytes no longer match the manifest (sha256 {digest[:16]}…, the "
                         f"manifest lists {sha[:16]}…, twice); the shard was changed or replaced after the manifest "
                         "was written: upload the whole shard folder again (`pairload pack FOLDER URL`)")

    def _partial(self, sha: str, suffix: str) -> Path:
        return self.root / "shards" / f"{sha}{suffix}.partial-{os.getpid()}"

    def _stream(self, url: str, sha: str, size: int, suffix: str) -> str:
        """Download into the partial file, hashing as the bytes arrive; returns the sha256 (sizes checked)."""
        fs, path = filesystem(url, self.storage_options, timeout=self.retry.timeout)
        digest, got = hashlib.sha256(), 0
        partial = self._partial(sha, suffix)
        try:
            with fs.open(path, "rb", **schemes.stream_kwargs(scheme(url), size)) as src, open(partial, "wb") as dst:
                while chunk := src.read(schemes.CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
                    got += len(chunk)
                    if got > size:
                        break
        except OSError as exc:
            partial.unlink(missing_ok=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise LoaderError(f"{self.root}: the cache's disk is full while downloading {redact(url)}; free "
                                  "space or set a cache_limit below the free space (the partial file was "
                                  "removed)") from None
            raise
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if got != size:
            return f"size {got} instead of {size}"  # never equal to a sha: counted as a mismatch
        return digest.hexdigest()

