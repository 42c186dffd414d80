"""The reference loop's data: its training and validation loaders and the fingerprint of its training data, from
shard folders or URLs opened once per process (a URL's manifest is fetched once, whatever reads it)."""

from __future__ import annotations

import hashlib
import threading

import numpy as np

from ..audit.overlap import refuse_overlap
from ..distributed import DistInfo
from ..evaluate.loader import whole_image_loader
from ..evaluate.metrics import WINDOW
from ..errors import ConfigError
from ..format import schema
from ..format.members import DEFAULT, Members, members_of
from ..format.sensor import has_sensor
from ..kinds import RAW, SHARDS
from ..loaders import make_loader
from ..read.shards import ShardDataset, ShardMix, open_shards, read_manifest_at
from ..remote.cache import ShardCache
from ..remote.urls import is_url, join
from ..degrade.spec import suggested_model
from .config import TrainConfig, mix_sources


class ManifestOnce(ShardCache):
    """The node's shard cache, answering a repeated read of a small object (a manifest) from memory: the loop's
    fingerprint, training and validation datasets all read a URL's manifest, which is fetched once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._small: dict[str, bytes] = {}
        self._small_lock = threading.Lock()

    def read_small(self, url: str) -> bytes:
        with self._small_lock:
            if url not in self._small:
                self._small[url] = super().read_small(url)
            return self._small[url]


class TrainData:
    """The shard folders of one run. Local folders go to the loaders as paths; URLs are opened here, through one
    `ManifestOnce` cache shared by the training and validation loaders."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self._cache: ManifestOnce | None = None

    @property
    def cache(self) -> ManifestOnce:
        if self._cache is None:
            opts = self.cfg.remote_options()
            self._cache = ManifestOnce(opts["cache_dir"], opts["cache_limit"], storage_options=opts["storage_options"])
        return self._cache

    def manifest(self, folder: str) -> dict:
        if not is_url(folder):
            return read_manifest_at(folder)
        where = join(folder.rstrip("/"), schema.MANIFEST)
        return schema.parse_manifest(self.cache.read_small(where), where)

    def open(self, folder: str, split: str):
        """A URL's split as a dataset on the shared cache (what `open_shards` would make, checked the same way);
        a local folder stays a path."""
        if not is_url(folder):
            return folder
        ds = ShardDataset(folder, split, cache=self.cache)
        ds.index.encoding.require_for(ds.where, split, "reading it")
        return ds

    def train_source(self):
        cfg = self.cfg
        if cfg.kind.reads == RAW:
            return cfg.raw
        if not cfg.mix:
            return self.open(cfg.shards, cfg.train_split)
        folders = {name: folder for name, (folder, _) in mix_sources(cfg.mix).items()}
        if not any(is_url(folder) for folder in folders.values()):
            return folders
        return ShardMix({name: self.open(folder, cfg.train_split) if is_url(folder)
                         else open_shards(folder, cfg.train_split) for name, folder in folders.items()})

    def members(self) -> tuple[Members, bool]:
        """The train split's members (`format.members`) and whether it is camera raw (its pairs carry ratios and
        levels); image folders (a kind that reads them: dali-file) hold uint8 RGB."""
        cfg = self.cfg
        if cfg.kind.reads == RAW:
            return DEFAULT, False
        folder = next(iter(cfg.folders()))
        entry = self.manifest(folder)["splits"].get(cfg.train_split)
        if entry is None:
            return DEFAULT, False  # the loader names the missing split
        return members_of(entry, folder, cfg.train_split), has_sensor(entry)

    def fingerprint(self) -> str:
        """A digest of the training data: the train split's shard hashes, or the raw pairs' paths (a kind that
        reads the image folders: dali-file), the --degrade that makes its inputs and the --clips it is cut in."""
        cfg = self.cfg
        h = hashlib.sha256()
        if cfg.kind.reads == SHARDS:
            for folder in cfg.folders():
                for sh in self.manifest(folder)["splits"].get(cfg.train_split, {}).get("shards", []):
                    h.update(sh["sha256"].encode())
        else:
            from ..folders.discover import find_pairs

            for p in find_pairs(cfg.raw).pairs:
                h.update(f"{p.split}\t{p.low_rel}\t{p.high_rel}\n".encode("utf-8", "surrogateescape"))
        if cfg.degrade:  # absent without one: the digests of runs on the stored pairs are as they were
            h.update(f"degrade {cfg.degrade} {','.join(cfg.degraded_sources())}\n".encode())
        if cfg.clips:  # absent without clips, likewise
            h.update(f"clips {cfg.clips}\n".encode())
        return h.hexdigest()


def build_train_loader(cfg: TrainConfig, info: DistInfo, data: TrainData | None = None):
    """One call for every kind: the shards (or the --mix of several), or the image folders for a kind that reads
    them (dali-file)."""
    data = data or TrainData(cfg)
    check_data(cfg, data)
    return make_loader(cfg.loader, data.train_source(), split=cfg.train_split, seed=cfg.seed, rank=info.rank,
                       world_size=info.world_size, device=str(info.device), last_batch="drop",
                       num_workers=cfg.workers, **cfg.plan_options(),
                       **(cfg.remote_options() if cfg.kind.reads == SHARDS else {}))


