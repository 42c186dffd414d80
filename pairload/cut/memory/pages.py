"""The page cache registered with the device a piece at a time, in the order the plan reads it (the `Memory` the
zero-copy path's kernel cuts from).

Each shard map is cut into pieces (`Grid`): CHUNK bytes each where the device reads registered memory at its host
address (`host_pointers`, every 64-bit Linux GPU with unified addressing), else whole shards. For a run of planned
batches, `Grid.schedule` lists the pieces in the order the batches first read them and the batch that reads each last.
A thread (`PageCache`) registers the pieces in that order (`cuMemHostRegister`, read-only), the disk read ahead of it
(`madvise(MADV_WILLNEED)` on the next pieces: many reads in flight). So:

- the first batch of a cold split is cut as soon as its own pieces are in, not after the whole split is read;
- `streaming` (the `wds` deal, a shuffle buffer of shards at a time): a piece goes back (unregistered, its remote shard
  released to the node cache) once the batch that reads it last is cut, and the thread registers at most `ahead`
  bytes beyond what the current batch needs. Without `streaming` (`ram`) the pieces stay registered; once a run's
  own pieces are in, the thread registers the rest of the split in the background (`_fill`), so that the next run,
  on any number of ranks, finds all of it registered. (The pieces are never registered again as whole shards: the
  kernel reads 4 MB pieces as fast, and doing so cost a whole epoch's start.)

The kernel reads each sample at `low[i]`/`high[i]` (device addresses, set here shard by shard as the shards are
mapped). A batch is only launched once every piece it reads is registered (`wait`), and a piece is only unregistered
once the kernels that read it are done (their event). Pinned pages are never evicted; a shard truncated or replaced on
disk is found by `check` (a named error; the GPU keeps reading the pinned pages, never a SIGBUS), and a registration
the kernel refuses because the file shrank names the shard too.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import LoaderError, PairloadError
from ...units import human_bytes
from .driver import Driver, register, unregister

CHUNK = 4 << 20  # bytes per registered piece (a multiple of the page size): a 600x400 pair spans one or two
READ_AHEAD = 8  # pieces whose disk reads are started ahead of the one being registered
CHECK_S = 0.5  # seconds between checks that the registered shard files are still the ones on disk
VECTOR = 16  # bytes the kernel reads at once: it may read up to VECTOR - 1 bytes beyond a sample's pixels
WAIT_S = 300.0  # a batch waits this long for its pieces before the loader gives up, naming them

# ---------------------------------------------------------------------------------------------- the pieces


@dataclass(frozen=True)
class Schedule:
    """A run's pieces: `order` (piece ids in the order the batches first read them), `upto[b]` (how many of `order`
    batches 0..b read), `of_batch[b]:of_batch[b+1]` (where batch b's pieces lie in `reads`), `last[p]` (the last batch
    reading piece p, -1: none)."""

    order: np.ndarray
    upto: np.ndarray
    bytes_to: np.ndarray  # bytes_to[k]: bytes of order[:k]
    reads: np.ndarray
    of_batch: np.ndarray
    last: np.ndarray

    def pieces(self, b: int) -> np.ndarray:
        return self.reads[self.of_batch[b]:self.of_batch[b + 1]]


def sample_offsets(ds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(shard, low, high) of every sample of `ds` (a mix's sources one after another): its shard in the dataset's
    global numbering, and where its input's and its target's pixels start in that shard."""
    shard, low, high, base = [], [], [], 0
    for part in ds.sources:
        idx = part.index
        shard.append(np.asarray(idx.shard, dtype=np.int64) + base)
        low.append(np.asarray(idx.low, dtype=np.int64))
        high.append(np.asarray(idx.high, dtype=np.int64))
        base += len(part.shard_bytes)
    return tuple(np.concatenate(c) if c else np.zeros(0, np.int64) for c in (shard, low, high))


