"""The WebDataset loader: the `webdataset` package reads the tar shards, in worker processes, as a stream.

The path for splits that do not fit in the page cache or live on shared storage: every shard is read once,
sequentially. Per epoch the planner's shard permutation is dealt to ranks and then to workers; each worker streams
its shards through webdataset (tar reading, sample grouping), a seeded shuffle buffer, cuts every sample's planned
window (from its key, as every loader does) and writes whole batches into slots of one shared, page-locked ring
(the `ram` loader's worker pool), so only slot numbers and keys cross processes. The main process hands slots to
the workers in a fixed round-robin order (so an epoch is reproducible), merges the short batch each worker ends
its stream with (no sample is lost to a worker's remainder), and gives every rank the same number of batches:
drop: the fewest whole batches any rank has (the samples skipped are reported as `skipped`, and change with the
epoch); pad: the most any rank has, wrapping within the rank's own stream (repeats flagged); partial: every
sample once. The device stage copies and flips on a side stream, as for `ram`.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import deque

import numpy as np
import torch

from ..format import schema
from ..read.assemble import _oriented, slot_bytes, slot_view, worker_start
from ..errors import ConfigError, PairloadError, ShardError
from ..plan import check_split, epoch_order, key_hashes, sample_params
from ..read.shards import ShardDataset
from .base import LoaderOptions, StatefulEpochs
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


class _Crop:
    """Read one sample's .npy members and cut the planned window from both images (runs in workers).

    The sample's `.json` gives its size, so each .npy header is checked by comparing it with the header that
    size must have (`schema.npy_header`) and the pixels are viewed in place: no header parsing, no copy."""

    def __init__(self, seed: int, epoch: int, crop: int | None, augment: bool, draw: int = 0):
        self.seed, self.epoch, self.crop, self.augment, self.draw = seed, epoch, crop, augment, draw

    def _image(self, sample: dict, member: str, key: str, url: str, h: int, w: int) -> np.ndarray:
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
        y, x, code = sample_params(key_hashes([key]), np.array([[h, w]]), seed=self.seed, epoch=self.epoch,
                                   crop=self.crop, augment=self.augment, draw=np.array([self.draw]) if self.draw else None)
        ch, cw = (self.crop, self.crop) if self.crop is not None else (h, w)
        y, x = int(y[0]), int(x[0])
        return key, low[y:y + ch, x:x + cw], high[y:y + ch, x:x + cw], int(code[0])


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


def _samples(wds, urls: list[str], opts: LoaderOptions, workers: int, worker: int, epoch: int, shuffle_buffer: int):
    """One worker's stream for `epoch`: (key, low window, high window, code), through the webdataset package; with
    `repeats` its shards are streamed that many times, each pass with its own shuffle and fresh crops (draw r)."""
    mine = shard_assignment(len(urls), opts, workers, epoch)[opts.plan.rank][worker]
    shards = [{"url": urls[i]} for i in mine]
    shuffle = opts.plan.shuffle and shuffle_buffer > 1

    def one_pass(r: int):
        seed = (((opts.plan.seed * 1_000_003 + epoch) * 1_009 + opts.plan.rank) * 131 + worker) * 17 + r
        return wds.DataPipeline(
            lambda: iter(shards),  # (a list given here would be read as a list of stages)
            _tar_samples,
            _shared_targets,
            # a small initial fill, so that the first batch of an epoch does not wait for full buffers
            wds.shuffle(shuffle_buffer, initial=min(shuffle_buffer, 32), seed=seed) if shuffle else None,
            wds.map(_Crop(opts.plan.seed, epoch, opts.plan.crop, opts.plan.augment, draw=r)),
        )

    return itertools.chain.from_iterable(one_pass(r) for r in range(opts.plan.repeats))


def _fill(stream, ring_slot: np.ndarray, batch_size: int, apply_codes: bool):
    """Write up to batch_size samples of `stream` into a slot as a (2, batch_size, h, w, 3) array; returns (n,
    keys, codes, (h, w)). n < batch_size: the stream has ended."""
    n, keys, codes, hw, dst = 0, [], [], None, None
    for key, low, high, code in stream:
        if hw is None:
            hw = low.shape[:2]  # a transpose is only ever planned for square windows
            dst = slot_view(ring_slot, batch_size, *hw)
        out_low, out_high = (_oriented(low, code), _oriented(high, code)) if apply_codes else (low, high)
        if out_low.shape[:2] != hw:
            raise ShardError(f"whole images of different sizes ({hw[1]}x{hw[0]} and {out_low.shape[1]}x"
                             f"{out_low.shape[0]}, key {key}) in one batch; use a crop or batch_size=1")
        dst[0, n] = out_low
        dst[1, n] = out_high
        keys.append(key)
        codes.append(code)
        n += 1
        if n == batch_size:
            break
    return n, keys, codes, hw


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


def stream_worker(urls: list[str], opts: LoaderOptions, workers: int, shuffle_buffer: int, apply_codes: bool,
                  worker: int, shm_name: str, depth: int, slot_bytes: int, tasks, results, parent: int) -> None:
    """A wds worker: fills the ring slots it is given with the next batch of its stream for the epoch asked."""
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
        slot, tok, epoch = msg
        try:
            if tok != token:
                token, stream = tok, _samples(wds, urls, opts, workers, worker, epoch, shuffle_buffer)
            n, keys, codes, hw = _fill(stream, ring[slot], opts.plan.batch_size, apply_codes) if stream else (0, [], [], None)
            if n < opts.plan.batch_size:
                stream = None
            results.put((slot, tok, n, keys, codes, hw))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
            stream = None
            kind = type(exc).__name__ if isinstance(exc, PairloadError) else "RuntimeError"
            results.put((slot, tok, -1, (kind, f"wds worker {worker}: {exc}"), None, None))
    del ring
    shm.close()


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

    def __init__(self, source: str | os.PathLike, opts: LoaderOptions, *, shuffle_buffer: int | None = None,
                 prefetch: int = 4):
        if isinstance(source, dict) or opts.plan.mixed or opts.plan.schedule:
            raise ConfigError("wds streams each rank's shards in order through a shuffle buffer, so it cannot draw a "
                              "mixed epoch (several sources, weights, epoch_size) or cut a crop/batch schedule; use "
                              "the ram or dali-external loader for those (repeats work with wds)")
        ds = ShardDataset(source, opts.split)  # checks the manifest and that every shard is present
        self.opts = opts
        self.cfg = opts.plan
        check_split(self.cfg, ds.keys, ds.sizes, ds.split)
        if prefetch < 1 or (shuffle_buffer is not None and shuffle_buffer < 0):
            raise ConfigError(f"prefetch={prefetch}, shuffle_buffer={shuffle_buffer}: expected at least 1 and 0 or more")
        self.samples = len(ds)
        self._init_state()
        self.ds = ds
        self.urls = [str(p) for p in ds.files]
        self.shard_samples = ds.index.shard_samples
        self.device = opts.torch_device
        self.prefetch = prefetch
        self.workers = max(1, opts.num_workers)
        pair_bytes = int((ds.sizes[:, 0] * ds.sizes[:, 1]).max()) * 6
        self.shuffle_buffer = shuffle_buffer if shuffle_buffer is not None else auto_shuffle_buffer(pair_bytes,
                                                                                                   self.workers)
        if len(self.urls) < opts.plan.world_size:
            raise ConfigError(
                f"split {opts.split!r} has {len(self.urls)} shards but there are {opts.plan.world_size} ranks: each rank needs "
                f"at least one shard; repack with a smaller --shard-size (e.g. {max(1, ds.nbytes // opts.plan.world_size // 2**20)}MB"
                ") or use the ram loader"
            )
        self._stage = DeviceStage(self.device)
        self._pool: WorkerPool | None = None
        self._free: deque = deque()
        self._token = 0
        if len(self) == 0:
            raise ConfigError(f"split {opts.split!r}: with {len(self.urls)} shards over {opts.plan.world_size} ranks no rank "
                              f"fills one batch of {opts.plan.batch_size}; lower batch_size, or repack with a smaller "
                              "--shard-size")

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

    # ------------------------------------------------------------------ counts

    def _rank_samples(self, epoch: int) -> list[int]:
        return [self.cfg.repeats * int(sum(int(self.shard_samples[i]) for w in workers for i in w))
                for workers in shard_assignment(len(self.urls), self.opts, self.workers, epoch)]

    def _target(self, epoch: int) -> int:
        """Batches every rank delivers in `epoch` (this rank's own count for 'partial')."""
        bs, per_rank = self.opts.plan.batch_size, self._rank_samples(epoch)
        if self.opts.plan.last_batch == "drop":
            return min(n // bs for n in per_rank)
        if self.opts.plan.last_batch == "pad":
            return max(-(-n // bs) for n in per_rank)
        return -(-per_rank[self.opts.plan.rank] // bs)

    @property
    def skipped(self) -> int:
        """Samples of this rank's shards that the current epoch skips (drop: to give every rank one batch count)."""
        if self.opts.plan.last_batch != "drop":
            return 0
        return self._rank_samples(self.epoch)[self.opts.plan.rank] - self._target(self.epoch) * self.opts.plan.batch_size

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
            self._pool = WorkerPool(stream_worker, (self.urls, self.opts, self.workers, self.shuffle_buffer,
                                                    not self._stage.cuda),
                                    num_workers=self.workers, depth=depth, slot_bytes=slot_bytes(self.cfg, self.ds.sizes),
                                    pin=self._stage.cuda, name="pairload-wds", shared_tasks=False)
            self._free = deque(range(depth))
            self._stage.clear()
        return self._pool

    def _worker_batches(self, epoch: int):
        """(host (2, n, h, w, 3), codes, keys, release) of every worker's batches, in a fixed round-robin order."""
        pool = self._ensure_pool()
        self._token += 1
        tok, bs, nw = self._token, self.opts.plan.batch_size, self.workers
        pending: deque = deque()
        ended: set[int] = set()
        done: dict[int, tuple] = {}
        turn = 0

        def submit() -> None:
            nonlocal turn
            self._stage.reclaim()
            while self._free and len(ended) < nw:
                w, turn = turn % nw, turn + 1
                slot = self._free.popleft()
                pool.tasks[w].put((slot, tok, epoch))
                pending.append((w, slot))

        def wait(slot: int) -> tuple:
            while slot not in done:
                msg = pool.get()
                if msg[1] == tok:
                    done[msg[0]] = msg
                else:  # an abandoned epoch's result arriving late
                    self._free.append(msg[0])
            return done.pop(slot)

        submit()
        try:
            while pending:
                w, slot = pending.popleft()
                _, _, n, keys, codes, hw = wait(slot)
                if n < 0:
                    raise worker_error(keys)
                if n < bs:
                    ended.add(w)
                if n:
                    host = torch.from_numpy(slot_view(pool.ring[slot], bs, *hw))[:, :n]
                    yield host, codes, keys, lambda slot=slot: self._free.append(slot)
                else:
                    self._free.append(slot)
                submit()
        finally:
            for _, slot in pending:  # left early (every rank's batch count reached): let the workers finish writing
                try:
                    wait(slot)
                except Exception:  # noqa: BLE001 - the data is discarded anyway
                    pass
                self._free.append(slot)

    def _inline_batches(self, epoch: int):
        import webdataset as wds

        stream = _samples(wds, self.urls, self.opts, 1, 0, epoch, self.shuffle_buffer)
        bs = self.opts.plan.batch_size
        buf = np.empty(slot_bytes(self.cfg, self.ds.sizes), dtype=np.uint8)
        while True:
            n, keys, codes, hw = _fill(stream, buf, bs, not self._stage.cuda)
            if n:
                yield torch.from_numpy(slot_view(buf, bs, *hw)[:, :n].copy()), codes, keys, None
            if n < bs:
                return

    def _rebatched(self, epoch: int):
        """Whole batches out of the workers' batches: full ones pass through, the short ones that end each worker's
        stream are merged; at the end of the stream 'partial' gives the rest, 'pad' wraps, 'drop' keeps it back."""
        bs, mode = self.opts.plan.batch_size, self.opts.plan.last_batch
        source = self._worker_batches(epoch) if self.opts.num_workers else self._inline_batches(epoch)
        carry: list[tuple[torch.Tensor, list[int], list[str]]] = []
        first: tuple | None = None  # the epoch's first rows, the ones 'pad' repeats
        for host, codes, keys, release in source:
            if first is None and mode == "pad":
                first = (host.clone(), list(codes), list(keys))
            if len(keys) == bs and not carry:
                yield host, codes, keys, torch.zeros(bs, dtype=torch.bool), release
                continue
            carry.append((host.clone(), list(codes), list(keys)))
            if release is not None:
                release()
            while sum(len(c[2]) for c in carry) >= bs:
                merged = _cat(carry)
                carry = [(merged[0][:, bs:], merged[1][bs:], merged[2][bs:])]
                yield merged[0][:, :bs].contiguous(), merged[1][:bs], merged[2][:bs], torch.zeros(bs, dtype=torch.bool), None
        rest = _cat(carry) if carry else None
        if rest is not None and len(rest[2]) and mode == "partial":
            yield rest[0], rest[1], rest[2], torch.zeros(len(rest[2]), dtype=torch.bool), None
        if mode == "pad" and first is not None:
            have = 0 if rest is None else len(rest[2])
            while True:  # the rest, then whole batches of repeats until every rank has the same count
                need = bs - have
                reps = first
                while len(reps[2]) < need:
                    reps = _cat([reps, first])
                parts = ([rest] if have else []) + [(reps[0][:, :need], reps[1][:need], reps[2][:need])]
                out = _cat(parts)
                padded = torch.arange(bs) >= have
                yield out[0].contiguous(), out[1], out[2], padded, None
                have, rest = 0, None

    def __iter__(self):
        epoch = self.epoch
        skip = sum(k for _, k in self._begin(epoch))
        target = self._target(epoch)
        code_of = (lambda codes: torch.tensor(codes, dtype=torch.int64)) if self.cfg.augment else (lambda codes: None)

        def produced():
            b = 0
            for host, codes, keys, padded, release in self._rebatched(epoch):
                if b >= target:
                    if release is not None:
                        release()
                    return
                b += 1
                if b <= skip:  # a resumed epoch: its stream is read again from the start
                    if release is not None:
                        release()
                    continue
                yield self._stage.put(host, code_of(codes), keys, padded, release)

        try:
            for batch in self._stage.one_ahead(produced()):
                self._delivered += 1
                yield batch
        except PairloadError:
            self.close()
            raise


def _cat(parts: list[tuple[torch.Tensor, list[int], list[str]]]) -> tuple[torch.Tensor, list[int], list[str]]:
    return (torch.cat([p[0] for p in parts], dim=1), [c for p in parts for c in p[1]], [k for p in parts for k in p[2]])
