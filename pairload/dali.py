"""DALI loaders: `external_source` over the packed shards, and two sharded `readers.file` over the raw images.

Both execute the planner's plan (order, rank shares, crop windows, flips and transposes) with DALI operators
(`slice` or `decoders.image_slice` for the window, one exact nearest-neighbour `warp_affine` for the flips and
transposes),
run on a GPU (`device="cuda:k"`) or in DALI's CPU-only mode (`device="cpu"`, `device_id=None`), and yield the
same `PairBatch` as every other loader. A pipeline is fed the plans of a window of consecutive epochs, which
are pure functions of (seed, epoch, rank), so calling `set_epoch(e)` on a new loader reproduces epoch e. Works with either DALI build (cuda120/cuda130):
only the public `nvidia.dali` API is used.

dali-file keeps a pair together by giving it one label in both file lists and comparing, for every batch,
the labels the two readers return with the labels the plan expects; any difference stops the loader.
"""

from __future__ import annotations

import os
import re
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .batch import batch_from_hwc
from .decode import probe_size
from .discover import find_pairs
from .errors import ConfigError, ImageError, MissingDependencyError, PairingError, PairloadError
from .loaders.base import LoaderOptions, PlannedLoader
from .plan import HFLIP, TRANSPOSE, VFLIP, BatchPlan, rank_share
from .shards import ShardDataset

try:
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def
except ImportError:  # pragma: no cover - exercised where DALI is absent
    raise MissingDependencyError(
        "pairload.dali needs NVIDIA DALI: pip install 'pairload[dali]' (CUDA 12 build) or 'pairload[dali-cu13]' "
        "(CUDA 13 build); DALI also runs without a GPU"
    ) from None


def _device_id(device: torch.device) -> int | None:
    return device.index if device.type == "cuda" else None


def _augment(images, matrix):
    """The planner's transpose/vflip/hflip of every sample as one exact nearest-neighbour `warp_affine`.

    The per-sample 2x3 matrix maps output pixel centres onto source pixel centres, so every output pixel is
    copied from exactly one source pixel (no interpolation); no DALI conditionals are needed."""
    if matrix is None:
        return images
    return fn.warp_affine(images, matrix=matrix, interp_type=types.INTERP_NN, inverse_map=True, fill_value=0)


def dihedral_matrices(code: np.ndarray, hw: np.ndarray) -> np.ndarray:
    """(N, 2, 3) float32 inverse maps (output x, y, 1 -> source x, y) for augmentation codes on H×W outputs.

    Output pixel (row i, col j) shows source (j', i') after a transpose, else (i', j'), where i' = H-1-i under a
    vertical flip and j' = W-1-j under a horizontal flip: the planner's order (transpose, vflip, hflip)."""
    n = len(code)
    h, w = hw[:, 0].astype(np.float32), hw[:, 1].astype(np.float32)
    hflip, vflip, trans = (code & HFLIP) != 0, (code & VFLIP) != 0, (code & TRANSPOSE) != 0
    ax = np.zeros((n, 3), np.float32)  # x' (source column before transposing) as a function of (x, y, 1)
    ax[:, 0] = np.where(hflip, -1, 1)
    ax[:, 2] = np.where(hflip, w, 0)
    ay = np.zeros((n, 3), np.float32)
    ay[:, 1] = np.where(vflip, -1, 1)
    ay[:, 2] = np.where(vflip, h, 0)
    src_x = np.where(trans[:, None], ay, ax)
    src_y = np.where(trans[:, None], ax, ay)
    return np.ascontiguousarray(np.stack([src_x, src_y], axis=1))


def _to_torch(tensor_list, device: torch.device) -> torch.Tensor:
    """A dense DALI TensorList (CPU or GPU) → a torch tensor on `device` (one copy on the current stream)."""
    from nvidia.dali.plugin.pytorch import feed_ndarray

    dense = tensor_list.as_tensor()
    out = torch.empty(tuple(dense.shape()), dtype=torch.uint8, device=device)
    if device.type == "cuda":
        feed_ndarray(dense, out, cuda_stream=torch.cuda.current_stream(device))
    else:
        feed_ndarray(dense, out)
    return out


def _labels(tensor_list) -> np.ndarray:
    return np.array(tensor_list.as_cpu().as_tensor() if hasattr(tensor_list, "as_cpu") else tensor_list.as_tensor()).reshape(-1)


_SOURCE_INFO = re.compile(r"(?:source info|Source info|sample's source info)[^:]*:\s*(\S+)")


