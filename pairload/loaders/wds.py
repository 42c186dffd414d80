"""The WebDataset loader: the `webdataset` package reads the tar shards, in worker processes, as a stream.

The path for splits that do not fit in the page cache or live on shared storage: every shard is read sequentially.
What each worker reads in an epoch is a list of pieces (a shard, or a run of samples of one) that the planner's
orders decide: for one folder, the epoch's shard permutation dealt to ranks and then to workers (`repeats` times
over); for a mix, each source's next `count` samples of its own endless chain of shard permutations, cut into one
contiguous run per rank and worker (so within a source nothing is read again before all of it was, across epochs),
and a worker's sources interleaved in proportion. Each worker streams its pieces through webdataset (tar reading,
sample grouping) and a seeded shuffle buffer per source, and cuts every sample's planned window (from its key and
the batch's crop, as every loader does) into the rows of a ring slot it is told to fill (the `ram` loader's pinned
ring), so only slot numbers and keys cross processes.

The main process plans every step of the epoch before it starts, from the samples each worker will read: step t
has the schedule's batch size and crop (or the fixed ones) and is filled by the next worker in turn, and by the
following ones when that worker's stream ends inside it, each into its own rows of the slot. So batches never
need merging, an epoch is reproducible for a given worker count, and every rank gets the same number of batches:
drop: the fewest whole batches any rank has (the samples skipped are reported as `skipped`, and change with the
epoch); pad: the most any rank has, wrapping within the rank's own first rows (repeats flagged); partial: every
sample once. The device stage copies and flips on a side stream, as for `ram`.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from ..format import schema
from ..read.assemble import _oriented, slot_bytes, slot_view, worker_start
from ..errors import ConfigError, PairloadError, ShardError
from ..plan import (check_split, epoch_order, interleave, key_hashes, sample_params, source_counts, stage_at,
                    whole_steps)
from ..read.shards import open_shards
from .base import LoaderOptions, StatefulEpochs, with_sources
from .device import DeviceStage
from .pool import WorkerPool, worker_error

def shard_assignment(n_shards: int, opts: LoaderOptions, workers: int, epoch: int) -> list[list[list[int]]]:
    """Shard numbers per rank, per worker, for `epoch`: the planner's shard order dealt to ranks, then to workers."""
    order = epoch_order(n_shards, seed=opts.plan.seed, epoch=epoch, shuffle=opts.plan.shuffle)
    per_rank = [order[r::opts.plan.world_size] for r in range(opts.plan.world_size)]
    return [[[int(i) for i in shards[w::workers]] for w in range(workers)] for shards in per_rank]


def _shared_targets(samples):
    """Give every sample that shares a target (format version 2: its .json names the sample whose `.high.npy` it
    uses) that target. A group's first sample stores it and the group is contiguous within one shard, so only the
    latest target of the current shard is kept."""
    last: tuple[str | None, str | None, bytes | None] = (None, None, None)  # url, key, target bytes
    for sample in samples:
        url, key = sample.get("__url__"), sample.get("__key__")
        if schema.HIGH in sample:
            last = (url, key, sample[schema.HIGH])
        else:
            try:
                ref = json.loads(sample[schema.META]).get(schema.HIGH_REF)
            except (KeyError, ValueError, AttributeError):
                ref = None
            if ref is not None:
                if last[:2] != (url, ref):
                    raise ShardError(f"{url}: key {key}: its target {ref}.{schema.HIGH} does not come right before it "
                                     "in the shard; the shard is corrupt: repack")
                sample[schema.HIGH] = last[2]
        yield sample


def _shard_error(exn: BaseException) -> bool:
    """webdataset handler: tar-level failures become a ShardError naming the shard."""
    if isinstance(exn, ShardError):
        raise exn
    url = next((a for a in reversed(exn.args) if isinstance(a, str) and a.endswith(".tar")), "a shard")
    raise ShardError(f"{url}: unreadable while streaming ({exn.args[0] if exn.args else type(exn).__name__}); the "
                     "shard is corrupt: run `pairload verify` and repack") from None


