"""The two contact sheets of `pairload preview`: stored pairs chosen at random (`PreviewOptions.batch` False; of a
targets-only split, its stored targets alone), or the first batch a `ram` loader on the CPU cuts from them (input and
target at one window, oriented alike; with `degrade`, inputs degraded from the targets; with `clips`, clips of a
video split, each a strip of its input frames over a strip of its target frames), each pair labelled with its key (a
clip with its sequence and frame keys), size and source folders (and the parameters the degradation drew), the display
transforms and resampling stated in the header.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..dihedral import HFLIP, TRANSPOSE, VFLIP
from ..errors import ConfigError, OutputError
from ..format.atomic import write_bytes_atomic
from ..plan.crops import check_crop, is_whole
from ..read.shards import ShardDataset, open_shards
from ..degrade.spec import suggested_model, takers
from .display import check_mode, displays
from .meta import folders, source_paths
from .render import SIDES, Cell, Sheet, check_tile_height, render, resampling

TARGET_ONLY = ("target",)  # a targets-only split's cell without a degradation: its stored target alone
ORIENTATION = "orientation: t transposed, v flipped vertically, h flipped horizontally (applied in that order)"


@dataclass(frozen=True, kw_only=True)
class PreviewOptions:
    """What a sheet shows. `n` pairs of `split` (all of a smaller split; of a targets-only split, `n` targets),
    chosen with `seed`; `batch`: the first batch of epoch 0 of `make_loader("ram", ..., crop=crop, seed=seed)` on the
    CPU instead of stored pairs (`crop`: a side, (height, width), or None for whole images); `tile_height`: pixels
    every image is scaled to (0: stored size); `columns`: pairs per row (0: about square); `display`: "range" or
    "stretch" (`display.Display`);
    `degrade` (implies `batch`): the loader degrades the targets into the inputs ("lowlight",
    "lowlight,gamma=2..3", a dict or a `pairload.degrade.Degradation`) and each pair is labelled with its parameters;
    `clips` (implies `batch`; a split packed with --sequences): the batch is `n` clips (5, "5,stride=2,short=pad" or a
    `pairload.plan.Clips`, with last_batch="partial": all of the split's when it has fewer), each shown as its input
    frames in a row over its target frames and labelled with its sequence and frame keys."""

    split: str = "train"
    n: int = 16
    seed: int = 0
    batch: bool = False
    crop: Any = 128
    tile_height: int = 128
    columns: int = 0
    display: str = "range"
    degrade: Any = None
    clips: Any = None

    def __post_init__(self) -> None:
        if self.clips is not None or self.degrade is not None:
            from ..plan.clips import Clips
            from ..degrade.spec import Degradation

            self._loader_option("clips", Clips.of)
            self._loader_option("degrade", Degradation.of)
        if not is_whole(self.n) or self.n < 1:
            raise ConfigError.for_value("n", self.n, "expected at least 1 pair to show")
        if not is_whole(self.columns) or self.columns < 0:
            raise ConfigError.for_value("columns", self.columns, "expected 0 (about square) or pairs per row")
        if not is_whole(self.seed) or self.seed < 0:
            raise ConfigError.for_value("seed", self.seed, "expected a whole number, 0 or more")
        check_tile_height(self.tile_height)
        check_mode(self.display)
        if self.batch:
            self._check_crop()

    def _check_crop(self) -> None:
        """`crop` in its canonical form; a refusal said on a command line as --crop WxH, as it was typed."""
        crop = self.crop
        try:
            object.__setattr__(self, "crop", check_crop(crop))
        except ConfigError as exc:
            shown = f"{crop[1]}x{crop[0]}" if isinstance(crop, (tuple, list)) and len(crop) == 2 else str(crop)
            raise ConfigError(str(exc), option="crop", flag_problem="{flag} " + shown.replace("{", "{{").replace(
                "}", "}}") + ": expected N (square) or WxH of at least 1 pixel, or 'whole'") from None

    def _loader_option(self, name: str, parse) -> None:
        """An option of the loader whose batch is shown (`clips`, `degrade`): parsed, a refusal naming it; given, it
        implies `batch`."""
        value = getattr(self, name)
        if value is None:
            return
        try:
            object.__setattr__(self, name, parse(value))
        except ConfigError as exc:
            said = str(exc)  # without the value twice where the parser already names it ("degrade=5 (int): ...")
            raise ConfigError.for_value(name, value, said.split(": ", 1)[1] if said.startswith(f"{name}=") else said
                                        ) from None
        object.__setattr__(self, "batch", True)


def preview(shards: str | os.PathLike | ShardDataset, options: PreviewOptions = PreviewOptions(), *,
            cache_dir: str | os.PathLike | None = None, storage_options: dict | None = None) -> Sheet:
    """The sheet `options` asks for, over a shard folder or URL (`cache_dir`, `storage_options`: as `open_shards`)."""
    ds = open_shards(shards, options.split, cache_dir=cache_dir, storage_options=storage_options)
    if not isinstance(ds, ShardDataset):
        raise ConfigError("preview shows one shard folder; pass a folder or URL, not a mix of sources")
    if len(ds) == 0:
        raise ConfigError(f"{ds.where}: split {options.split!r} holds no pairs; choose another split "
                          f"(`pairload info {ds.where}` lists them)")
    if options.batch and options.degrade is None and ds.targets_only:
        raise _needs_degrade(ds, options.split)
    return (_batch if options.batch else _pairs)(ds, options)


def write_sheet(sheet: Sheet, path: str | os.PathLike) -> Path:
    """Write `sheet` as a PNG at `path` (atomically: a temporary file renamed into place)."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ConfigError.for_value("out", path, "expected a file name ending in .png")
    if not path.parent.is_dir():
        raise OutputError(f"{path}: the folder {path.parent} does not exist; create it or write the PNG elsewhere")
    write_bytes_atomic(path, sheet.png())
    return path


def _pairs(ds: ShardDataset, o: PreviewOptions) -> Sheet:
    """Stored pairs chosen at random; of a targets-only split, its stored targets alone (it has no inputs to show)."""
    chosen = np.sort(np.random.default_rng(o.seed).choice(len(ds), size=min(o.n, len(ds)), replace=False))
    low_d, high_d = displays(ds.members, ds.sensor, o.display)
    only = ds.targets_only
    paths = source_paths(ds, chosen)
    cells = []
    token = ds.acquire(chosen)
    try:
        for i in chosen.tolist():
            low, high = ds.arrays(i)
            levels, ratio, high_levels = _sensor(ds, i)
            h, w = (int(v) for v in ds.sizes[i])
            size = _size(ds, w, h) + (f", ratio {ratio:g}" if ratio is not None and not only else "")
            shown = (high_d(high, high_levels),) if only else (low_d(low, levels, ratio), high_d(high, high_levels))
            cells.append(Cell(ds.keys[i], shown, (ds.keys[i], size, folders(paths.get(i))),
                              sides=TARGET_ONLY if only else SIDES))
    finally:
        ds.release(token)
    what = "all" if len(chosen) == len(ds) else f"{len(chosen)} of"
    chosen_how = f" chosen at random (seed {o.seed}), in index order" if len(chosen) < len(ds) else ""
    if only:
        header = [f"{ds.where}, split {o.split}: {what} {len(ds)} targets{chosen_how}; the split holds targets only "
                  "(packed with --targets-only): each tile is a stored target, there are no stored inputs; sizes WxH; "
                  "under each: key, size, source folder", _degrade_hint(ds),
                  f"target shown: {high_d.describe()}", resampling(o.tile_height)]
    else:
        header = [f"{ds.where}, split {o.split}: {what} {len(ds)} pairs{chosen_how}; left input, right target; sizes "
                  "WxH; under each: key, size, source folders (input | target)", *_common(low_d, high_d, o)]
    return render(cells, header, o.tile_height, o.columns)


def _degrade_hint(ds: ShardDataset) -> str:
    """How to see the inputs a targets-only split's targets are made into."""
    first = suggested_model(ds.members, ds.sensor)
    return (f"to see inputs degraded from these targets, add --degrade {first} (PreviewOptions(degrade={first!r}); "
            f"the models that take them: {', '.join(takers(ds.members, ds.sensor)) or 'none'}; docs/degrade.md)")


def _needs_degrade(ds: ShardDataset, split: str) -> ConfigError:
    """A loader's batch of a targets-only split asked for without a degradation to make its inputs."""
    first = suggested_model(ds.members, ds.sensor)
    return ConfigError(f"{ds.where}: split {split!r} holds targets only (packed with --targets-only), and a loader's "
                       "batch needs inputs degraded from them", option="degrade",
                       fix=f"give degrade={first!r}, or leave batch, crop and clips out to see the stored targets",
                       flag_fix=f"add --degrade {first}, or leave --batch, --crop and --clips out to see the stored "
                                "targets")


def _batch(ds: ShardDataset, o: PreviewOptions) -> Sheet:
    from ..loaders import make_loader

    t = 1 if o.clips is None else o.clips.frames
    size = min(o.n, len(ds)) if o.clips is None else o.n  # clips: the first batch holds all when there are fewer
    clips = {} if o.clips is None else {"clips": o.clips, "last_batch": "partial"}
    with make_loader("ram", ds, split=o.split, batch_size=size, crop=o.crop, seed=o.seed, num_workers=0,
                     device="cpu", degrade=o.degrade, **clips) as loader:
        loader.set_epoch(0)
        plan = loader.plan()[0]
        batch = next(iter(loader))
        rows = plan.index.tolist()  # of clips: each clip's T frames
        keys = [k for clip in batch.keys for k in clip] if clips else list(batch.keys)
        if keys != [ds.keys[i] for i in rows]:
            raise ConfigError("the loader's first batch is not its planned one (a pairload bug: please report it)")
        # copied out, and the labels read, while the loader holds its buffers and a remote split's shards
        lows, highs = _hwc(batch.low.flatten(0, -4)), _hwc(batch.high.flatten(0, -4))
        params = {name: v.numpy().copy() for name, v in (batch.degradation or {}).items()}
        paths = source_paths(ds, rows)
        units = loader.samples
    low_d, high_d = displays(ds.members, ds.sensor, o.display)

    def shown(r: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Row r (a pair, or a frame of clip k) as displayed."""
        levels, ratio, high_levels = _sensor(ds, rows[r])
        if params:  # a degraded raw input has the target's levels and the drawn ratio
            levels = levels if high_levels is None else high_levels
            ratio = float(params["ratio"][k]) if "ratio" in params else ratio
        return low_d(lows[r], levels, ratio), high_d(highs[r], high_levels)

    cells = []
    for k in range(len(batch)):
        r = k * t
        i = rows[r]
        h, w = (int(v) for v in ds.sizes[i])
        where = (f"window at x {int(plan.x[r])}, y {int(plan.y[r])} of {_size(ds, w, h)}",
                 _orientation(int(plan.code[r])), folders(paths.get(i)), *parameter_lines(params, k))
        if o.clips is None:
            cells.append(Cell(ds.keys[i], shown(r, k), (ds.keys[i], *where)))
            continue
        pairs = [shown(r + f, k) for f in range(t)]
        frames = tuple(batch.keys[k])
        cells.append(Cell(frames[0], tuple(p[0] for p in pairs) + tuple(p[1] for p in pairs),
                          (_sequence(ds, rows[r:r + t]), " ".join(frames), *where), frames=frames))
    crop = "whole images" if o.crop is None else (f"crop {o.crop}" if isinstance(o.crop, int)
                                                 else f"crop {o.crop[1]}x{o.crop[0]} (WxH)")
    stored = "the split holds targets only" if ds.targets_only else "the stored inputs are not shown"
    degraded = [] if o.degrade is None else [
        f"inputs degraded from the targets, degrade={o.degrade.describe()!r} ({stored}); under each "
        f"{'clip' if clips else 'pair'} the parameters it drew (3 significant digits)"]
    if clips:
        what = (f"clips={o.clips.describe()!r}, last_batch='partial', seed={o.seed}) on the CPU, {units} clips of "
                f"{len(ds.sequences)} sequences ({len(ds)} frames) in the split; each clip its {t} input frames in a "
                "row over their targets, every frame cut at the clip's one window (input pixels) and oriented alike; "
                "under each: its sequence and frame numbers, its frames' keys")
    else:
        what = (f"seed={o.seed}) on the CPU, {len(ds)} {'targets' if ds.targets_only else 'pairs'} in the split; left "
                "input, right target, each pair cut at one window (input pixels) and oriented alike")
    header = [f"{ds.where}, split {o.split}: batch 0 of epoch 0 of make_loader('ram', batch_size={size}, {crop}, "
              + what, *degraded, ORIENTATION, *_common(low_d, high_d, o)]
    return render(cells, header, o.tile_height, o.columns)


def _sequence(ds: ShardDataset, rows: list[int]) -> str:
    """A clip's label: its sequence's name and the numbers of its frames in it, "scene03: frames 2 3 4 of 9"."""
    seqs = ds.sequences
    s = int(np.searchsorted(seqs.starts, rows[0], side="right")) - 1
    return (f"{seqs.names[s]}: frames {' '.join(str(i - int(seqs.starts[s])) for i in rows)} of "
            f"{int(seqs.counts[s])}")


PER_LINE = 3  # parameters per label line: a line stays within a tile pair of 128 px high images


def parameter_lines(params: dict, row: int) -> list[str]:
    """Row `row`'s drawn degradation parameters as "name=value" (3 significant digits), PER_LINE to a line; "input as
    stored" for a row that was not degraded; none without a degradation."""
    if not params:
        return []
    values = [(name, float(v[row])) for name, v in params.items()]
    if all(np.isnan(v) for _, v in values):
        return ["input as stored"]
    items = [f"{name}={value:.3g}" for name, value in values]
    return [" ".join(items[j:j + PER_LINE]) for j in range(0, len(items), PER_LINE)]


def _common(low_d, high_d, o: PreviewOptions) -> list[str]:
    return [f"input shown: {low_d.describe()}", f"target shown: {high_d.describe()}", resampling(o.tile_height)]


def _size(ds: ShardDataset, w: int, h: int) -> str:
    s = ds.members.scale
    return f"{w}x{h}" if s == 1 else f"{w}x{h} (target {w * s}x{h * s})"


def _sensor(ds: ShardDataset, i: int):
    """(input levels, ratio, target levels) of sample i of a camera raw split; Nones for an image split."""
    rows = ds.sensor
    if rows is None:
        return None, None, None
    return (np.asarray(rows.levels[i]), float(rows.ratio[i]),
            None if rows.levels_high is None else np.asarray(rows.levels_high[i]))


def _orientation(code: int) -> str:
    bits = [name for bit, name in ((TRANSPOSE, "t"), (VFLIP, "v"), (HFLIP, "h")) if code & bit]
    return "orientation " + ("+".join(bits) if bits else "as stored")


def _hwc(t) -> np.ndarray:
    """An NxCxHxW CPU tensor (uint8 or uint16) as an NxHxWxC numpy array of the same type."""
    import torch

    t = t.permute(0, 2, 3, 1).contiguous().clone()  # its own memory: the loader's buffers go back when it closes
    if t.dtype == torch.uint16:  # numpy has no view of torch's uint16 in every torch version: its bits as int16
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()
