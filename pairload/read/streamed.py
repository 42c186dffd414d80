"""Reading a run shard by shard: `ShardStream`, for a run that reads its shards a few at a time (wds's shuffle buffers)
of a split bigger than the memory that could cache it. Each shard's stretch (from the first byte the run reads of it
to the last) is read whole, in file order, by plain reads, a few shards at once, ahead of the batches and within a
budget of bytes; once the last batch that reads a shard is cut, the stretch is dropped from the page cache whole.

Why not the member-by-member WILLNEED of `read.ahead`: pages read in file order by plain reads come in the kernel's
large folios, pages asked for by WILLNEED (or read at random) in 4 KB pages, and both reading and dropping cost per
folio. Measured on the 2-core CPU machine (2026-11-30, `benchmarks/drop_emulation.py --costs`): dropping 700 KB read
in file order 4.5-8 µs, asked for by WILLNEED 110-334 µs. A strided run (`ram`: every shard read from the first batch
to the last) gets no `ShardStream` (`of`): a whole shard would wait in memory for the whole epoch.

A stream goes on into the run expected next (`after`: the loader's next epoch): once every shard of this run is
taken, the next run's shards are queued behind them, so that the disk reads on while this run's last shards are cut,
and that run's first batch finds its bytes read (`rebase`, as it begins). A shard the next run reads again is not
dropped by this one once the next has read it.

Advice only: errors end a reading thread quietly (`failed` keeps the last one); the batches read what they read
through the shards' maps either way. Numpy and the standard library only."""

from __future__ import annotations

import os
import threading

import numpy as np

from .ahead import expected

READERS = 4  # shards read at once (NVMe disks read several streams faster than one)
PIECE = 8 << 20  # bytes one read asks for
MOST = 2 << 30  # bytes read and not yet dropped at most (or less: `of`'s `most`)
COVERED = 0.8  # a shard's stretch is read whole only if the run reads at least this share of its bytes
ROWS = 1 << 22  # rows of the run worked out at once by `shard_runs`
JOIN_S = 2.0  # the longest `close` waits for a thread: one read in flight
FIRST = 4  # batches whose members are asked for at once (WILLNEED) as the run starts: the first batch reads from
# every shard of its shuffle buffer, and would otherwise wait for them to be read whole (0.4-0.7 s a run against
# 0.2-0.4, 600x400 lossless tiles, 256 MB shards, H200 host, 2026-11-30)