@dataclass(frozen=True)
class Piece:
    """Samples [start, stop) of one shard (stop None: to its end), read as draw `draw` (fresh crops for a repeat)."""

    url: str
    start: int = 0
    stop: int | None = None
    draw: int = 0


@dataclass(frozen=True)
class Source:
    """One shard folder's split as the workers read it; `name` is "" for a loader over one folder."""

    name: str
    urls: tuple[str, ...]
    shard_samples: tuple[int, ...]

    @property
    def samples(self) -> int:
        return sum(self.shard_samples)


Parts = list[tuple[list[Piece], int]]  # what one worker reads in an epoch: (pieces, samples) of each source


def _run_pieces(src: Source, index: int, lo: int, hi: int, *, seed: int, shuffle: bool, cycles: dict) -> list[Piece]:
    """Positions [lo, hi) of source `index`'s endless stream: cycle k is a permutation of its shards (`cycles`
    keeps each cycle's (order, cumulative sample counts) for the other runs of the same call)."""
    total, counts = src.samples, np.asarray(src.shard_samples, dtype=np.int64)
    pieces, p = [], lo
    while p < hi:
        cycle, off = divmod(p, total)
        if (index, cycle) not in cycles:
            order = epoch_order(len(counts), seed=seed, epoch=cycle, shuffle=shuffle, salt=(0x313, index))
            cycles[(index, cycle)] = (order, np.cumsum(counts[order]))
        order, ends = cycles[(index, cycle)]
        j = int(np.searchsorted(ends, off, side="right"))
        first = off - (int(ends[j - 1]) if j else 0)
        take = min(int(counts[order[j]]) - first, hi - p)
        pieces.append(Piece(src.urls[int(order[j])], first, first + take, cycle))
        p += take
    return pieces


def worker_parts(sources: list[Source], opts: LoaderOptions, workers: int, epoch: int) -> list[list[Parts]]:
    """[rank][worker] -> what that worker reads in `epoch` (see the module's docstring)."""
    plan, ws = opts.plan, opts.plan.world_size
    if not plan.mixed:
        src = sources[0]
        out = []
        for per_worker in shard_assignment(len(src.urls), opts, workers, epoch):
            out.append([[([Piece(src.urls[i], draw=r) for r in range(plan.repeats) for i in mine],
                          plan.repeats * sum(src.shard_samples[i] for i in mine))] for mine in per_worker])
        return out
    groups = tuple((s.name, s.samples) for s in sources)
    counts = source_counts(groups, plan.weights, plan.epoch_size or sum(n for _, n in groups)).tolist()
    out = [[[] for _ in range(workers)] for _ in range(ws)]
    cycles: dict = {}
    for index, (src, count) in enumerate(zip(sources, counts)):
        start, consumers = epoch * count, ws * workers
        for c in range(consumers):
            lo, hi = start + c * count // consumers, start + (c + 1) * count // consumers
            out[c // workers][c % workers].append(
                (_run_pieces(src, index, lo, hi, seed=plan.seed, shuffle=plan.shuffle, cycles=cycles), hi - lo))
    return out


def _piece_samples(pieces):
    """webdataset stage: the samples of each piece, tagged with its draw."""
    for piece in pieces:
        samples = _shared_targets(_tar_samples(iter([{"url": piece.url}])))
        try:
            for sample in itertools.islice(samples, piece.start, piece.stop):
                sample["__draw__"] = piece.draw
                yield sample
        finally:
            samples.close()


