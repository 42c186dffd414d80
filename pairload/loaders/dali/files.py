"""`FileSource` (kind "file", the `dali-file` loader): image folders read by two `readers.file` (low, high),
decoded with the planned window and flipped by one exact warp; the readers' labels are checked against the plan,
and a file changed since the loader was made is named."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import nvidia.dali.fn as fn
import nvidia.dali.types as types

from ...errors import ConfigError, ImageError, PairingError, PairloadError
from ...format.imageformats import SOI, jpeg_frame
from ...format.schema import MANIFEST
from ...format.stamps import stamp
from ...plan import BatchPlan, Run, rank_share
from ...folders.decode import probe, is_array
from ...folders.discover import find_pairs
from ..base import LoaderOptions
from .convert import labels as label_array
from .graph import PairedNodes, augment, dihedral_matrices
from .source import PairedSource


def shard_folder_refusal(raw_dir) -> ConfigError | None:
    """The refusal of a packed shard folder given where a dataset folder was expected (None: it is none)."""
    if isinstance(raw_dir, (str, os.PathLike)) and os.path.isfile(os.path.join(raw_dir, MANIFEST)):
        return ConfigError(f"{raw_dir}: a folder of packed shards (it has {MANIFEST}), but dali-file (paired_source "
                           "kind 'file') reads image folders; use dali-external (kind 'external'), ram or wds "
                           "for packed shards, or pass the dataset folder")
    return None


class FileSource(PairedSource):
    """kind "file": two `fn.readers.file` (low, high) over the raw images, sharded by rank, decoded on the GPU
    ("mixed") or CPU with the planned window (`decoders.image_slice`), flipped by one exact `warp_affine`. A
    pipeline's file lists cover an epoch span (consecutive epochs); another epoch needs a new pipeline."""

    KIND = "file"
    DEAL = "contiguous"  # readers.file gives each shard one contiguous block of its file list
    WINDOW_BATCHES = 1024  # a pipeline's file lists cover at least this many batches (or 64 epochs)

    def __init__(self, raw_dir, opts: LoaderOptions, *, low_dir: str | None = None, high_dir: str | None = None,
                 pairs_file: str | None = None, prefetch: int = 2, probe_threads: int = 8):
        if opts.plan.degrade is not None:
            raise ConfigError(f"{raw_dir}: degrade={opts.plan.degrade.describe()!r} with kind 'file' (DALI decoding "
                              "the image folders): a degradation makes inputs from packed targets; pack them "
                              "(`pairload pack PHOTOS SHARDS --targets-only`) and use dali-external, ram or wds")
        try:
            found = find_pairs(raw_dir, low_dir=low_dir, high_dir=high_dir, pairs_file=pairs_file).splits()
        except PairingError:  # a folder holding both its images and their pack is read as the image folder it is
            refusal = shard_folder_refusal(raw_dir)
            if refusal is None:
                raise
            raise refusal from None
        if opts.split not in found:
            raise ConfigError(f"{raw_dir}: no split {opts.split!r}; found {sorted(found)}")
        self.pairs = found[opts.split]
        self.where = str(raw_dir)
        self._rgb_checked = False  # its JPEG files looked at for RGB coding (`_refuse_rgb_jpegs`, on a GPU)
        for p in self.pairs:  # DALI's readers take UTF-8 names only (they fail on others without naming the file)
            for path in (p.low, p.high):
                try:
                    str(path).encode("utf-8")
                except UnicodeEncodeError:
                    raise ImageError(f"{os.fsencode(path)!r}: the file name is not valid UTF-8, which DALI's file "
                                     "reader cannot open; rename it, or pack the folder (`pairload pack`) and use "
                                     "the ram or dali-external loader") from None
        self._stamps = {path: stamp(path) for p in self.pairs for path in (p.low, p.high)}
        with ThreadPoolExecutor(probe_threads) as pool:
            low_headers = list(pool.map(probe, [p.low for p in self.pairs]))
            high_headers = list(pool.map(probe, [p.high for p in self.pairs]))
        for p, a, b in zip(self.pairs, low_headers, high_headers):
            for path, header in ((p.low, a), (p.high, b)):
                if header.raw is not None:
                    raise ConfigError(f"{path}: a camera raw file: dali-file decodes 8-bit images only; pack the "
                                      "folder with `pairload pack` (it packs the mosaic as SID does, through LibRaw) "
                                      "and use dali-external, ram or wds")
                if header.dtype != "uint8" or is_array(path):
                    raise ConfigError(f"{path}: {header.dtype} ×{header.channels}"
                                      f"{' NumPy array' if is_array(path) else ' image'}: dali-file decodes 8-bit "
                                      "images only (DALI would reduce 16-bit ones to 8 bits); pack the folder with "
                                      "`pairload pack` (it keeps 16 bits and arrays as they are) and use "
                                      "dali-external, ram or wds")
        lows, highs = [h.hw for h in low_headers], [h.hw for h in high_headers]
        for p, a, b in zip(self.pairs, lows, highs):
            if a != b:
                raise ImageError(f"{p.low_rel} is {a[1]}x{a[0]} but {p.high_rel} is {b[1]}x{b[0]}; a pair must have "
                                 "one size")
        super().__init__([p.key for p in self.pairs], np.array(lows, dtype=np.int64).reshape(-1, 2), opts.split, opts,
                         prefetch)

    def _runs_served(self, first: tuple) -> list[tuple]:
        epoch, consumed = first
        if self.cfg.last_batch == "partial" or consumed:  # ranks may differ in length: one run per graph
            return [first]
        count = min(64, max(1, -(-self.WINDOW_BATCHES // max(1, len(self)))))
        return [(e, ()) for e in range(epoch, epoch + count)]

    def _auto_next(self) -> tuple | None:
        """The run after the last one in this graph's file lists (None past their end)."""
        state = self.run_state
        if state.last_run is None:
            k = 0
        else:
            k = state.runs.index(state.last_run) + 1 if state.last_run in state.runs else len(state.runs)
        return state.runs[k] if k < len(state.runs) else None

    def _fits(self, run: tuple) -> bool:
        return run == self._auto_next()

    def _blocks(self, epoch: int, consumed: tuple = ()) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per rank, (pair indices, padded flags) of its share of `epoch`: contiguous blocks of the epoch's order,
        cut where `readers.file` cuts shards (rank r reads [r·T/ws, (r+1)·T/ws) of a list of length T)."""
        cfg = self.cfg
        return [rank_share(len(self.keys), seed=cfg.seed, epoch=epoch, rank=r, world_size=cfg.world_size,
                           batch_size=cfg.batch_size, last_batch=cfg.last_batch, shuffle=cfg.shuffle,
                           deal=self.DEAL, consumed=consumed) for r in range(cfg.world_size)]

    def file_lists(self, order: np.ndarray) -> dict[str, tuple[list[str], list[int]]]:
        """Per reader, (files, labels) in reading order; a pair's label is its index in the split, on both sides."""
        labels = [int(i) for i in order]
        return {"low": ([str(self.pairs[i].low) for i in order], labels),
                "high": ([str(self.pairs[i].high) for i in order], labels)}

    def _inputs(self, run: tuple, plans: Run):
        bs = self.cfg.batch_size
        for bp in plans:
            changed = self._changed(bp.index)  # before DALI reads the batch's files
            if changed is not None:
                raise changed
            fill = bs - len(bp)  # readers pad a short last batch by repeating the shard's last sample
            rep = lambda a, fill=fill: np.concatenate([a, np.repeat(a[-1:], fill)]) if fill else a  # noqa: E731
            index = rep(bp.index)
            batch = [index.astype(np.int32)]  # the labels the readers must return
            if self.cfg.crop is not None:
                batch.append(np.stack([rep(bp.y), rep(bp.x)], axis=1).astype(np.int32))
            if self.cfg.augment:
                batch.append(dihedral_matrices(rep(bp.code), self._out_hw_index(index, self.cfg.crop)))
            self.run_state.fed.append((run, bp))
            yield batch

    def _graph(self, on_gpu: bool) -> PairedNodes:
        crop = self.cfg.crop
        runs = self.run_state.runs
        # each rank's block holds its shares of every run of the epoch span, one after the other; drop and pad make
        # them whole batches of equal length on every rank, so readers.file cuts the same blocks
        blocks = [self._blocks(e, consumed) for e, consumed in runs]
        order = np.concatenate([blocks[k][r][0] for r in range(self.cfg.world_size) for k in range(len(runs))])
        shard = dict(shard_id=self.cfg.rank, num_shards=self.cfg.world_size, random_shuffle=False, pad_last_batch=True,
                     stick_to_shard=True)
        decoder = "mixed" if on_gpu else "cpu"
        if on_gpu:
            self._refuse_rgb_jpegs()
        n_in = 1 + (crop is not None) + self.cfg.augment
        fed = list(fn.external_source(source=self._feed(), num_outputs=n_in, batch=True, cycle="raise",
                                      parallel=False))
        expect = fed.pop(0)
        anchor = fed.pop(0) if crop is not None else None
        matrix = fed.pop(0) if self.cfg.augment else None
        outs, labs = [], []
        for name, (files, labels) in self.file_lists(order).items():
            data, label = fn.readers.file(files=files, labels=labels, name=name, **shard)
            if crop is not None:
                shape = types.Constant(np.array([crop, crop], dtype=np.int32), device="cpu")
                img = fn.decoders.image_slice(data, anchor, shape, axes=[0, 1], device=decoder,
                                              output_type=types.RGB, adjust_orientation=False)
            else:
                img = fn.decoders.image(data, device=decoder, output_type=types.RGB, adjust_orientation=False)
            outs.append(augment(img, matrix))
            labs.append(label)
        return PairedNodes(outs[0], outs[1], self, (labs[0], labs[1], expect))

    def _refuse_rgb_jpegs(self) -> None:
        """An RGB-coded JPEG (its components R, G, B, not YCbCr, as libjpeg reads its markers) refused by name: DALI's
        GPU decoder (nvImageCodec) takes any three components for YCbCr, and would give other colours than `pack`
        and the CPU decoder. Once per loader, from each file's first bytes: a JPEG is known by its content, as `pack`
        knows it, whatever its name."""
        if self._rgb_checked:
            return
        files = [path for p in self.pairs for path in (p.low, p.high)]

        def rgb(path) -> bool:
            with open(path, "rb") as f:
                head = f.read(2)
                frame = jpeg_frame(head + f.read(1 << 16)) if head == SOI else None
            return frame is not None and frame.rgb

        with ThreadPoolExecutor(8) as pool:
            found = [path for path, bad in zip(files, pool.map(rgb, files)) if bad]
        if found:
            raise ImageError(f"{found[0]}: an RGB-coded JPEG (its components are R, G, B, not YCbCr), which DALI's "
                             "GPU decoder decodes as YCbCr (other colours)" + (f"; {len(found) - 1} more" if
                                                                              len(found) > 1 else "")
                             + ": re-save it as a usual JPEG, decode on the CPU (device='cpu'), or pack the folder "
                             "(`pairload pack`: it stores such files lossless) and use dali-external, ram or wds")
        self._rgb_checked = True

    def _changed(self, index) -> PairloadError | None:
        """The first file of these pairs that is missing or changed since the loader was made (its probed size and
        the plan's windows may no longer hold)."""
        for i in np.asarray(index).tolist():
            for path in (self.pairs[i].low, self.pairs[i].high):
                now = stamp(path)
                if now is None:
                    return ImageError(f"{path}: missing (it was there when the loader was made); restore it or "
                                      "make the loader again")
                if now != self._stamps[path]:
                    return ImageError(f"{path}: changed since the loader was made (modified or replaced); make the "
                                      "loader again so that its size is probed and its pair planned anew")
        return None

    def _diagnose(self, plans: Run, b: int) -> PairloadError | None:
        from ...folders.decode import decode_rgb

        for bp in plans[b:b + self.prefetch + 2]:  # DALI may have failed on a batch it was prefetching
            changed = self._changed(bp.index)
            if changed is not None:
                return changed
            for i in bp.index.tolist():
                for path in (self.pairs[i].low, self.pairs[i].high):
                    try:
                        decode_rgb(path, to_8bit=True)
                    except PairloadError as exc:
                        return exc
        return None

    def _check(self, labels, bp: BatchPlan, b: int) -> None:
        low, high, expect = (label_array(o) for o in labels)
        n = len(bp)
        if not (np.array_equal(low[:n], expect[:n]) and np.array_equal(high[:n], expect[:n])):
            bad = int(np.flatnonzero((low[:n] != expect[:n]) | (high[:n] != expect[:n]))[0])
            raise PairingError(
                f"{self.where}: the low and high readers are out of step at epoch {self.epoch}, batch {b}, row {bad}: "
                f"low file {self.pairs[int(low[bad])].low_rel}, high file {self.pairs[int(high[bad])].high_rel}, plan "
                f"expected pair {self.pairs[int(expect[bad])].low_rel}; training stopped rather than learn from "
                "mismatched pairs"
            )