def shard_runs(source, plans) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per shard of `source` (numbered as `source.files`), over the run `plans`: the first and the last batch that
    reads it (-1: none), the first and the end of the bytes those batches read of it, and how many bytes they read (an
    input that is its own target counted once). Numpy, ROWS rows of the run at a time."""
    n = len(source.files)
    first = np.full(n, np.iinfo(np.int64).max, np.int64)
    last = np.full(n, -1, np.int64)
    start = np.full(n, np.iinfo(np.int64).max, np.int64)
    end = np.zeros(n, np.int64)
    used = np.zeros(n, np.int64)
    index = plans.all_index()
    batch = np.repeat(np.arange(len(plans), dtype=np.int64), plans.batch_sizes())
    for at in range(0, len(index), ROWS):
        shard, a, b = source.spans(index[at:at + ROWS])
        rows = len(shard) // 2
        once = np.ones(len(shard), dtype=bool)  # an input that is its own target (targets-only) is counted once
        once[:rows] = (shard[:rows] != shard[rows:]) | (a[:rows] != a[rows:])
        k = np.tile(batch[at:at + ROWS], 2)
        np.minimum.at(first, shard, k)
        np.maximum.at(last, shard, k)
        np.minimum.at(start, shard, a)
        np.maximum.at(end, shard, b)
        np.add.at(used, shard, np.where(once, b - a, 0))
    unread = last < 0
    first[unread], start[unread] = -1, 0
    return first, last, start, end, np.minimum(used, end - start)  # spans overlap by a page and a header at most


class ShardStream:
    """The shards a run reads (`shard`, in the order the run first reads them; `start`/`end`, the stretch of each it
    reads; `last`, its last batch), read whole by READERS threads in that order while at most `most` bytes are read
    and not dropped (one shard at least); `first_rows`' members (the first batches') are asked for at once, ahead of
    them. `done(b)` is told each batch whose images are on the device; it returns the stretches whose last batch that
    was, for the caller to drop (`ShardSource.dontneed_span`). A shard the batches passed before it was read is not
    read any more. Batches are numbered from the start of the stream: the current run's batch b is `base + b`."""

    def __init__(self, source, shard: np.ndarray, start: np.ndarray, end: np.ndarray, last: np.ndarray, most: int,
                 first_rows: np.ndarray | None = None, runs: int = 0, after=None):
        if first_rows is not None and len(first_rows):
            source.willneed(first_rows)
        self.source = source
        self.files = list(source.files)
        self.shard, self.start, self.end, self.last = shard, start, end, last
        self.most = int(most)
        self._size = (end - start).tolist()
        self._cond = threading.Condition()
        self._next = 0  # the next shard (of `order`) to read
        self._state = [0] * len(shard)  # 0 waiting, 1 being read, 2 read, 3 dropped
        self._of_shard: dict[int, list[int]] = {}  # shard number -> its entries, in order
        self._index_entries(0)
        self._held = 0  # bytes read (or being read) and not dropped
        self._in_flight = 0  # entries being read
        self._by_last = np.argsort(last, kind="stable")  # shards are dropped in the order their last batch is done:
        self._ending = 0  # those before this one in it are due, and
        self._due: list[int] = []  # these of them are not dropped yet (being read)
        self.base = 0  # the current run's first batch, in the stream's numbering
        self.runs = int(runs)  # the current run's batches
        self._after = after  # what gives the run expected next (`of`), and that run once queued (`follow`)
        self.foreseen = None
        self._stopped = False
        self.read = 0  # bytes read (tests and profiles)
        self.failed: BaseException | None = None
        self._threads = [threading.Thread(target=self._run, name="pairload-shard-reader", daemon=True)
                         for _ in range(READERS if after is not None else min(READERS, len(shard)))]
        for t in self._threads:
            t.start()

    @staticmethod
    def _order(source, plans, most: int):
        """(shard, start, end, last, first rows) of reading `plans` whole shard by whole shard, or None where that
        does not pay (`of`)."""
        if not len(plans) or getattr(plans, "units", None) is not None or not len(source.files):
            return None
        first, last, start, end, used = shard_runs(source, plans)
        read = np.flatnonzero(last >= 0)
        size = end[read] - start[read]
        if not len(read) or used[read].sum() < COVERED * size.sum():
            return None
        held = np.bincount(first[read], weights=size, minlength=len(plans) + 1)  # bytes open at each batch
        held -= np.bincount(last[read] + 1, weights=size, minlength=len(plans) + 1)
        if np.cumsum(held).max() > most:
            return None
        order = read[np.argsort(first[read], kind="stable")]
        rows = int(plans.batch_sizes()[:FIRST].sum())
        return order, start[order], end[order], last[order], plans.all_index()[:rows]

    @classmethod
    def of(cls, source, plans, most: int, after=None) -> "ShardStream | None":
        """A `ShardStream` for the run `plans` of `source`, or None where reading whole shards does not pay: a run of
        clips, a run that would hold more than `most` bytes of shards at once to read them whole (a strided run holds
        them all), or one that reads less than COVERED of its shards' stretches. `after()` gives the run expected
        after this one (or None): its shards are queued behind this run's once every one of these is taken
        (`follow`); the reading threads wait for it meanwhile."""
        got = cls._order(source, plans, most)
        return None if got is None else cls(source, *got[:4], most, got[4], runs=len(plans), after=after)

    def rebase(self, plans, after=None) -> list[tuple[int, int, int]] | None:
        """The run `plans` begins: if it is the one queued behind the current run (`follow`), go on with it (its
        batch b is now `base + b`; `after`: the run expected after it, as `of`'s) and return the stretches of the run
        before to drop now (none, where every one was); else None (the caller starts another stream)."""
        if plans is None or plans is not self.foreseen:
            return None
        out = self.done(self.runs - 1)  # everything of the run before is due
        with self._cond:
            self.base += self.runs
            self.runs, self._after, self.foreseen = len(plans), after, None
            self._cond.notify_all()
        return out

    def _forget_dropped(self) -> None:
        """Forget the entries of the runs before the current one once every one is dropped and no read is in flight
        (a reading thread holds its entry's number; under the lock): a stream that goes on for many epochs keeps
        only the current run's and the next's."""
        if self._in_flight or not self.base:
            return
        c = int(np.searchsorted(self.last, self.base, side="left", sorter=self._by_last))
        old = self._by_last[:c]  # the entries of the runs before: the first c, as runs are queued in order
        if not c or old.max() != c - 1 or any(self._state[k] != 3 for k in old.tolist()):
            return
        self.shard, self.start, self.end, self.last = self.shard[c:], self.start[c:], self.end[c:], self.last[c:]
        self._size, self._state = self._size[c:], self._state[c:]
        self._by_last, self._ending = self._by_last[c:] - c, self._ending - c
        self._due = [k - c for k in self._due]
        self._next = max(0, self._next - c)
        self._of_shard = {}
        self._index_entries(0)

    def _index_entries(self, first: int) -> None:
        """Add the entries from `first` on to `_of_shard` (under the lock, or before the threads start)."""
        for k, number in enumerate(self.shard[first:].tolist(), first):
            self._of_shard.setdefault(number, []).append(k)

    @property
    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def follow(self, b: int) -> None:
        """Batch b is being decoded (the shards are read by bytes held, not by batches): once every shard of this run
        is taken, queue the run expected next (`of`'s `after`) behind them."""
        if self._after is None or self._next < len(self.shard):
            return
        plans = expected(self._after)
        got = None if plans is None else self._order(self.source, plans, self.most)
        if got is not None and len(got[4]):
            self.source.willneed(got[4])
        with self._cond:
            self._after = None
            self._cond.notify_all()  # the reading threads: more shards, or none (they end)
            if got is None:
                return
            shard, start, end, last, _ = got
            n = len(self.shard)
            self.shard = np.concatenate([self.shard, shard])
            self.start = np.concatenate([self.start, start])
            self.end = np.concatenate([self.end, end])
            self.last = np.concatenate([self.last, last + self.base + self.runs])
            self._size += (end - start).tolist()
            self._state += [0] * len(shard)
            self._index_entries(n)
            self._by_last = np.concatenate([self._by_last, n + np.argsort(last, kind="stable")])
            self.foreseen = plans

    def done(self, b: int) -> list[tuple[int, int, int]]:
        """Batch b of the current run (and every batch before it) is cut: (shard, start, end) of each stretch to
        drop now, those of the shards whose last batch is b or earlier (a shard being read is dropped at a later
        call, once read)."""
        out = []
        with self._cond:
            b += self.base
            while self._ending < len(self._by_last) and self.last[self._by_last[self._ending]] <= b:
                self._due.append(int(self._by_last[self._ending]))
                self._ending += 1
            for k in [k for k in self._due if self._state[k] != 1]:
                self._due.remove(k)
                self._held -= self._size[k] if self._state[k] == 2 else 0
                self._state[k] = 3
                if not self._read_later(k):  # the next run has read the shard again: its pages stay for it
                    out.append((int(self.shard[k]), int(self.start[k]), int(self.end[k])))
            self._forget_dropped()
            self._cond.notify_all()
        return out

    def _read_later(self, k: int) -> bool:
        """Whether a later entry of entry k's shard is read or being read (under the lock)."""
        entries = self._of_shard[int(self.shard[k])]
        return any(self._state[j] in (1, 2) for j in entries[entries.index(k) + 1:])

    def close(self) -> None:
        """Stop the threads (each ends the read in hand)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(JOIN_S)

    def _take(self) -> int | None:
        """The next shard to read, once the bytes held allow it (None: stopped, or none left and none to come)."""
        with self._cond:
            while True:
                while self._next < len(self.shard) and self._state[self._next] == 3:
                    self._next += 1  # the batches passed it: dropped unread
                if self._stopped or (self._next >= len(self.shard) and self._after is None):
                    return None
                k = self._next
                if k >= len(self.shard):  # the run expected next may be queued (`follow`)
                    self._cond.wait()
                    continue
                if self._held == 0 or self._held + self._size[k] <= self.most:
                    self._next += 1
                    self._state[k] = 1
                    self._held += self._size[k]
                    self._in_flight += 1
                    return k
                self._cond.wait()

    def _run(self) -> None:
        buf = memoryview(bytearray(PIECE))
        try:
            while (k := self._take()) is not None:
                try:
                    self._read(k, buf)
                finally:
                    with self._cond:
                        self._state[k] = 2
                        self._in_flight -= 1
                        self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - advice only: the batches read through the maps without it
            self.failed = exc

    def _read(self, k: int, buf: memoryview) -> None:
        fd = os.open(self.files[int(self.shard[k])], os.O_RDONLY)
        try:
            at, end = int(self.start[k]), int(self.end[k])
            while at < end and not self._stopped:
                got = os.preadv(fd, [buf[:min(PIECE, end - at)]], at)
                if got <= 0:
                    return
                at += got
                self.read += got
        finally:
            os.close(fd)