class _Decode:
    """Read one sample's .npy members as arrays over its bytes (runs in workers): (key, low, high, draw).

    The sample's `.json` gives its size, so each .npy header is checked by comparing it with the header that
    size must have (`schema.npy_header`) and the pixels are viewed in place: no header parsing, no copy. In a mix
    the key is prefixed with the source's name."""

    def __init__(self, prefix: str = ""):
        self.prefix = prefix

    @staticmethod
    def _image(sample: dict, member: str, key: str, url: str, h: int, w: int) -> np.ndarray:
        data = sample.get(member)
        if data is None:
            raise ShardError(f"{url}: key {key}: member {key}.{member} is missing; the shard is corrupt: repack")
        header = schema.npy_header(h, w)
        if data[:len(header)] != header or len(data) != len(header) + h * w * schema.CHANNELS:
            raise ShardError(f"{url}: key {key}: {key}.{member} is not the uint8 {h}x{w}x3 .npy its .json describes "
                             "(damaged header or size); the shard is corrupt: run `pairload verify` and repack")
        return np.frombuffer(data, dtype=np.uint8, offset=len(header)).reshape(h, w, schema.CHANNELS)

    def __call__(self, sample: dict):
        key, url = sample.get("__key__"), sample.get("__url__")
        try:
            h, w = (int(v) for v in json.loads(sample[schema.META])["size"])
        except (KeyError, ValueError, TypeError):
            raise ShardError(f"{url}: key {key}: {key}.{schema.META} is missing or has no size; repack") from None
        low = self._image(sample, schema.LOW, key, url, h, w)
        high = self._image(sample, schema.HIGH, key, url, h, w)
        return self.prefix + key, low, high, sample.get("__draw__", 0)


def worker_stream(wds, sources: list[Source], parts: Parts, opts: LoaderOptions, worker: int, epoch: int,
                  shuffle_buffer: int):
    """One worker's samples for `epoch`, (key, low, high, draw), through the webdataset package: each source's
    pieces through its own seeded shuffle buffer, the sources interleaved in proportion to their counts."""
    shuffle = opts.plan.shuffle and shuffle_buffer > 1
    streams = []
    for s, (src, (pieces, _)) in enumerate(zip(sources, parts)):
        seed = ((((opts.plan.seed * 1_000_003 + epoch) * 1_009 + opts.plan.rank) * 131 + worker) * 17 + s)
        streams.append(iter(wds.DataPipeline(
            lambda pieces=pieces: iter(pieces),  # (a list given here would be read as a list of stages)
            _piece_samples,
            # a small initial fill, so that the first batch of an epoch does not wait for full buffers
            wds.shuffle(shuffle_buffer, initial=min(shuffle_buffer, 32), seed=seed) if shuffle else None,
            wds.map(_Decode(f"{src.name}/" if src.name else "")),
        )))
    if len(streams) == 1:
        return streams[0]
    return (next(streams[s]) for s in interleave(np.array([n for _, n in parts]), 1).tolist())


def _fill(stream, ring_slot: np.ndarray, offset: int, rows: int, total: int, crop: int | None, plan, epoch: int,
          apply_codes: bool):
    """Cut the next `rows` samples of `stream` into rows [offset, offset + rows) of a slot holding a (2, total, h, w,
    3) batch, each at its planned window for `crop`; returns (n, keys, codes, (h, w)). n < rows: the stream ended."""
    n, keys, codes, hw, dst = 0, [], [], None, None
    if rows <= 0:
        return n, keys, codes, hw
    for key, low, high, draw in stream:
        h, w = low.shape[:2]
        y, x, code = sample_params(key_hashes([key]), np.array([[h, w]]), seed=plan.seed, epoch=epoch, crop=crop,
                                   augment=plan.augment, draw=np.array([draw]) if draw else None)
        ch, cw = (crop, crop) if crop is not None else (h, w)
        if hw is None:
            hw, dst = (ch, cw), slot_view(ring_slot, total, ch, cw)
        elif (ch, cw) != hw:
            raise ShardError(f"whole images of different sizes ({hw[1]}x{hw[0]} and {cw}x{ch}, key {key}) in one "
                             "batch; use a crop or batch_size=1")
        y, x, c = int(y[0]), int(x[0]), int(code[0])
        lo, hi = low[y:y + ch, x:x + cw], high[y:y + ch, x:x + cw]
        dst[0, offset + n] = _oriented(lo, c) if apply_codes else lo
        dst[1, offset + n] = _oriented(hi, c) if apply_codes else hi
        keys.append(key)
        codes.append(c)
        n += 1
        if n == rows:
            break
    return n, keys, codes, hw


READ_BUFFER = 16 << 20  # tarfile reads a stream in 10 KB pieces: serve them from one big buffer, not one syscall each


