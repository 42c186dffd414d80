"""`ShardHasher`: the sha256 of each raw shard, taken while the shard is being written rather than after.

The workers write a shard's samples in place, roughly in order; the parent tells the hasher how far the shard is
complete from its start (`ready`: the end of the last sample of an unbroken run of finished ones) and a thread
hashes up to there, straight from the page cache (a read-only map: no copy), and asks the kernel to start writing
that range back to the disk. When the last sample is in, the rest is hashed and the shard fsynced, so that what
remains after the last decode is the last few samples' hashing and a short fsync, not a whole shard's read-back.
Each shard is hashed by one thread at a time, in order; different shards in parallel. SHA-256 and the reads release
the GIL, so the threads run beside the parent's own work."""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import mmap
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import guard

STEP = 8 << 20  # bytes hashed between two looks at how far the shard is ready (and at a stop)
_WRITE = 2  # SYNC_FILE_RANGE_WRITE: start writing back the range's dirty pages, without waiting for them


def _sync_file_range():
    """Linux's sync_file_range, or None where there is none (then the final fsync writes everything back)."""
    if not hasattr(os, "sched_getaffinity"):  # not Linux
        return None
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_RANGE = _sync_file_range()


@dataclass
class _Shard:
    path: str
    size: int
    digest: Future = field(default_factory=Future)
    sha: object = field(default_factory=hashlib.sha256)
    pos: int = 0  # hashed up to here
    ready: int = 0  # complete up to here
    final: bool = False  # every sample is in: hash to the end, fsync, give the digest
    busy: bool = False  # a thread is on it (or it is done)


class ShardHasher:
    """`open(number, path, size)` for shards 0, 1, 2…, then `ready(number, upto)` as a shard fills and
    `ready(number, size, final=True)` once its last sample is in; `digest(number)` is a Future of its sha256 (an
    OutputError naming the file if it could not be read back or fsynced). `on_done(number, sha256)` hears of the
    shards in their order (an upload then goes shard by shard, as the pack lays them out), on a hashing thread; it must
    not raise. `close()` stops the threads (a failed pack: whatever they were doing is abandoned)."""

    def __init__(self, threads: int, on_done: Callable[[int, str], None] = lambda number, digest: None):
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="pairload-sha256")
        self._lock = threading.Lock()
        self._shards: dict[int, _Shard] = {}
        self._stop = False
        self._on_done = on_done
        self._told = threading.Lock()  # on_done in shard order: the next shard to tell of, and the digests waiting
        self._next = 0
        self._waiting: dict[int, str] = {}

    def open(self, number: int, path: str, size: int) -> None:
        with self._lock:
            self._shards[number] = _Shard(path, size)

    def digest(self, number: int) -> Future:
        return self._shards[number].digest

    def ready(self, number: int, upto: int, final: bool = False) -> None:
        with self._lock:
            shard = self._shards[number]
            shard.ready = max(shard.ready, upto)
            shard.final |= final
            if shard.busy:
                return  # the thread on it sees the new end before it stops
            shard.busy = True
        self._pool.submit(self._run, number, shard)

    def _run(self, number: int, shard: _Shard) -> None:
        try:
            with guard.writing(Path(shard.path)):
                fd = os.open(shard.path, os.O_RDONLY)
                try:
                    done = self._hash(fd, shard)
                finally:
                    os.close(fd)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the digest
            shard.digest.set_exception(exc)
            return
        if done:
            digest = shard.sha.hexdigest()
            shard.sha = None
            shard.digest.set_result(digest)
            self._tell(number, digest)

    def _tell(self, number: int, digest: str) -> None:
        with self._told:
            self._waiting[number] = digest
            while self._next in self._waiting:
                self._on_done(self._next, self._waiting.pop(self._next))
                self._next += 1

    def _hash(self, fd: int, shard: _Shard) -> bool:
        """Hash what is ready, as it becomes ready; True once the shard is whole, hashed and fsynced."""
        with mmap.mmap(fd, shard.size, prot=mmap.PROT_READ) as mm:  # a shard has its end blocks: never empty
            view = memoryview(mm)
            try:
                while True:
                    with self._lock:
                        start, stop, final = shard.pos, min(shard.ready, shard.pos + STEP), shard.final
                        if self._stop or (start >= stop and not (final and shard.pos >= shard.size)):
                            shard.busy = self._stop  # a stopped hasher takes no more work
                            return False
                    if start < stop:
                        shard.sha.update(view[start:stop])
                        if _SYNC_RANGE is not None:
                            _SYNC_RANGE(fd, start, stop - start, _WRITE)
                        with self._lock:
                            shard.pos = stop
                        continue
                    os.fsync(fd)  # final, and hashed to the end
                    return True
            finally:
                view.release()

    def close(self) -> None:
        with self._lock:
            self._stop = True
        self._pool.shutdown(wait=True, cancel_futures=True)

