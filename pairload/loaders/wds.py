"""The WebDataset loader: the `webdataset` package streaming the same tar shards through a torch DataLoader.

Per epoch the planner's shard permutation is dealt to ranks (node split) and then to DataLoader workers
(worker split); the workers persist across epochs and read the current epoch from a shared value; each worker streams its shards through a sample shuffle buffer, decodes the .npy members,
crops with the planner's per-key windows and collates uint8 batches; the DataLoader pins them; the device
does the flips and rotations. Every rank stops after the same number of batches (the smallest rank's count,
known in advance from the manifest), so DDP never waits on a rank that ran dry.
"""

from __future__ import annotations

import json
import os
from multiprocessing import get_context

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .. import schema
from ..batch import make_batch
from ..errors import ConfigError, ShardError
from ..plan import check_split, epoch_order, key_hashes, sample_params
from ..shards import ShardDataset
from .base import LoaderOptions, StatefulEpochs


def shard_assignment(n_shards: int, opts: LoaderOptions, workers: int, epoch: int) -> list[list[list[int]]]:
    """Shard numbers per rank, per worker, for `epoch`: the planner's shard order dealt to ranks, then to workers."""
    order = epoch_order(n_shards, seed=opts.seed, epoch=epoch, shuffle=opts.shuffle)
    per_rank = [order[r::opts.world_size] for r in range(opts.world_size)]
    return [[[int(i) for i in shards[w::workers]] for w in range(workers)] for shards in per_rank]


class _EpochStream(IterableDataset):
    """Runs in each DataLoader worker: builds the webdataset pipeline for the current epoch, which it reads from
    a shared value, so the workers can persist across epochs (a restart forks every worker again)."""

    def __init__(self, loader: "WdsLoader"):
        super().__init__()
        self.urls, self.opts, self.cfg = loader.urls, loader.opts, loader.cfg
        self.shuffle_buffer = loader.shuffle_buffer
        self.epoch = loader._epoch_value
        self.workers = loader.workers

    def __iter__(self):
        import webdataset as wds

        epoch = self.epoch.value
        info = get_worker_info()
        worker = info.id if info is not None else 0
        mine = shard_assignment(len(self.urls), self.opts, self.workers, epoch)[self.opts.rank][worker]
        shards = [{"url": self.urls[i]} for i in mine]
        seed = ((self.opts.seed * 1_000_003 + epoch) * 1_009 + self.opts.rank) * 131 + worker
        shuffle = self.opts.shuffle and self.shuffle_buffer > 1
        pipeline = wds.DataPipeline(
            lambda: iter(shards),  # (a list given here would be read as a list of stages)
            wds.tarfile_to_samples(handler=_shard_error),
            _shared_targets,
            # a small initial fill, so that the first batch of an epoch does not wait for full buffers
            wds.shuffle(self.shuffle_buffer, initial=min(self.shuffle_buffer, 32), seed=seed) if shuffle else None,
            wds.map(_Crop(self.opts.seed, epoch, self.cfg.crop, self.cfg.augment)),
            wds.batched(self.opts.batch_size, collation_fn=_collate, partial=self.opts.last_batch == "partial"),
        )
        return iter(pipeline)


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

    def __init__(self, seed: int, epoch: int, crop: int | None, augment: bool):
        self.seed, self.epoch, self.crop, self.augment = seed, epoch, crop, augment

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
                                   crop=self.crop, augment=self.augment)
        ch, cw = (self.crop, self.crop) if self.crop is not None else (h, w)
        y, x = int(y[0]), int(x[0])
        return key, low[y:y + ch, x:x + cw], high[y:y + ch, x:x + cw], int(code[0])


def _collate(samples: list) -> dict:
    shapes = {s[1].shape for s in samples}
    if len(shapes) > 1:
        raise ShardError(f"whole images of different sizes {sorted(shapes)} in one batch (keys {samples[0][0]}…); "
                         "use a crop or batch_size=1")
    pixels = np.stack([np.stack([s[1] for s in samples]), np.stack([s[2] for s in samples])])
    return {"pixels": torch.from_numpy(pixels), "code": torch.tensor([s[3] for s in samples], dtype=torch.int64),
            "keys": [s[0] for s in samples]}