def _tar_samples(src):
    """webdataset's own shard opening, tar reading and grouping (its `tarfile_to_samples`), with a large read
    buffer: on a warm page cache the many small reads, not the bytes, were the cost, and they scaled badly."""
    from webdataset.tariterators import group_by_keys, tar_file_expander, url_opener

    def opened(src):
        for shard in src:
            url = shard["url"]
            if os.path.isfile(url):  # a local shard (webdataset's own opener ignores the buffer size for files)
                yield {**shard, "stream": open(url, "rb", buffering=READ_BUFFER)}
            else:
                yield from url_opener([shard], handler=_shard_error, bufsize=READ_BUFFER)

    return group_by_keys(tar_file_expander(opened(src), handler=_shard_error), handler=_shard_error)


def _keep_large_buffers() -> None:
    """glibc returns every freed buffer over 128 KB to the kernel and faults fresh zeroed pages in for the next one;
    a worker allocates two image-sized buffers per sample, so keep them in the heap instead (this process only)."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 256 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 512 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


def stream_worker(sources: list[Source], opts: LoaderOptions, workers: int, shuffle_buffer: int, apply_codes: bool,
                  worker: int, shm_name: str, depth: int, slot_bytes: int, tasks, results, parent: int) -> None:
    """A wds worker: fills the rows of the ring slots it is given with the next samples of its stream."""
    _keep_large_buffers()
    started = worker_start(parent, shm_name, depth, slot_bytes, results, lambda: __import__("webdataset"))
    if started is None:
        return
    shm, ring, wds = started
    token, stream = None, None
    while True:
        msg = tasks.get()
        if msg is None:
            break
        slot, tok, epoch, offset, rows, total, crop = msg
        try:
            if tok != token:
                parts = worker_parts(sources, opts, workers, epoch)[opts.plan.rank][worker]
                token, stream = tok, worker_stream(wds, sources, parts, opts, worker, epoch, shuffle_buffer)
            got = _fill(stream, ring[slot], offset, rows, total, crop, opts.plan, epoch, apply_codes)
            results.put((slot, tok, offset, *got))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
            token = stream = None
            kind = type(exc).__name__ if isinstance(exc, PairloadError) else "RuntimeError"
            results.put((slot, tok, offset, -1, (kind, f"wds worker {worker}: {exc}"), None, None))
    del ring
    shm.close()


def task_table(rows_per_worker: list[int], steps: list[tuple[int, int, int | None]]) -> list[list[tuple[int, int, int]]]:
    """(worker, offset, rows) parts of each step: the next worker in turn fills the step, the following ones the
    rows it lacks when its stream ends inside the step. `steps`: (rows from the streams, batch rows, crop)."""
    left, table, turn = list(rows_per_worker), [], 0
    nw = len(left)
    for rows, _, _ in steps:
        parts, off, k = [], 0, turn
        while off < rows and any(left):
            w, k = k % nw, k + 1
            take = min(rows - off, left[w])
            if take:
                parts.append((w, off, take))
                left[w] -= take
                off += take
        turn += 1
        table.append(parts)
    return table


SHUFFLE_BYTES = 2**30  # by default, what one rank's workers hold in their shuffle buffers together
SHUFFLE_MOST = 256  # samples per worker's buffer at most


def auto_shuffle_buffer(pair_bytes: int, workers: int) -> int:
    """Samples per worker's shuffle buffer when none is given: up to SHUFFLE_MOST, as many as fit in SHUFFLE_BYTES
    over all of a rank's workers (each buffer holds whole decoded pairs: 4 ranks x 15 workers x 256 pairs of
    600x400 were 25 GB on the 4-GPU host), at least 2."""
    return max(2, min(SHUFFLE_MOST, SHUFFLE_BYTES // max(1, workers * pair_bytes)))


class WdsLoader(StatefulEpochs):
    """The webdataset package over the shards, streamed by worker processes (see the module's docstring).
    Resuming mid-epoch re-reads the epoch's stream from its start and skips the batches already delivered (the
    same world size and workers only)."""

    DEAL = "by shard"

    def __init__(self, source, opts: LoaderOptions, *, shuffle_buffer: int | None = None, prefetch: int = 4):
        ds = open_shards(source, opts.split)  # checks each manifest and that every shard is present
        if prefetch < 1 or (shuffle_buffer is not None and shuffle_buffer < 0):
            raise ConfigError(f"prefetch={prefetch}, shuffle_buffer={shuffle_buffer}: expected at least 1 and 0 or more")
        self.opts, self.groups = with_sources(opts, ds.groups, len(ds), ds.split)
        self.cfg = self.opts.plan
        parts = ds.parts if self.groups else {"": ds}
        if self.cfg.schedule and self.cfg.last_batch != "drop":
            raise ConfigError(f"a crop/batch schedule with last_batch={self.cfg.last_batch!r}: wds plans scheduled "
                              "epochs with 'drop' only (every rank the same shapes at every step); use the ram or "
                              "dali-external loader for the others")
        check_split(self.cfg, ds.keys, ds.sizes, ds.split)
        self.samples = len(ds)
        self._init_state()
        self.ds = ds
        self.sources = [Source(name, tuple(str(p) for p in part.files), tuple(int(c) for c in part.index.shard_samples))
                        for name, part in parts.items()]
        self.device = opts.torch_device
        self.prefetch = prefetch
        self.workers = max(1, opts.num_workers)
        pair_bytes = int((ds.sizes[:, 0] * ds.sizes[:, 1]).max()) * 6
        self.shuffle_buffer = shuffle_buffer if shuffle_buffer is not None else auto_shuffle_buffer(
            pair_bytes, self.workers * len(self.sources))
        if not self.cfg.mixed and len(self.sources[0].urls) < self.cfg.world_size:
            raise ConfigError(
                f"split {opts.split!r} has {len(self.sources[0].urls)} shards but there are {self.cfg.world_size} ranks: "
                f"each rank needs at least one shard; repack with a smaller --shard-size (e.g. "
                f"{max(1, ds.nbytes // self.cfg.world_size // 2**20)}MB) or use the ram loader")
        self._stage = DeviceStage(self.device)
        self._pool: WorkerPool | None = None
        self._free: deque = deque()
        self._token = 0
        self._starts: dict[int, int] = {0: 0}  # epoch -> its first global step (schedules)
        self._rows: dict[int, list[list[int]]] = {}
        if len(self) == 0:
            raise ConfigError(f"split {opts.split!r}: with {len(self.sources[0].urls)} shards over {self.cfg.world_size} "
                              f"ranks no rank fills one batch of {self.cfg.batch_size}; lower batch_size, or repack "
                              "with a smaller --shard-size")

    def _deal_name(self) -> str:
        return f"by shard, {self.workers} workers, shuffle buffer {self.shuffle_buffer}"

    def load_state_dict(self, state: dict) -> None:
        if isinstance(state, dict) and state.get("world_size") not in (None, self.cfg.world_size):
            raise ConfigError(f"loader state: saved with world_size {state.get('world_size')}, this wds loader has "
                              f"{self.cfg.world_size}; wds deals whole shards to ranks, so it resumes only with the "
                              "same world size (the ram and DALI loaders re-deal the rest of an epoch)")
        super().load_state_dict(state)
        if any(ws != self.cfg.world_size for ws, _ in self._resume.get(self.epoch, ())):
            raise ConfigError("loader state: part of the epoch ran with another world size; wds cannot resume it")

    # ------------------------------------------------------------------ the epoch's steps

    def _worker_rows(self, epoch: int) -> list[list[int]]:
        """[rank][worker] -> samples that worker reads in `epoch` (the last few epochs' are kept)."""
        if epoch not in self._rows:
            if len(self._rows) >= 4:
                self._rows.pop(next(iter(self._rows)))
            self._rows[epoch] = [[sum(n for _, n in parts) for parts in per_worker]
                                 for per_worker in worker_parts(self.sources, self.opts, self.workers, epoch)]
        return self._rows[epoch]

    def _start_step(self, epoch: int) -> int:
        """The global step `epoch` starts at: the batches of every earlier epoch (a schedule's stages follow it)."""
        if not self.cfg.schedule:
            return 0
        e = max(k for k in self._starts if k <= epoch)
        while e < epoch:
            self._starts[e + 1] = self._starts[e] + len(self._steps(e))
            e += 1
        return self._starts[epoch]

    def _steps(self, epoch: int) -> list[tuple[int, int, int | None]]:
        """This rank's steps in `epoch`: (rows read from the streams, batch rows, crop). Every rank has as many."""
        plan, rank_rows = self.cfg, [sum(r) for r in self._worker_rows(epoch)]
        mine = rank_rows[plan.rank]
        if plan.schedule:
            start = self._start_step(epoch)  # a rank's own whole batches: its stream alone, world size 1 (drop)
            count = min(whole_steps(plan, n, start, world_size=1) for n in rank_rows)
            return [(st.batch_size, st.batch_size, st.crop) for st in (stage_at(plan, start + j) for j in range(count))]
        bs, crop = plan.batch_size, plan.crop
        if plan.last_batch == "drop":
            return [(bs, bs, crop)] * min(n // bs for n in rank_rows)
        steps = [(bs, bs, crop)] * (mine // bs) + ([(mine % bs, bs if plan.last_batch == "pad" else mine % bs, crop)]
                                                  if mine % bs else [])
        if plan.last_batch == "pad":
            steps += [(0, bs, crop)] * (max(-(-n // bs) for n in rank_rows) - len(steps))
        return steps

    def _target(self, epoch: int) -> int:
        return len(self._steps(epoch))

    @property
    def skipped(self) -> int:
        """Samples of this rank's streams that the current epoch skips (drop: to give every rank one batch count)."""
        return sum(self._worker_rows(self.epoch)[self.cfg.rank]) - sum(r for r, _, _ in self._steps(self.epoch))

    def __len__(self) -> int:
        return max(0, self._target(self.epoch) - sum(k for _, k in self._consumed(self.epoch)))

    def start_workers(self) -> None:
        """Start the worker processes now and wait until they are ready (no shard is read), so that the first
        batch does not also pay for process start-up. Iterating starts them anyway."""
        if self.opts.num_workers:
            self._ensure_pool().wait_ready()

    def close(self) -> None:
        """Stop the worker processes and free the ring (also done when the loader is garbage collected)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # ------------------------------------------------------------------ reading

    def _ensure_pool(self) -> WorkerPool:
        if self._pool is None:
            depth = self.workers * 2 + self.prefetch
            self._pool = WorkerPool(stream_worker, (self.sources, self.opts, self.workers, self.shuffle_buffer,
                                                    not self._stage.cuda),
                                    num_workers=self.workers, depth=depth, slot_bytes=slot_bytes(self.cfg, self.ds.sizes),
                                    pin=self._stage.cuda, name="pairload-wds", shared_tasks=False)
            self._free = deque(range(depth))
            self._stage.clear()
        return self._pool

    def _worker_batches(self, epoch: int, steps, table):
        """(host (2, total, h, w, 3) with the step's stream rows filled, codes, keys, release) of every step."""
        pool = self._ensure_pool()
        self._token += 1
        tok = self._token
        pending: deque = deque()  # (step, slot)
        done: dict[tuple[int, int], tuple] = {}
        nxt = 0

        def submit() -> None:
            nonlocal nxt
            self._stage.reclaim()
            while self._free and nxt < len(steps):
                slot = self._free.popleft()
                _, total, crop = steps[nxt]
                for w, off, rows in table[nxt]:
                    pool.tasks[w].put((slot, tok, epoch, off, rows, total, crop))
                pending.append((nxt, slot))
                nxt += 1

        def wait(slot: int, off: int) -> tuple:
            while (slot, off) not in done:
                msg = pool.get()
                if msg[1] == tok:
                    done[(msg[0], msg[2])] = msg
                elif msg[2] == 0:  # an abandoned epoch's result arriving late (its slot's first part frees it)
                    self._free.append(msg[0])
            return done.pop((slot, off))

        submit()
        try:
            while pending:
                step, slot = pending.popleft()
                keys, codes, hw = [], [], None
                for w, off, rows in table[step]:
                    _, _, _, n, k, c, got_hw = wait(slot, off)
                    if n < 0:
                        raise worker_error(k)
                    if n < rows:
                        raise ShardError(f"wds worker {w}: its stream of epoch {epoch} ended {rows - n} samples early; "
                                         "a shard holds fewer samples than its manifest says: run `pairload verify`")
                    keys += k
                    codes += c
                    hw = hw or got_hw
                total = steps[step][1]
                if hw is None:
                    self._free.append(slot)
                    yield None, [], [], None
                else:
                    host = torch.from_numpy(slot_view(pool.ring[slot], total, *hw))
                    yield host, codes, keys, lambda slot=slot: self._free.append(slot)
                submit()
        finally:
            for step, slot in pending:  # left early: let the workers finish writing before the slots are reused
                for _, off, _ in table[step]:
                    try:
                        wait(slot, off)
                    except Exception:  # noqa: BLE001 - the data is discarded anyway
                        pass
                self._free.append(slot)

    def _inline_batches(self, epoch: int, steps, table):
        import webdataset as wds

        parts = worker_parts(self.sources, self.opts, 1, epoch)[self.cfg.rank][0]
        stream = worker_stream(wds, self.sources, parts, self.opts, 0, epoch, self.shuffle_buffer)
        buf = np.empty(slot_bytes(self.cfg, self.ds.sizes), dtype=np.uint8)
        for (rows, total, crop), parts_of_step in zip(steps, table):
            n, keys, codes, hw = _fill(stream, buf, 0, rows, total, crop, self.cfg, epoch, not self._stage.cuda)
            if n < rows:
                raise ShardError(f"the stream of epoch {epoch} ended {rows - n} samples early; a shard holds fewer "
                                 "samples than its manifest says: run `pairload verify`")
            yield (torch.from_numpy(slot_view(buf, total, *hw).copy()) if hw else None), codes, keys, None

    def _batches(self, epoch: int):
        """(host, codes, keys, padded, release) of every step; pad steps wrap the rank's own first rows."""
        steps = self._steps(epoch)
        rows_per_worker = self._worker_rows(epoch)[self.cfg.rank]
        if not self.opts.num_workers:
            rows_per_worker = [sum(rows_per_worker)]
        table = task_table(rows_per_worker, steps)
        source = (self._worker_batches if self.opts.num_workers else self._inline_batches)(epoch, steps, table)
        first: tuple | None = None  # the epoch's first rows, the ones 'pad' repeats
        for (rows, total, _), (host, codes, keys, release) in zip(steps, source):
            if rows == total:
                if first is None and self.cfg.last_batch == "pad":
                    first = (host.clone(), list(codes), list(keys))
                yield host, codes, keys, torch.zeros(total, dtype=torch.bool), release
                continue
            have = (host[:, :rows].clone(), list(codes), list(keys)) if rows else None
            if release is not None:
                release()
            if self.cfg.last_batch != "pad":  # partial: the short last batch as it is
                yield have[0], have[1], have[2], torch.zeros(rows, dtype=torch.bool), None
                continue
            first = first or have
            reps = first
            while len(reps[2]) < total - rows:
                reps = _cat([reps, first])
            need = total - rows
            out = _cat(([have] if have else []) + [(reps[0][:, :need], reps[1][:need], reps[2][:need])])
            yield out[0].contiguous(), out[1], out[2], torch.arange(total) >= rows, None

    def __iter__(self):
        epoch = self.epoch
        skip = sum(k for _, k in self._begin(epoch))
        code_of = (lambda codes: torch.tensor(codes, dtype=torch.int64)) if self.cfg.augment else (lambda codes: None)
        source_of = (lambda keys: [k.split("/", 1)[0] for k in keys]) if self.groups else (lambda keys: None)

        def produced():
            for b, (host, codes, keys, padded, release) in enumerate(self._batches(epoch)):
                if b < skip:  # a resumed epoch: its stream is read again from the start
                    if release is not None:
                        release()
                    continue
                yield self._stage.put(host, code_of(codes), keys, padded, release, source_of(keys))

        try:
            for batch in self._stage.one_ahead(produced()):
                self._delivered += 1
                yield batch
        except PairloadError:
            self.close()
            raise


def _cat(parts: list[tuple[torch.Tensor, list[int], list[str]]]) -> tuple[torch.Tensor, list[int], list[str]]:
    return (torch.cat([p[0] for p in parts], dim=1), [c for p in parts for c in p[1]], [k for p in parts for k in p[2]])
