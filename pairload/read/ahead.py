"""Reading a split ahead of its cuts: `ReadAhead`, one thread of the loading process that asks the kernel to read the
members of coming batches (posix_fadvise WILLNEED) a bounded window ahead of the batch being cut, so that the
processes that cut never wait on the disk's queue (or only the parts of members a batch reads, which the thread
works out, reading their headers itself: its `ranges`); `merged`, byte ranges merged into as few requests as they make;
and `batches_within`, how many batches a window of bytes holds. Advice only: nothing here raises into the loader or
changes what is read. Numpy only (and psutil, through `hostmemory`, for the memory at hand)."""

from __future__ import annotations

import os
import threading
from collections import deque

import numpy as np

from .. import willneed

AT_ONCE = 4  # batches whose ranges the thread works out at once, where it reads their members' headers itself: a
# block of the plan at once (256 batches) kept it reading 16,000 headers one by one while nothing else was asked for
# (a first epoch at 430-690 pairs/s where 2,400 were read before, 12,000 tiled 600x400 pairs, H200, 2026-12-01)
HEADS_AHEAD = 1  # chunks beyond the one being worked out whose members' starts (`ranges.heads`) are asked for with it
JOIN_S = 2.0  # the longest `close` waits for the thread: one request in flight waits at most for the disk's queue