def check_data(cfg: TrainConfig, data: TrainData) -> None:
    """What the manifests can refuse before any loader is built (a ram loader over a large split takes a while):
    training sources of targets only without a degradation, a --val-split without stored pairs."""
    check_degraded(cfg, data)
    trains = all(cfg.train_split in data.manifest(folder)["splits"] for folder in cfg.folders())
    if cfg.shards and cfg.val_split != "none" and trains:  # a missing training split: the loader names it first
        check_val_split(cfg, data.manifest(cfg.shards))
        if not cfg.allow_overlap and cfg.kind.reads == SHARDS:
            refuse_overlap(data.train_source(), data.open(cfg.shards, cfg.val_split), split=cfg.train_split,
                           val_split=cfg.val_split, override="--allow-overlap", remote=cfg.remote_options())


def check_degraded(cfg: TrainConfig, data: TrainData) -> None:
    """Each training source that holds targets only has its inputs made by a degradation: --degrade, and
    --degrade-sources naming it when given (said with the flags; the loader would say it in make_loader's terms)."""
    if cfg.kind.reads != SHARDS:
        return
    sources = {name: folder for name, (folder, _) in mix_sources(cfg.mix).items()} if cfg.mix else {"": cfg.shards}
    named = cfg.degraded_sources()
    for name, folder in sources.items():
        if not _targets_only(data.manifest(folder), cfg.train_split) or cfg.degrade and (not named or name in named):
            continue
        what = f"--mix source {name!r} ({folder})" if name else folder
        if cfg.degrade:
            fix = f"add it to --degrade-sources: --degrade-sources {','.join((*named, name))}"
        else:
            ds = open_shards(data.open(folder, cfg.train_split), cfg.train_split)
            fix = f"add --degrade {suggested_model(ds.members, ds.sensor)} (docs/degrade.md)"
        raise ConfigError(f"{what}: split {cfg.train_split!r} holds targets only (packed with --targets-only), so its "
                          f"inputs must be made from them by a degradation; {fix}")


def build_val_loader(cfg: TrainConfig, info: DistInfo, data: TrainData | None = None):
    """Whole test images, each exactly once across ranks (last_batch='partial', no shuffling, no augmentation),
    --val-batch-size at a time, or one at a time when their sizes differ (`pairload.evaluate.whole_image_loader`;
    with --clips, clips of whole frames on the grid); None with --val-split none. A --crop-border that leaves a test
    image too small for SSIM is refused now, not after the first epoch."""
    if cfg.val_split == "none":
        return None
    data = data or TrainData(cfg)
    placement = dict(rank=info.rank, world_size=info.world_size, device=str(info.device))
    if not cfg.shards:  # a kind that reads the image folders (TrainConfig asks the others for --shards)
        return make_loader(cfg.loader, cfg.raw, split=cfg.val_split, batch_size=cfg.val_batch_size, crop=None,
                           last_batch="partial", augment=False, shuffle=False, **placement)
    check_val_split(cfg, data.manifest(cfg.shards))
    ds = open_shards(data.open(cfg.shards, cfg.val_split), cfg.val_split)  # its index, mapped once for both uses
    check_crop_border(cfg, ds)
    return whole_image_loader(ds, cfg.val_split, batch_size=cfg.val_batch_size, clips=cfg.clips, **placement,
                              **cfg.remote_options())


def check_val_split(cfg: TrainConfig, manifest: dict) -> None:
    """--val-split names a split of --shards with stored pairs: validation compares the model's output on the stored
    inputs with their targets, and a targets-only split has no inputs (validation never degrades)."""
    splits = sorted(manifest["splits"])
    pairs = [name for name in splits if not _targets_only(manifest, name)]
    if cfg.val_split in pairs:
        return
    if pairs == splits:
        advice = "validate on one of them with --val-split SPLIT, or train without validation with --val-split none"
    elif pairs:
        advice = (f"validate on a split with stored pairs with --val-split SPLIT ({', '.join(pairs)}), or train "
                  "without validation with --val-split none")
    else:
        advice = f"{cfg.shards} has no split with stored pairs: train without validation with --val-split none"
    if cfg.val_split in splits:
        problem = (f"split {cfg.val_split!r} of {cfg.shards} holds targets only (packed with --targets-only): there "
                   "are no stored inputs to validate on")
    else:
        listed = ", ".join(name + (" (targets only)" if name not in pairs else "") for name in splits)
        problem = f"{cfg.shards} has no split {cfg.val_split!r} (its splits: {listed})"
    raise ConfigError(f"--val-split {cfg.val_split}: {problem}; {advice}")


def _targets_only(manifest: dict, split: str) -> bool:
    return bool(manifest["splits"].get(split, {}).get(schema.TARGETS_ONLY, False))


def check_crop_border(cfg: TrainConfig, ds) -> None:
    """The targets of the test split (the inputs' size × the members' scale) must keep SSIM's 11×11 window after
    --crop-border."""
    scale = getattr(getattr(ds, "index", None), "members", DEFAULT).scale
    hw = ds.sizes * scale
    least = WINDOW + 2 * cfg.crop_border
    small = np.flatnonzero((hw < least).any(axis=1))
    if len(small):
        i = int(small[np.argmin(hw[small].min(axis=1))])
        raise ConfigError(f"--crop-border {cfg.crop_border}: test image {ds.keys[i]!r} is {hw[i, 1]}x{hw[i, 0]}, "
                          f"and SSIM needs at least {least}x{least} with that border; lower --crop-border (at most "
                          f"{max(0, (int(hw.min()) - WINDOW) // 2)})")