class Grid:
    """The split's shards cut into pieces of `chunk` bytes (None: one piece per shard). Shard s (the dataset's global
    numbering: a mix's sources one after another) has pieces first[s] .. first[s+1]-1; sample i's bytes (input and
    target) lie in pieces lo[i] .. hi[i]."""

    def __init__(self, ds, chunk: int | None):
        sizes = np.asarray(ds.shard_bytes, dtype=np.int64)
        counts = np.ones(len(sizes), dtype=np.int64) if chunk is None else np.maximum(1, -(-sizes // chunk))
        self.first = np.concatenate([[0], np.cumsum(counts)])
        self.count = int(self.first[-1])
        self.shard = np.repeat(np.arange(len(sizes)), counts)  # each piece's shard
        local = np.arange(self.count) - self.first[self.shard]
        self.start = local * (chunk or 0)  # each piece's first byte in its shard
        self.nbytes = sizes[self.shard] - self.start if chunk is None else np.minimum(chunk, sizes[self.shard]
                                                                                       - self.start)
        self.sample_shard, self.low, self.high = sample_offsets(ds)
        s = self.sample_shard
        if chunk is None:
            self.lo = self.hi = self.first[s]
        else:
            members = ds.members
            hw = np.asarray(ds.sizes, dtype=np.int64)
            low_n = hw[:, 0] * hw[:, 1] * members.low.pixel_bytes
            high_n = hw[:, 0] * hw[:, 1] * members.scale ** 2 * members.high.pixel_bytes
            begin = np.minimum(self.low, self.high)
            end = np.maximum(self.low + low_n, self.high + high_n)
            # the kernel reads 16-byte aligned vectors: up to 15 bytes past a sample's end (still in its shard: tar
            # files are whole 512-byte blocks) and before its start (in the same piece: pieces are page-aligned)
            last = np.minimum(np.maximum(end, begin + 1) + VECTOR - 1, sizes[s]) - 1
            self.lo = self.first[s] + begin // chunk
            self.hi = self.first[s] + last // chunk
        read = np.zeros(self.count + 1, dtype=np.int64)  # pieces some sample reads (not a shard's tar trailer alone)
        np.add.at(read, self.lo, 1)
        np.add.at(read, self.hi + 1, -1)
        self.read = np.cumsum(read[:-1]) > 0

    def schedule(self, run) -> Schedule:
        """The pieces a run's batches read (`run`: a `plan.run.Run`), in first-read order."""
        n = len(run)
        index = run.all_index().astype(np.int64) if n else np.zeros(0, np.int64)
        batch = np.repeat(np.arange(n), run.batch_sizes())
        lo, hi = self.lo[index], self.hi[index]
        span = hi - lo + 1
        starts = np.repeat(lo - np.concatenate([[0], np.cumsum(span)[:-1]]), span)
        reads = starts + np.arange(int(span.sum()))  # each sample's pieces, lo..hi, in plan order
        read_batch = np.repeat(batch, span)
        ids, first_at = np.unique(reads, return_index=True)
        by_first = np.argsort(first_at, kind="stable")
        order, first_batch = ids[by_first], read_batch[first_at[by_first]]
        upto = np.searchsorted(first_batch, np.arange(n), side="right")
        last = np.full(self.count, -1, dtype=np.int64)
        last[reads] = read_batch  # later reads overwrite earlier ones: the last batch reading each piece
        of_batch = np.searchsorted(read_batch, np.arange(n + 1), side="left")
        bytes_to = np.concatenate([[0], np.cumsum(self.nbytes[order])])
        return Schedule(order, upto, bytes_to, reads, of_batch, last)


# ---------------------------------------------------------------------------------------------- registration


class PageCache:
    """The pieces of `ds` registered with `device` as a run's batches need them (see the module's doc). `budget`:
    bytes read ahead may pin at most (the pieces the current batch reads are registered whatever it says);
    `streaming`: pieces go back after their last batch; `ahead`: bytes registered beyond the current batch's
    (None: up to the budget)."""

    together = 1  # streaming: a launch's batches would be pinned at once, and a window keeps one at a time
    pids: list[int] = []  # no processes of its own

    def __init__(self, ds, device: torch.device, *, budget: int, streaming: bool, ahead: int | None = None):
        self.ds, self.device, self.budget, self.streaming = ds, device, int(budget), streaming
        with torch.cuda.device(device):
            torch.cuda.current_stream(device)  # the device's context exists and is current here
            self._ctx = Driver.current_context()
            self.host_pointers = Driver.host_pointers(device)
        self.grid = Grid(ds, CHUNK if self.host_pointers else None)
        self.ahead = self.budget if ahead is None else int(ahead)
        self._state = np.zeros(self.grid.count, dtype=bool)  # registered
        self._ptr = np.zeros(self.grid.count, dtype=np.int64)
        self._live = np.zeros(len(ds.shard_bytes), dtype=np.int64)  # registered pieces per shard
        self._base = np.zeros(len(ds.shard_bytes), dtype=np.int64)  # each mapped shard's device address
        self._tables_at = np.zeros(len(ds.shard_bytes), dtype=np.int64)  # the base the tables hold for it
        self._tokens: dict[int, object] = {}  # shard -> what holds it in the node cache (remote sources)
        self._maps: dict[int, np.ndarray] = {}
        self.pinned = 0  # bytes registered now
        self._cond = threading.Condition()
        self._sched: Schedule | None = None
        self._pos = 0  # next entry of the schedule's order the thread registers
        self._done = 0  # entries of the order registered (the thread goes in order: all of order[:_done])
        self._advised = 0  # entries of the order whose disk reads were started
        self._front = 0  # entries of the order the current batch needs
        self._filled = 0  # pieces (in grid order) looked at by `_fill`
        self._gen = 0  # runs begun: a registration of an earlier run's schedule does not move `_done`
        self._idle = False  # the thread waits for the current batch to move on
        self._stale: set[int] = set()  # shards mapped anew since the tables were last pointed
        self._error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        self._releasing: deque = deque()  # (event, pieces) to unregister once the event is done (streaming)
        self._checked = time.monotonic()
        self._held: set[int] = set()  # the host address of every registration this object made and holds
        # a loader dropped without close(): its registrations go when this object does (its thread holds only a
        # weak reference to it)
        self._finalizer = weakref.finalize(self, _release_all, self._held, self._ctx, self.device)
        self._finalizer.atexit = False  # at exit the process's registrations end with it
        self._tables()

    # -- the device's address tables: sample i's input at low[i], target at high[i]
    def _tables(self) -> None:
        self.low_off = torch.from_numpy(self.grid.low).to(self.device)
        self.high_off = torch.from_numpy(self.grid.high).to(self.device)
        self.low = torch.zeros_like(self.low_off)
        self.high = torch.zeros_like(self.high_off)
        self.width = torch.from_numpy(np.ascontiguousarray(self.ds.sizes[:, 1], dtype=np.int64)).to(self.device)
        shard = self.grid.sample_shard
        # samples of shard s are samples[s]..samples[s+1]-1 (a shard's samples follow the previous shard's)
        self._samples = np.searchsorted(shard, np.arange(len(self.ds.shard_bytes) + 1), side="left")

    def _point(self, shards) -> None:
        """Write the device addresses of these (registered) shards' samples, on the current stream."""
        for s in shards:
            base = int(self._base[s])
            if base == self._tables_at[s]:
                continue
            a, b = int(self._samples[s]), int(self._samples[s + 1])
            torch.add(self.low_off[a:b], base, out=self.low[a:b])
            torch.add(self.high_off[a:b], base, out=self.high[a:b])
            self._tables_at[s] = base

    # -- the consumer: one run at a time
    def begin(self, plans, after=None) -> Schedule:
        """Start registering what this run's batches read, in the order they read it. Streaming, what an earlier
        run left registered and this one does not read goes back (the caller has waited for its kernels). The run
        expected next (`after`) is not read ahead here: each piece is registered as the plan reaches it."""
        sched = self.grid.schedule(plans)
        if self.streaming:
            self.reap(block=True)
            self._unregister(np.flatnonzero(self._state & (sched.last < 0)))
        with self._cond:
            self._raise()
            # what is registered already (all of it, from the second epoch of a split that stays): done now
            missing = ~self._state[sched.order]
            ready = int(missing.argmax()) if missing.any() else len(sched.order)
            self._sched, self._pos, self._done, self._advised, self._front = sched, ready, ready, ready, 0
            self._gen += 1
            self._cond.notify_all()
        if self.ds.remote and len(plans):
            self.ds.want(plans.all_index())  # downloads start in the order of use
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=_registrar, args=(weakref.ref(self), self._cond, self._ctx),
                                            name="pairload-pins", daemon=True)
            self._thread.start()
        return sched

    def wait(self, b: int) -> None:
        """Return once every piece batch b reads is registered (and the tables point at them). The thread registers
        in the schedule's order, so batches 0..b's pieces are order[:upto[b]]; those batch b reads are still
        registered (a piece goes back only after its last batch). Once they are in: two comparisons."""
        upto = int(self._sched.upto[b])
        if upto > self._front:
            self._front = upto
            if self._idle:
                with self._cond:
                    self._cond.notify_all()
        if self._done >= upto and not self._stale:
            return
        deadline = time.monotonic() + WAIT_S
        with self._cond:
            while self._done < upto:
                self._raise()
                if not self._cond.wait(timeout=min(1.0, max(0.0, deadline - time.monotonic()))) and \
                        time.monotonic() >= deadline:
                    need = self._sched.pieces(b)
                    missing = need[~self._state[need]]
                    names = ", ".join(self.ds.name(int(s)) for s in np.unique(self.grid.shard[missing])[:3])
                    raise LoaderError(f"batch {b} waited {WAIT_S:.0f} s for its shards to be read and registered "
                                      f"with {self.device} ({names}); is the disk or the network stalled?")
            stale, self._stale = self._stale, set()
        self._point(sorted(stale))

    def done(self, b: int, event) -> None:
        """Batch b is cut once `event` is done: streaming, its last pieces go back then."""
        if self.streaming:
            sched = self._sched
            need = sched.pieces(b)
            last = need[sched.last[need] == b]
            if len(last):
                self._releasing.append((event, np.unique(last)))
        self.reap()

    def reap(self, block: bool = False) -> None:
        """Unregister the pieces whose last batch is done (all of them with `block`)."""
        while self._releasing and (block or self._releasing[0][0] is None or self._releasing[0][0].query()):
            event, pieces = self._releasing.popleft()
            if event is not None:
                event.synchronize()
            self._unregister(pieces)

    def check(self, force: bool = False) -> None:
        """At most every CHECK_S seconds (`force`: now): raise if a shard file was truncated or replaced."""
        now = time.monotonic()
        if force or now - self._checked >= CHECK_S:
            self._checked = now
            self.ds.check_files()

    def _raise(self) -> None:
        if self._error is not None:
            err = self._error
            if isinstance(err, PairloadError):
                raise err
            raise LoaderError(f"registering the shards with {self.device} failed: {err}") from err

    # -- the thread (`_registrar`)
    def _next(self) -> int | None:
        """The next piece to register; _WAIT while the read-ahead is as far as it may go; None: stop. Under the
        lock."""
        while True:
            if self._stop:
                return None
            sched = self._sched
            if sched is not None and self._pos < len(sched.order):
                piece = int(sched.order[self._pos])
                if self._state[piece]:
                    self._pos += 1
                    self._done = self._pos
                    self._cond.notify_all()  # a batch may wait for exactly this entry
                    continue
                size = int(self.grid.nbytes[piece])
                needed_now = self._pos < self._front
                ahead = int(sched.bytes_to[self._pos] - sched.bytes_to[self._front]) if not needed_now else 0
                if needed_now or (ahead + size <= self.ahead and self.pinned + size <= self.budget):
                    self._pos += 1
                    self._idle = False
                    return piece
            piece = self._fill()
            if piece is not None:
                self._idle = False
                return piece
            self._idle = True
            return _WAIT

    def _fill(self) -> int | None:
        """A split that stays registered, once the run's own pieces are in: the next piece some sample reads that is
        not registered yet, within the budget (None: none). Each rank of several reads only its share of a shard in
        an epoch, so without this a shard is complete only after many epochs; filled in the background, the second
        epoch registers nothing. Under the lock."""
        if self.streaming or self.ds.remote or self._sched is None:
            return None
        g = self.grid
        while self._filled < g.count:
            piece = self._filled
            self._filled += 1
            if g.read[piece] and not self._state[piece]:
                if self.pinned + int(g.nbytes[piece]) > self.budget:
                    self._filled = g.count  # the split does not fit after all: leave the rest to the runs
                    return None
                return piece
        return None

    def _map(self, s: int) -> np.ndarray:
        mm = self._maps.get(s)
        if mm is None:
            if self.ds.remote and s not in self._tokens:
                part, first = self._first_sample(s)
                self._tokens[s] = part.acquire([first])  # fetched, verified and held in the node cache
            part, local = self._part(s)
            mm = self._maps[s] = part.shard_map(local)
        return mm

    def _part(self, s: int):
        for part in self.ds.sources:
            if s < len(part.shard_bytes):
                return part, s
            s -= len(part.shard_bytes)
        raise IndexError(s)

    def _first_sample(self, s: int):
        """(the split holding shard s, the number there of its first sample)."""
        part, local = self._part(s)
        return part, int(part.index.shard.searchsorted(local))

    def _pin(self, ptr: int, nbytes: int) -> int:
        """`register`, held by this object until `_unpin`; the driver's code."""
        code = register(ptr, nbytes)
        if code == 0:
            self._held.add(ptr)
        return code

    def _unpin(self, ptr: int) -> None:
        unregister(ptr)
        self._held.discard(ptr)

    def _register(self, piece: int) -> None:
        s = int(self.grid.shard[piece])
        mm = self._map(s)
        start, size = int(self.grid.start[piece]), int(self.grid.nbytes[piece])
        host = mm.ctypes.data
        self._read_ahead()
        code = self._pin(host + start, size)
        if code:
            part, first = self._first_sample(s)
            part.check_shards([first])  # a truncated file: its named error
            raise LoaderError(f"registering {human_bytes(size)} of {self.ds.name(s)} with {self.device} failed: "
                              f"CUDA driver error {code}; zero_copy=False uses the worker processes instead")
        base = host if self.host_pointers else Driver.device_pointer(host)
        with self._cond:
            self._ptr[piece] = host + start
            self._state[piece] = True
            if self._base[s] != base:
                self._stale.add(s)
            self._base[s] = base
            self._live[s] += 1
            self.pinned += size
            self._cond.notify_all()

    def _read_ahead(self) -> None:
        """Start the disk reads of the next READ_AHEAD pieces (each once): they are in flight while this one is
        pinned. A remote shard not fetched yet is left to its registration (fetching it would wait here)."""
        sched = self._sched
        if sched is None:
            return
        end = min(len(sched.order), self._pos + READ_AHEAD)
        for k in range(max(self._advised, self._pos), end):
            nxt = int(sched.order[k])
            t = int(self.grid.shard[nxt])
            if t not in self._maps and self.ds.remote:
                continue
            mm = self._map(t)
            Driver.willneed(mm.ctypes.data + int(self.grid.start[nxt]), int(self.grid.nbytes[nxt]))
        self._advised = max(self._advised, end)

    def _unregister(self, pieces) -> None:
        freed = []
        with self._cond:
            for piece in pieces:
                piece = int(piece)
                if not self._state[piece]:
                    continue
                s = int(self.grid.shard[piece])
                self._unpin(int(self._ptr[piece]))
                self._state[piece] = False
                self.pinned -= int(self.grid.nbytes[piece])
                self._live[s] -= 1
                if self._live[s] == 0:
                    freed.append(s)
            for s in freed:  # a shard with nothing registered: its map (and its place in the node cache) goes
                self._maps.pop(s, None)
                self._base[s] = 0
                token = self._tokens.pop(s, None)
                if token is not None:
                    part, _ = self._part(s)
                    part.release(token)
            self._cond.notify_all()
        if freed and self.ds.remote:
            self.ds.drop_evicted()

    def warm(self, samples) -> None:
        """Register these samples' pieces now, in this thread, and point the tables at them (the self-test; before
        any run begins)."""
        for piece in np.unique(np.concatenate([np.arange(self.grid.lo[i], self.grid.hi[i] + 1) for i in samples])):
            if not self._state[piece]:
                self._register(int(piece))
        with self._cond:
            stale, self._stale = self._stale, set()
        self._point(sorted(stale))

    @property
    def thread(self) -> threading.Thread | None:
        """The thread registering pieces ahead of the batches (None before the first run)."""
        return self._thread

    def reopen(self) -> "PageCache":
        """The same registration, made again after `close()` (the next run registers what it reads)."""
        return PageCache(self.ds, self.device, budget=self.budget, streaming=self.streaming, ahead=self.ahead)

    @property
    def closed(self) -> bool:
        return self._stop

    def close(self) -> None:
        """Stop the thread and unregister everything (the caller has waited for its kernels)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._releasing.clear()
        self._unregister(np.flatnonzero(self._state))
        self._finalizer()  # nothing left to release; not again at collection


_WAIT = -1  # `PageCache._next`: nothing to register now


def _registrar(ref, cond: threading.Condition, ctx: int) -> None:
    """The registering thread of a `PageCache` (`ref`: a weak reference, so that a dropped loader's pins can go; the
    thread ends then, at `close()`, or when its run is done and begins again with the next)."""
    try:
        Driver.set_context(ctx)
    except BaseException as exc:  # noqa: BLE001 - handed to the consumer
        pins = ref()
        if pins is not None:
            with cond:
                pins._error = exc
                cond.notify_all()
        return
    while True:
        pins = ref()
        if pins is None:
            return
        try:
            with cond:
                piece = pins._next()
                gen = pins._gen
            if piece is None:
                return
            if piece == _WAIT:
                del pins  # not held while waiting
                with cond:
                    cond.wait(timeout=0.5)
                continue
            pins._register(piece)
            with cond:
                if gen == pins._gen:
                    pins._done = pins._pos  # every entry before it is done: the thread goes in order
                cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            with cond:
                pins._error = exc
                cond.notify_all()
            return
        finally:
            pins = None


def _release_all(held: set[int], ctx: int, device: torch.device) -> None:
    """Unregister what a `PageCache` still holds (collected without `close()`), once the device's kernels are done."""
    if not held:
        return
    try:
        torch.cuda.synchronize(device)
        Driver.push_context(ctx)
    except Exception:  # noqa: BLE001 - interpreter shutdown: the process's registrations end with it
        return
    try:
        for ptr in list(held):
            unregister(ptr)
        held.clear()
    finally:
        Driver.pop_context()