class WdsLoader(StatefulEpochs):
    """The webdataset package over the shards: shards dealt to ranks and workers per epoch, a shuffle buffer,
    crops in persistent DataLoader workers. Resuming mid-epoch re-reads the epoch's stream from its start and
    skips the batches already delivered (the same world size and workers only)."""

    DEAL = "by shard"

    def __init__(self, source: str | os.PathLike, opts: LoaderOptions, *, shuffle_buffer: int = 256,
                 prefetch_factor: int = 4):
        if opts.last_batch == "pad":
            raise ConfigError("last_batch='pad' is not available for the wds loader (a stream cannot wrap around); use "
                              "'drop' for training or 'partial' (one rank) for validation, or the ram loader")
        ds = ShardDataset(source, opts.split)  # checks the manifest and that every shard is present
        self.opts = opts
        self.cfg = opts.plan_config()
        check_split(self.cfg, ds.keys, ds.sizes, ds.split)
        self.samples = len(ds)
        self._init_state()
        self.urls = [str(p) for p in ds.files]
        self.shard_samples = ds.index.shard_samples
        self.device = opts.torch_device
        self.shuffle_buffer = shuffle_buffer
        self.prefetch_factor = prefetch_factor
        self.workers = max(1, opts.num_workers)
        if len(self.urls) < opts.world_size:
            raise ConfigError(
                f"split {opts.split!r} has {len(self.urls)} shards but there are {opts.world_size} ranks: each rank needs "
                f"at least one shard; repack with a smaller --shard-size (e.g. {max(1, ds.nbytes // opts.world_size // 2**20)}MB"
                ") or use the ram loader"
            )
        # the shared epoch and the DataLoader's workers must come from one multiprocessing context
        self._mp = get_context()
        self._epoch_value = self._mp.Value("q", 0)
        self._loader: DataLoader | None = None
        if len(self) == 0:
            raise ConfigError(f"split {opts.split!r}: with {len(self.urls)} shards over {opts.world_size} ranks x "
                              f"{self.workers} workers no rank fills one batch of {opts.batch_size}; lower batch_size "
                              "or num_workers, or repack with a smaller --shard-size")

    def _deal_name(self) -> str:
        return f"by shard, {self.workers} workers"

    def load_state_dict(self, state: dict) -> None:
        if isinstance(state, dict) and state.get("world_size") not in (None, self.cfg.world_size):
            raise ConfigError(f"loader state: saved with world_size {state.get('world_size')}, this wds loader has "
                              f"{self.cfg.world_size}; wds deals whole shards to ranks, so it resumes only with the "
                              "same world size (the ram and DALI loaders re-deal the rest of an epoch)")
        super().load_state_dict(state)
        if any(ws != self.cfg.world_size for ws, _ in self._resume.get(self.epoch, ())):
            raise ConfigError("loader state: part of the epoch ran with another world size; wds cannot resume it")

    def _assignment(self, epoch: int) -> list[list[list[int]]]:
        return shard_assignment(len(self.urls), self.opts, self.workers, epoch)

    def _rank_batches(self, epoch: int) -> list[int]:
        bs, partial = self.opts.batch_size, self.opts.last_batch == "partial"
        counts = []
        for workers in self._assignment(epoch):
            samples = [int(self.shard_samples[w].sum()) if w else 0 for w in workers]
            counts.append(sum((-(-s // bs) if partial else s // bs) for s in samples))
        return counts

    def _dataloader(self) -> DataLoader:
        if self._loader is None:
            workers = self.opts.num_workers
            self._loader = DataLoader(_EpochStream(self), batch_size=None, num_workers=workers,
                                      pin_memory=self.device.type == "cuda",
                                      prefetch_factor=self.prefetch_factor if workers else None,
                                      persistent_workers=workers > 0,
                                      multiprocessing_context=self._mp if workers else None)
        return self._loader

    def __len__(self) -> int:
        return max(0, min(self._rank_batches(self.epoch)) - sum(k for _, k in self._consumed(self.epoch)))

    def __iter__(self):
        epoch = self.epoch
        skip = sum(k for _, k in self._begin(epoch))
        self._epoch_value.value = epoch  # workers read it when their next epoch starts
        n = min(self._rank_batches(epoch))
        it = iter(self._dataloader())
        try:
            for b in range(n):
                item = next(it)
                if b < skip:  # a resumed epoch: its stream is read again from the start
                    continue
                self._delivered += 1
                pixels = item["pixels"].to(self.device, non_blocking=True)
                code = item["code"].to(self.device, non_blocking=True) if self.cfg.augment else None
                padded = torch.zeros(len(item["keys"]), dtype=torch.bool, device=self.device)
                yield make_batch(pixels, code, item["keys"], padded)
        finally:
            del it  # the DataLoader tells persistent workers to drop the rest of this epoch