def _dali_error(exc: Exception, where: str) -> PairloadError:
    text = str(exc)
    m = _SOURCE_INFO.search(text)
    name = m.group(1) if m else None
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and "Error" in ln), text.strip().splitlines()[0] if text.strip() else type(exc).__name__)
    if name:
        return ImageError(f"{name}: DALI could not read or decode it ({first[:200]}); replace or remove the file")
    return ImageError(f"{where}: DALI failed: {first[:300]}")


class _DaliLoader(PlannedLoader):
    """Shared epoch loop. A pipeline is built for a window of consecutive epochs (its inputs are those epochs'
    plans, back to back), so small datasets do not pay a pipeline build (and a decoder start) every epoch;
    asking for any other epoch than the next one, or leaving an epoch early, starts a new window."""

    WINDOW_BATCHES = 1024  # a window covers at least this many batches (or 64 epochs)

    def __init__(self, keys, hw, split, opts: LoaderOptions, prefetch: int):
        super().__init__(keys, hw, split, opts)
        self.num_threads = max(1, opts.num_workers)  # DALI's CPU threads: the kind's CPU parallelism
        self.prefetch = max(1, prefetch)
        self._pipe = None
        self._next_epoch: int | None = None
        self._window_end = 0

    def _window(self, epoch: int, consumed: tuple = ()) -> list[int]:
        if self.cfg.last_batch == "partial" or consumed:  # ranks may differ in length, short last batches: one epoch
            return [epoch]
        per_epoch = max(1, len(self))
        return list(range(epoch, epoch + min(64, max(1, -(-self.WINDOW_BATCHES // per_epoch)))))

    def _pipeline(self, epochs: list[int], plans: list[BatchPlan], consumed: tuple = ()):
        raise NotImplementedError

    def _check(self, outputs, bp: BatchPlan, b: int) -> None:
        """Raise if the labels that came out are not the plan's (readers out of step)."""

    def _diagnose(self, plans: list[BatchPlan], b: int) -> PairloadError | None:
        """After a DALI failure at batch b, find a file to blame (DALI's own message often names none)."""
        return None

    def close(self) -> None:
        self._pipe, self._next_epoch = None, None

    def _out_hw_index(self, index: np.ndarray) -> np.ndarray:
        """(N, 2) output height and width of these samples: the crop, or the whole image."""
        if self.cfg.crop is not None:
            return np.full((len(index), 2), self.cfg.crop, dtype=np.int64)
        return self.hw[index]

    def _out_hw(self, bp: BatchPlan) -> np.ndarray:
        return self._out_hw_index(bp.index)

    def _batches(self, epoch: int, plans: list[BatchPlan], consumed: tuple):
        if not plans:
            return
        if self._pipe is None or self._next_epoch != epoch or consumed:
            self.close()
            epochs = self._window(epoch, consumed)
            window_plans = [bp for e in epochs for bp in (plans if e == epoch else self.plan_for(e))]
            self._pipe = self._pipeline(epochs, window_plans, consumed)
            self._pipe.build()
            self._window_end = epochs[-1] + 1
        pipe, finished = self._pipe, False
        try:
            for b, bp in enumerate(plans):
                try:
                    outputs = pipe.run()
                except (RuntimeError, ValueError) as exc:
                    raise (self._diagnose(plans, b) or _dali_error(exc, self.where)) from None
                self._check(outputs, bp, b)
                n = len(bp)
                low = _to_torch(outputs[0], self.device)[:n]
                high = _to_torch(outputs[1], self.device)[:n]
                padded = torch.from_numpy(bp.padded.copy()).to(self.device)
                yield batch_from_hwc(low, high, [self.keys[i] for i in bp.index.tolist()], padded)
            finished = True
        finally:
            if finished and epoch + 1 < self._window_end:
                self._next_epoch = epoch + 1
            else:
                self.close()


class DaliExternalLoader(_DaliLoader):
    """`fn.external_source` (batch mode, zero-copy views of the memory-mapped shards) → slice → flips on the device."""

    def __init__(self, source, opts: LoaderOptions, *, prefetch: int = 2):
        self.ds = source if isinstance(source, ShardDataset) else ShardDataset(source, opts.split)
        self.where = str(self.ds.root)
        super().__init__(self.ds.keys, self.ds.sizes, self.ds.split, opts, prefetch)

    def _feed(self, plans: list[BatchPlan]):
        keep: deque = deque(maxlen=self.prefetch + 3)  # no_copy: views must outlive DALI's use of them
        for bp in plans:
            lows, highs = zip(*(self.ds.arrays(i) for i in bp.index.tolist()))
            batch = [list(lows), list(highs)]
            if self.cfg.crop is not None:  # dense per-batch inputs: one array each, not one per sample
                batch.append(np.stack([bp.y, bp.x], axis=1).astype(np.int32))
            if self.cfg.augment:
                batch.append(dihedral_matrices(bp.code, self._out_hw(bp)))
            keep.append(batch)
            yield batch

    def _pipeline(self, epochs: list[int], plans: list[BatchPlan], consumed: tuple = ()):
        crop, on_gpu = self.cfg.crop, self.device.type == "cuda"

        @pipeline_def(batch_size=self.cfg.batch_size, num_threads=self.num_threads, device_id=_device_id(self.device),
                      prefetch_queue_depth=self.prefetch, seed=self.cfg.seed & 0x7FFFFFFF)
        def pipe():
            n_out = 2 + (crop is not None) + self.cfg.augment
            outs = list(fn.external_source(source=self._feed(plans), num_outputs=n_out, batch=True, no_copy=True,
                                           parallel=False))
            low, high = outs.pop(0), outs.pop(0)
            if crop is not None:
                anchor = outs.pop(0)
                shape = types.Constant(np.array([crop, crop], dtype=np.int32), device="cpu")
                low = fn.slice(low, anchor, shape, axes=[0, 1])
                high = fn.slice(high, anchor, shape, axes=[0, 1])
            matrix = outs.pop(0) if outs else None
            if on_gpu:
                low, high = low.gpu(), high.gpu()
            return _augment(low, matrix), _augment(high, matrix)

        return pipe()


class DaliFileLoader(_DaliLoader):
    """Two `fn.readers.file` (low, high) over the raw images, sharded by rank, decoded on the GPU ("mixed") or CPU."""

    DEAL = "contiguous"  # readers.file gives each shard one contiguous block of its file list

    def __init__(self, raw_dir, opts: LoaderOptions, *, low_dir: str | None = None, high_dir: str | None = None,
                 pairs_file: str | None = None, prefetch: int = 2, probe_threads: int = 8):
        found = find_pairs(raw_dir, low_dir=low_dir, high_dir=high_dir, pairs_file=pairs_file).splits()
        if opts.split not in found:
            raise ConfigError(f"{raw_dir}: no split {opts.split!r}; found {sorted(found)}")
        self.pairs = found[opts.split]
        self.where = str(raw_dir)
        with ThreadPoolExecutor(probe_threads) as pool:
            lows = list(pool.map(probe_size, [p.low for p in self.pairs]))
            highs = list(pool.map(probe_size, [p.high for p in self.pairs]))
        for p, a, b in zip(self.pairs, lows, highs):
            if a != b:
                raise ImageError(f"{p.low_rel} is {a[1]}x{a[0]} but {p.high_rel} is {b[1]}x{b[0]}; a pair must have one size")
        super().__init__([p.key for p in self.pairs], np.array(lows, dtype=np.int64).reshape(-1, 2), opts.split, opts,
                         prefetch)

    def _blocks(self, epoch: int, consumed: tuple = ()) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per rank, (pair indices, padded flags) of its share of `epoch`: contiguous blocks of the epoch's order,
        cut where `readers.file` cuts shards (rank r reads [r·T/ws, (r+1)·T/ws) of a list of length T)."""
        cfg = self.cfg
        return [rank_share(len(self.keys), seed=cfg.seed, epoch=epoch, rank=r, world_size=cfg.world_size,
                           batch_size=cfg.batch_size, last_batch=cfg.last_batch, shuffle=cfg.shuffle,
                           deal=self.DEAL, consumed=consumed) for r in range(cfg.world_size)]

    def _file_lists(self, order: np.ndarray) -> dict[str, tuple[list[str], list[int]]]:
        """Per reader, (files, labels) in reading order; a pair's label is its index in the split, on both sides."""
        labels = [int(i) for i in order]
        return {"low": ([str(self.pairs[i].low) for i in order], labels),
                "high": ([str(self.pairs[i].high) for i in order], labels)}

    def _feed(self, plans: list[BatchPlan]):
        bs = self.cfg.batch_size
        for bp in plans:
            fill = bs - len(bp)  # readers pad a short last batch by repeating the shard's last sample
            rep = lambda a: np.concatenate([a, np.repeat(a[-1:], fill)]) if fill else a  # noqa: E731
            index = rep(bp.index)
            batch = [index.astype(np.int32)]  # the labels the readers must return
            if self.cfg.crop is not None:
                batch.append(np.stack([rep(bp.y), rep(bp.x)], axis=1).astype(np.int32))
            if self.cfg.augment:
                batch.append(dihedral_matrices(rep(bp.code), self._out_hw_index(index)))
            yield batch

    def _pipeline(self, epochs: list[int], plans: list[BatchPlan], consumed: tuple = ()):
        crop, on_gpu = self.cfg.crop, self.device.type == "cuda"
        # each rank's block holds its shares of every epoch of the window, one after the other; drop and pad make
        # them whole batches of equal length on every rank, so readers.file cuts the same blocks (a resumed epoch
        # is a window of its own)
        blocks = [self._blocks(e, consumed if k == 0 else ()) for k, e in enumerate(epochs)]
        order = np.concatenate([blocks[k][r][0] for r in range(self.cfg.world_size) for k in range(len(epochs))])
        lists = self._file_lists(order)
        shard = dict(shard_id=self.cfg.rank, num_shards=self.cfg.world_size, random_shuffle=False, pad_last_batch=True,
                     stick_to_shard=True)
        decoder = "mixed" if on_gpu else "cpu"

        @pipeline_def(batch_size=self.cfg.batch_size, num_threads=self.num_threads, device_id=_device_id(self.device),
                      prefetch_queue_depth=self.prefetch, seed=self.cfg.seed & 0x7FFFFFFF)
        def pipe():
            n_out = 1 + (crop is not None) + self.cfg.augment
            fed = list(fn.external_source(source=self._feed(plans), num_outputs=n_out, batch=True))
            expect = fed.pop(0)
            anchor = fed.pop(0) if crop is not None else None
            matrix = fed.pop(0) if self.cfg.augment else None
            outs, labs = [], []
            for name, (files, labels) in lists.items():
                data, label = fn.readers.file(files=files, labels=labels, name=name, **shard)
                if crop is not None:
                    shape = types.Constant(np.array([crop, crop], dtype=np.int32), device="cpu")
                    img = fn.decoders.image_slice(data, anchor, shape, axes=[0, 1], device=decoder,
                                                  output_type=types.RGB, adjust_orientation=False)
                else:
                    img = fn.decoders.image(data, device=decoder, output_type=types.RGB, adjust_orientation=False)
                outs.append(_augment(img, matrix))
                labs.append(label)
            return outs[0], outs[1], labs[0], labs[1], expect

        return pipe()

    def _diagnose(self, plans: list[BatchPlan], b: int) -> PairloadError | None:
        from .decode import decode_rgb

        for bp in plans[b:b + self.prefetch + 2]:  # DALI may have failed on a batch it was prefetching
            for i in bp.index.tolist():
                for path in (self.pairs[i].low, self.pairs[i].high):
                    if not path.is_file():
                        return ImageError(f"{path}: missing (it was there when the loader was made); restore it or "
                                          "make the loader again")
                    try:
                        decode_rgb(path, to_8bit=True)
                    except PairloadError as exc:
                        return exc
        return None

    def _check(self, outputs, bp: BatchPlan, b: int) -> None:
        low, high, expect = (_labels(o) for o in outputs[2:5])
        n = len(bp)
        if not (np.array_equal(low[:n], expect[:n]) and np.array_equal(high[:n], expect[:n])):
            bad = int(np.flatnonzero((low[:n] != expect[:n]) | (high[:n] != expect[:n]))[0])
            raise PairingError(
                f"{self.where}: the low and high readers are out of step at epoch {self.epoch}, batch {b}, row {bad}: "
                f"low file {self.pairs[int(low[bad])].low_rel}, high file {self.pairs[int(high[bad])].high_rel}, plan "
                f"expected pair {self.pairs[int(expect[bad])].low_rel}; training stopped rather than learn from "
                "mismatched pairs"
            )


def external_source_loader(shards_dir: str | os.PathLike, **kwargs):
    """`make_loader("dali-external", shards_dir, **kwargs)`."""
    from .loaders import make_loader

    return make_loader("dali-external", shards_dir, **kwargs)


def file_reader_loader(raw_dir: str | os.PathLike, **kwargs):
    """`make_loader("dali-file", raw_dir, **kwargs)`; `low_dir`, `high_dir`, `pairs_file` as for `pairload pack`."""
    from .loaders import make_loader

    return make_loader("dali-file", raw_dir, **kwargs)


__all__ = ["DaliExternalLoader", "DaliFileLoader", "external_source_loader", "file_reader_loader"]
