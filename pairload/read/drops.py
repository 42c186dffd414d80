"""Dropping a split's pages from the page cache off the caller's thread: `Drops`, one thread that runs the source's
`dontneed` for each group of samples handed to it, in order. Each is a madvise and an fadvise a member, about 0.2 ms a
sample (the kernel's cost is per page, and pages read ahead or at random come in 4 KB pages): 13-17 ms a decode call
of 64 600x400 pairs on the 2-core CPU machine (2026-11-30), which a loading thread would otherwise spend between its
cuts. Advice: the source's `dontneed` ignores its own errors."""

from __future__ import annotations

import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor

QUEUED = 4  # groups that may wait to be dropped: the pages they hold are bounded too


class Drops:
    """`drop(indices)` hands a group of samples' pages to the thread (waiting while QUEUED groups wait), `span(shard,
    start, end)` a stretch of a shard (`ShardSource.dontneed_span`); `close()` returns once every one handed over is
    dropped. The thread starts at the first."""

    def __init__(self, source):
        self.source = source
        self._pool: ThreadPoolExecutor | None = None
        self._waiting: deque = deque()

    def drop(self, indices) -> None:
        self._submit(self.source.dontneed, indices)

    def span(self, shard: int, start: int, end: int) -> None:
        self._submit(self.source.dontneed_span, shard, start, end)

    def _submit(self, fn, *args) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="pairload-drop")
            weakref.finalize(self, self._pool.shutdown, wait=False)  # dropped unclosed: the thread ends
        while self._waiting and (len(self._waiting) >= QUEUED or self._waiting[0].done()):
            self._waiting.popleft().result()
        self._waiting.append(self._pool.submit(fn, *args))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._waiting.clear()