def merged(shard: np.ndarray, start: np.ndarray, end: np.ndarray, group: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The byte ranges [start, end) of each shard merged where they touch or overlap, never across `group`s (batches):
    (group, shard, start, end) sorted by group, then in file order, so that one system call covers a sample's two
    members (and neighbours read together). Without `group`, one group (0)."""
    group = np.zeros(len(start), np.int64) if group is None else np.asarray(group, np.int64)
    if not len(start):
        return group[:0], group[:0], group[:0], group[:0]
    order = np.lexsort((start, shard, group))
    group, shard, start, end = group[order], shard[order], start[order], end[order]
    new = np.ones(len(start), dtype=bool)
    new[1:] = (group[1:] != group[:-1]) | (shard[1:] != shard[:-1]) | (start[1:] > end[:-1])  # members never nest
    first = np.flatnonzero(new)
    return group[first], shard[first], start[first], np.maximum.reduceat(end, first)


def expected(after):
    """`after()`: the run expected next, or None where there is none or planning it failed (reading ahead is advice:
    a real error is raised where that run is planned for its own batches)."""
    if after is None:
        return None
    try:
        return after()
    except Exception:  # noqa: BLE001 - advice only
        return None


def batches_within(source, rows: int, most: int) -> int:
    """How many batches of `rows` samples of `source` (at its mean stored bytes a sample) fit in `most` bytes, or in
    half of the memory available if less: what reading ahead may hold of the page cache (clean pages, reclaimable)."""
    from ..hostmemory import host_memory

    batch = max(1.0, rows * sum(source.shard_bytes) / max(1, len(source)))
    return int(min(most, host_memory().available // 2) // batch)


class _Chunk:
    """Queued batches' merged ranges (`batch`: the number of the batch each range is of), asked from `at` on; until
    the reading thread works them out (`ReadAhead`'s `ranges`), the plans of its batches (`plans`, the first of them
    numbered `first`; `headed`: the starts of their members asked for)."""

    __slots__ = ("batch", "shard", "start", "end", "at", "plans", "first", "headed")

    def __init__(self, batch=None, shard=None, start=None, end=None, plans=None, first: int = 0):
        self.batch, self.shard, self.start, self.end, self.at = batch, shard, start, end, 0
        self.plans, self.first, self.headed = plans, first, False

    @property
    def next(self) -> int | None:
        """The number of the next batch to ask for, None when all are asked for."""
        if self.plans is not None:
            return self.first
        return int(self.batch[self.at]) if self.at < len(self.batch) else None


class ReadAhead:
    """A thread that asks the kernel to read coming batches, in the order they will be cut, at most `window` batches
    beyond the last one handed out to be cut (`cutting(serial)`): their pages wait in the page cache (clean, so
    reclaimable), so the window is what the reading may hold of memory. Batches are numbered 0, 1, ... as `add`
    queues them (`reset` starts again at 0); `add` works out their ranges with numpy, a block of batches at a time
    (or, given `ranges`, the thread does, AT_ONCE batches at a time as they come within the window), and the thread
    spends one system call per merged range. posix_fadvise(WILLNEED) waits while the disk's queue is full, with the GIL
    released: that wait is this thread's, not the cutting processes'.

    `source`: a `ShardSource` (its `files` and `spans`). Errors end the thread quietly (`failed` keeps the last one):
    reading ahead is advice, and a missing or unreadable shard is reported by the batch that reads it."""

    def __init__(self, source, window: int, ranges=None):
        self.window = max(1, int(window))
        # what a list of planned batches reads, worked out in the thread: `ranges(plans, read)` (`read(shard, start,
        # size)`: bytes of a shard) gives (batch, shard, start, end), batches numbered from 0, and `ranges.heads(plans)`
        # where present (shard, start, end) to ask for a block ahead (a decode stage's tiled members: only the tiles
        # their windows touch, and the headers that say where those are: `tileplan.TileReads`); None: every member
        # whole (`source.spans`)
        self._ranges = ranges
        self.files = list(source.files)
        self._spans = source.spans
        self._keep_open = not source.remote  # a cached remote shard may be evicted: no descriptor kept past a request
        self._cond = threading.Condition()
        self._queue: deque[_Chunk] = deque()
        self._queued = 0  # serial number of the next batch `add` queues
        self._plans = None  # the run `follow` queues from (`reset`), its next batch to queue, and its first's serial
        self._plan_to = 0
        self._base = 0
        self._after = None  # what gives the run expected next (`reset`), and that run once its batches are queued
        self.foreseen = None  # behind the current run's, from serial `_foreseen_base` (next batch `_foreseen_to`)
        self._foreseen_to = self._foreseen_base = 0
        self._cut = -1  # last batch handed out to be cut
        self._stopped = False
        self._fds: dict[int, int] = {}
        self.asked = 0  # ranges asked for (tests and profiles)
        self.failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="pairload-read-ahead", daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """Batches queued since the start or the last `reset`."""
        return self._queued

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def add(self, indices: np.ndarray, sizes: np.ndarray) -> None:
        """Queue the next len(sizes) batches, of sizes[k] rows each, `indices` their rows in order."""
        self._push(_Chunk(*self._whole(indices, sizes, self._queued)), len(sizes))

    def _whole(self, indices: np.ndarray, sizes, first: int) -> tuple:
        """The merged ranges (batch, shard, start, end) of batches first, first + 1, ... read whole: sizes[k] rows
        each, `indices` their rows in order."""
        batch = np.repeat(np.arange(first, first + len(sizes), dtype=np.int64), np.asarray(sizes, np.int64))
        shard, start, end = self._spans(indices)
        return merged(shard, start, end, np.tile(batch, 2))  # spans: inputs, then targets

    def _push(self, chunk: _Chunk, batches: int) -> None:
        with self._cond:
            self._queue.append(chunk)
            self._queued += batches
            self._cond.notify()

    def add_block(self, plans, k: int) -> int:
        """Queue batches k, ... of `plans` (a planned run) to the end of the block of the plan holding k; returns the
        batch after that block."""
        block = plans.block_at(k)
        j = k - block.first
        if self._ranges is None:
            self.add(block.column("index")[int(block.starts[j]):], block.sizes[j:])
        else:  # worked out by the thread (`_work_out`), AT_ONCE batches at a time
            for a in range(j, len(block), AT_ONCE):
                self._push(_Chunk(plans=block.plans[a:a + AT_ONCE], first=self._queued), min(AT_ONCE, len(block) - a))
        return block.first + len(block)

    def follow(self, b: int) -> None:
        """Batch b of the run given to `reset` is being read: queue the run's batches up to `window` beyond it (a
        block of the plan at a time), then the run expected after it (`reset`'s `after`), and ask for them
        (`cutting`)."""
        b += self._base
        while self._queued <= b + self.window:
            if self._plan_to < len(self._plans):
                self._plan_to = self.add_block(self._plans, self._plan_to)
            elif self._after is not None:
                after, self._after = self._after, None
                nxt = expected(after)
                if nxt is not None and len(nxt):
                    self.foreseen, self._foreseen_to, self._foreseen_base = nxt, 0, self._queued
            elif self.foreseen is not None and self._foreseen_to < len(self.foreseen):
                self._foreseen_to = self.add_block(self.foreseen, self._foreseen_to)
            else:
                break
        self.cutting(b)

    def cutting(self, serial: int) -> None:
        """Batch `serial` is handed out to be cut: ask for the batches up to `serial + window`."""
        with self._cond:
            if serial > self._cut:
                self._cut = serial
                self._cond.notify()

    def reset(self, plans=None, after=None) -> None:
        """Forget the queued batches (the loader goes on elsewhere in the plan); the next `add` queues batch 0, and
        `follow` the batches of `plans` (a planned run) from its first, then those of `after()` (the run expected
        next, or None). If `plans` is the run queued behind the last one's, the batches queued of it are kept, and
        those of the last run not asked for yet (it was broken off) dropped."""
        with self._cond:
            if plans is not None and plans is self.foreseen:
                self._plans, self._plan_to, self._base = plans, self._foreseen_to, self._foreseen_base
                self._queue = deque(c for c in self._queue if c.next is not None and c.next >= self._base)
            else:
                self._queue.clear()
                self._queued, self._cut = 0, -1
                self._plans, self._plan_to, self._base = plans, 0, 0
            self._after, self.foreseen = after, None

    def close(self) -> None:
        """Stop the thread (it finishes the request in hand) and close its files."""
        with self._cond:
            self._stopped = True
            self._queue.clear()
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(JOIN_S)

    def _due(self) -> _Chunk | None:
        while self._queue and self._queue[0].next is None:
            self._queue.popleft()
        if self._queue and self._queue[0].next <= self._cut + self.window:
            return self._queue[0]
        return None

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._stopped and (chunk := self._due()) is None:
                        self._cond.wait()
                    if self._stopped:
                        return
                    if chunk.plans is None:
                        a = chunk.at
                        b = chunk.at = int(np.searchsorted(chunk.batch, self._cut + self.window, side="right"))
                    else:
                        later = [self._queue[n] for n in range(1, min(len(self._queue), 1 + HEADS_AHEAD))]
                if chunk.plans is None:
                    self._ask(chunk.shard[a:b].tolist(), chunk.start[a:b].tolist(), chunk.end[a:b].tolist())
                else:
                    self._work_out(chunk, later)
        except BaseException as exc:  # noqa: BLE001 - advice only: the loader reads on without it
            self.failed = exc
        finally:
            self._close_files()

    def _work_out(self, chunk: _Chunk, later: list[_Chunk]) -> None:
        """The ranges of a chunk's batches (`ranges`), the starts of its members and the next HEADS_AHEAD chunks'
        (`later`) asked for first (`ranges.heads`) so that their headers are read together; where `ranges` fails,
        its members whole."""
        plans = chunk.plans
        try:
            heads = getattr(self._ranges, "heads", None)
            for c in (chunk, *later):
                if heads is not None and c.plans is not None and not c.headed:
                    c.headed = True
                    self._ask(*(a.tolist() for a in heads(c.plans)))
            batch, shard, start, end = self._ranges(plans, self._read)
            ranges = merged(shard, start, end, np.asarray(batch, np.int64) + chunk.first)
        except Exception as exc:  # noqa: BLE001 - advice only: the members are asked for whole instead
            self.failed = exc
            ranges = self._whole(np.concatenate([bp.index for bp in plans]), [len(bp) for bp in plans], chunk.first)
        finally:
            if not self._keep_open:
                self._close_files()
        with self._cond:
            chunk.batch, chunk.shard, chunk.start, chunk.end = ranges
            chunk.plans = None

    def _fd(self, number: int) -> int:
        """The reading descriptor of shard `number` (FileNotFoundError: a remote shard not downloaded yet)."""
        fd = self._fds.get(number)
        if fd is None:
            fd = self._fds[number] = os.open(self.files[number], os.O_RDONLY)
            # its reads (a member's header) read what they ask for: the kernel's read-ahead around each one brought
            # in neighbours no batch had asked for, filling a memory limit until asked-for pages were dropped unused
            # and read again (a first epoch at 430-690 pairs/s where 2,400 were read before, H200, 2026-12-01)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            except OSError:  # advice: a file system that takes none reads as it would
                pass
        return fd

    def _read(self, number: int, start: int, size: int) -> np.ndarray:
        """`size` bytes of shard `number` from `start` (fewer at its end): what `ranges` reads of a member's header."""
        return np.frombuffer(os.pread(self._fd(number), size, start), np.uint8)

    def _ask(self, shards: list[int], starts: list[int], ends: list[int]) -> None:
        try:
            for number, a, b in zip(shards, starts, ends):
                if self._stopped:
                    return
                try:
                    fd = self._fd(number)
                except FileNotFoundError:  # a remote shard not downloaded yet: its batch fetches it
                    continue
                try:
                    willneed.file_range(fd, a, b - a)
                except OSError:
                    continue
                self.asked += 1
        finally:
            if not self._keep_open:
                self._close_files()

    def _close_files(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
