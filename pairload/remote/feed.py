"""Shards of one remote split made local ahead of use, in the order the planner will use them.

`want(order)` queues shards (by number, first use first); `concurrency` threads download them through the node's
`ShardCache` while the loader works, within the cache's limit: a download ahead waits until the limit has room
(evicting shards no process holds and this epoch no longer needs). `ensure(numbers)` makes shards local now (a
download already under way is waited for, one not started is fetched by the caller) and holds them until
`release(numbers)`: a held shard is never evicted by any process of the node.
"""

from __future__ import annotations

import threading
from collections import deque

from .cache import ShardCache

AHEAD_POLL = 0.2  # seconds between checks for room when the cache is full of shards in use


class ShardFeed:
    def __init__(self, cache: ShardCache, urls: list[str], shas: list[str], sizes: list[int], *, concurrency: int = 4):
        self.cache, self.urls, self.shas, self.sizes = cache, urls, shas, sizes
        self.concurrency = max(1, concurrency)
        self._cond = threading.Condition()
        self._queue: deque[int] = deque()
        self._busy: set[int] = set()  # downloads under way
        self._errors: dict[int, BaseException] = {}
        self._holds = [0] * len(urls)  # holds this feed keeps on each shard (prefetched, then one per batch)
        self._prefetched: set[int] = set()  # fetched ahead, first use still to come (holds 1)
        self._threads: list[threading.Thread] = []
        self._closed = False

    # ------------------------------------------------------------------ ahead

    def want(self, order) -> None:
        """Download these shards (in this order, after any queued) ahead of use."""
        with self._cond:
            queued = set(self._queue)
            for n in order:
                n = int(n)
                if n not in queued and n not in self._busy and self._holds[n] == 0 and n not in self._errors:
                    self._queue.append(n)
                    queued.add(n)
            self._start()
            self._cond.notify_all()

    def _start(self) -> None:
        self._threads = [t for t in self._threads if t.is_alive()]
        while len(self._threads) < min(self.concurrency, len(self._queue)) and not self._closed:
            t = threading.Thread(target=self._run, name="pairload-fetch", daemon=True)
            t.start()
            self._threads.append(t)

    def _future(self) -> set[str]:
        """Shards this feed will use: queued or held (kept when room is made)."""
        return {self.shas[n] for n in self._queue} | {self.shas[n] for n, h in enumerate(self._holds) if h}

    def _ahead_bytes(self, n: int) -> int:
        """Room a download ahead needs: its own bytes, those of the downloads under way and, under a limit, two
        of the largest shards kept free for the shards a batch needs now (else shards fetched ahead could fill the
        limit while the next batch's shard waits)."""
        need = self.sizes[n] + sum(self.sizes[m] for m in self._busy)
        return need + (2 * max(self.sizes) if self.cache.limit is not None else 0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed or not self._queue:
                        return
                    n = self._queue[0]
                    if self._holds[n] or n in self._busy:
                        self._queue.popleft()
                        continue
                    if self.cache.room_for(self._ahead_bytes(n), keep=self._future()):
                        self._queue.popleft()
                        self._busy.add(n)
                        break
                    self._cond.wait(AHEAD_POLL)  # the limit is full of shards in use: wait for a release
            self._fetch(n, prefetch=True)

    def _fetch(self, n: int, prefetch: bool) -> None:
        try:
            self.cache.fetch(self.urls[n], self.shas[n], self.sizes[n])
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of ensure
            with self._cond:
                self._busy.discard(n)
                if prefetch:
                    self._errors[n] = exc
                self._cond.notify_all()
            if not prefetch:
                raise
            return
        with self._cond:
            self._busy.discard(n)
            self._holds[n] += 1
            if prefetch:
                self._prefetched.add(n)
            self._cond.notify_all()

    # ------------------------------------------------------------------ now

    def ensure(self, numbers) -> None:
        """Make these shards local now and hold them (one hold each, given back by `release`)."""
        for n in numbers:
            n = int(n)
            with self._cond:
                while n in self._busy:
                    self._cond.wait(AHEAD_POLL)
                if n in self._errors:
                    raise self._errors.pop(n)
                if n in self._prefetched:
                    self._prefetched.discard(n)  # the prefetch's hold becomes this use's
                    continue
                if self._holds[n]:
                    self._holds[n] += 1
                    continue
                try:
                    self._queue.remove(n)
                except ValueError:
                    pass
                self._busy.add(n)
            self._fetch(n, prefetch=False)

    def release(self, numbers) -> None:
        with self._cond:
            for n in numbers:
                n = int(n)
                if self._holds[n] > 0:
                    self._holds[n] -= 1
                    if self._holds[n] == 0:
                        self._prefetched.discard(n)
                        self.cache.unhold(self.shas[n])
            self._cond.notify_all()

    def close(self) -> None:
        """Stop downloading ahead and give back every hold."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=5)
        with self._cond:
            for n, h in enumerate(self._holds):
                if h:
                    self.cache.unhold(self.shas[n])
            self._holds = [0] * len(self.urls)
            self._prefetched.clear()
            self._errors.clear()
            self._closed = False  # a later iteration may queue downloads again
