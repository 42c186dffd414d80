"""The reference DDP + AMP training loop: `torchrun --nproc_per_node=N -m pairload.train ...` or one process.

Functions with explicit parameters (`train_one_epoch`, `evaluate`, `save_checkpoint`); distributed facts come
from `pairload.distributed.dist_info`; images stay uint8 until `pairload.Normalize` on the device. Validation
uses whole test images through a random-access loader with last_batch='partial', so every test pair is
counted exactly once across ranks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import re
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..format.atomic import atomic_open, is_temp_of, write_bytes_atomic
from ..batch import Normalize
from ..distributed import (DistInfo, all_reduce_max, all_reduce_sum, cleanup, dist_info, init_distributed,
                          lost_ranks_error)
from ..errors import ConfigError, PairloadError, in_cli_terms
from ..loaders import KINDS, make_loader
from .metrics import psnr, ssim
from ..format.schema import split_index
from ..read.shards import read_manifest_at
from .model import EnhanceUNet, ModelConfig
from .timing import DataWait

CHECKPOINT_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    loader: str = "ram"
    shards: str | None = None
    raw: str | None = None
    out: str | None = None
    epochs: int = 10
    batch_size: int = 32
    crop: int = 256
    lr: float = 5e-4
    weight_decay: float = 1e-4
    warmup_steps: int = 100
    amp: str = "auto"  # bf16 on a GPU, none on a CPU (autocast there is ~10x slower than float32)
    width: int = 32
    depth: int = 3
    sync_bn: bool = False
    compile: bool = False
    ssim_weight: float = 0.0
    clip_grad: float = 0.0  # 0: no clipping (the norm is still checked for non-finite values)
    workers: int = 4
    seed: int = 0
    device: str = "auto"
    val_batch_size: int = 8
    resume: bool = False
    stop_after_epoch: int | None = None
    max_steps: int | None = None  # per epoch; for benchmarks
    save_every_steps: int = 0  # also write last.pt every N steps, mid-epoch (0: at epoch ends only)
    image_count: int = 3
    dist_timeout: float = 600.0  # seconds a collective waits for the other ranks before the job stops with an error
    train_split: str = "train"
    val_split: str = "test"  # "none": no validation
    overwrite: bool = False
    crop_schedule: str | None = None  # "step:crop:batch,…": progressive crops and per-rank batches by global step
    repeats: int = 1
    mix: str | None = None  # "name=FOLDER:weight,…": train on a weighted mix of shard folders
    epoch_size: int | None = None
    cache_dir: str | None = None  # where shards from URLs are cached on this node (default: ~/.cache/pairload)
    cache_limit: str | None = None  # bytes of shards the cache keeps ("500GB"; default: the disk's free space)

    def __post_init__(self) -> None:
        if self.loader not in KINDS:
            raise ConfigError(f"--loader {self.loader}: expected one of {', '.join(KINDS)}")
        if self.loader == "dali-file" and not self.raw:
            raise ConfigError("--loader dali-file reads the raw image folders: pass --raw RAW_DIR")
        if self.loader != "dali-file" and not self.shards:
            raise ConfigError(f"--loader {self.loader} reads packed shards: pass --shards SHARDS_DIR (pairload pack)")
        if self.amp not in ("auto", "bf16", "fp16", "none"):
            raise ConfigError(f"--amp {self.amp}: expected auto, bf16, fp16 or none")
        if self.epochs < 1 or self.batch_size < 1:
            raise ConfigError("--epochs and --batch-size must be at least 1")
        if self.resume and not self.out:
            raise ConfigError("--resume needs --out RUN_DIR (where last.pt is)")
        if self.resume and self.overwrite:
            raise ConfigError("--resume and --overwrite contradict each other: --resume continues the run in --out, "
                              "--overwrite starts it again; pick one")
        if self.save_every_steps < 0:
            raise ConfigError(f"--save-every-steps {self.save_every_steps}: expected 0 (epoch ends only) or more")
        if self.dist_timeout <= 0:
            raise ConfigError(f"--dist-timeout {self.dist_timeout}: expected a positive number of seconds")
        if self.mix is not None:
            if self.loader == "dali-file":
                raise ConfigError("--mix reads shard folders: use --loader ram, wds or dali-external, not dali-file")
            mix_sources(self.mix)  # a malformed --mix is refused before anything starts

    def remote_options(self) -> dict:
        """Where the loaders cache shards read from URLs (nothing for dali-file)."""
        from ..remote.cache import parse_bytes
        from ..remote.urls import default_cache_dir

        if self.loader == "dali-file":
            return {}
        return {"cache_dir": self.cache_dir or default_cache_dir(), "cache_limit": parse_bytes(self.cache_limit)}

    def plan_options(self) -> dict:
        """The training loader's planning: crop and batch (or their schedule), repeats, the mix."""
        opts: dict = {"repeats": self.repeats, "epoch_size": self.epoch_size}
        if self.crop_schedule:
            opts["schedule"] = self.crop_schedule
        else:
            opts.update(batch_size=self.batch_size, crop=self.crop)
        if self.mix:
            opts["weights"] = {name: w for name, (_, w) in mix_sources(self.mix).items()}
        return opts


def mix_sources(spec: str) -> dict[str, tuple[str, float]]:
    """--mix "real=shards/lol:1,synth=shards/synth:3" -> {name: (folder, weight)}."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, eq, rest = part.partition("=")
        folder, colon, weight = rest.rpartition(":")
        try:
            if not (eq and colon and name and folder):
                raise ValueError
            out[name] = (folder, float(weight))
        except ValueError:
            raise ConfigError(f"--mix {part!r}: expected NAME=FOLDER:WEIGHT items separated by commas, e.g. "
                              "real=shards/lol:1,synth=shards/synth:3") from None
    if not out:
        raise ConfigError("--mix is empty: expected NAME=FOLDER:WEIGHT items, e.g. real=shards/lol:1,synth=shards/synth:3")
    return out


# ------------------------------------------------------------------ pieces

def amp_context(amp: str, device: torch.device):
    if amp == "none":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def make_scaler(amp: str, device: torch.device) -> torch.amp.GradScaler:
    """fp16: the usual dynamic loss scale. Otherwise a scale fixed at 1.0 (`update(1.0)` every step), kept for its
    on-device skip of steps with non-finite gradients."""
    if amp == "fp16":
        return torch.amp.GradScaler(device.type)
    return torch.amp.GradScaler(device.type, init_scale=1.0, growth_interval=2**30)


def lr_lambda(warmup: int, total: int):
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return f


def build_train_loader(cfg: TrainConfig, info: DistInfo):
    """One call for every kind: the shards (or the --mix of several), or the raw folders for dali-file."""
    source = cfg.raw if cfg.loader == "dali-file" else cfg.shards
    if cfg.mix:
        source = {name: folder for name, (folder, _) in mix_sources(cfg.mix).items()}
    return make_loader(cfg.loader, source, split=cfg.train_split, seed=cfg.seed, rank=info.rank,
                       world_size=info.world_size, device=str(info.device), last_batch="drop",
                       num_workers=cfg.workers, **cfg.plan_options(), **cfg.remote_options())


def build_val_loader(cfg: TrainConfig, info: DistInfo):
    """Whole test images, each exactly once across ranks (last_batch='partial', no shuffling, no augmentation);
    None with --val-split none."""
    if cfg.val_split == "none":
        return None
    kind, source = ("ram", cfg.shards) if cfg.shards else ("dali-file", cfg.raw)
    common = dict(split=cfg.val_split, crop=None, rank=info.rank, world_size=info.world_size, device=str(info.device),
                  last_batch="partial", augment=False, shuffle=False)
    batch = cfg.val_batch_size
    if cfg.shards:
        common.update(cfg.remote_options())
        if len(np.unique(split_index(read_manifest_at(cfg.shards), cfg.val_split, cfg.shards).hw, axis=0)) > 1:
            batch = 1  # whole test images of several sizes (real FiveK, SICE, LSRW test sets) go one at a time
    return make_loader(kind, source, batch_size=batch, **common)


def gather_keys(keys_log: list[tuple[int, list[str]]], info: DistInfo) -> list[str] | None:
    """On rank 0: the keys every rank consumed, in (step, rank, row) order; None on the other ranks."""
    if not info.distributed:
        return [k for _, keys in keys_log for k in keys]
    parts = [None] * info.world_size if info.is_main else None
    torch.distributed.gather_object(keys_log, parts, dst=0)
    if not info.is_main:
        return None
    rows = sorted((step, rank, keys) for rank, log in enumerate(parts) for step, keys in log)
    return [k for _, _, keys in rows for k in keys]


def data_digest(keys: list[str]) -> str:
    """sha256 of the keys consumed in an epoch, one per line in consumption order: two runs that saw the same data
    in the same order have the same digest."""
    import hashlib

    return hashlib.sha256("".join(k + "\n" for k in keys).encode()).hexdigest()


def train_one_epoch(model, loader, optimizer, scheduler, scaler, norm: Normalize, cfg: TrainConfig,
                    info: DistInfo, epoch: int, on_step=None, resume: dict | None = None, checkpoint=None) -> dict:
    """One epoch (or the rest of one, from a mid-epoch checkpoint's `resume`); returns all-reduced mean loss,
    pairs/s, data-wait fraction, skipped steps, peak memory and the digest of the data consumed. `checkpoint(step,
    loader_state, keys, sums)` is called every --save-every-steps steps (on every rank: it gathers)."""
    model.train()
    loader.set_epoch(epoch)  # keeps the rest of this epoch when the loader was given a mid-epoch state
    dev = info.device
    before = resume["step"] if resume else 0
    # loss, steps, pairs, skipped so far in this epoch, all ranks together: rank 0 carries a checkpoint's totals
    totals = torch.tensor(resume["sums"] if resume and info.is_main else [0.0] * 4, dtype=torch.float64, device=dev)
    earlier_keys = list(resume["keys"]) if resume and info.is_main else []
    keys_log: list[tuple[int, list[str]]] = []
    loss_sum = torch.zeros((), device=dev, dtype=torch.float64)
    steps = pairs = skipped = 0
    meter = DataWait(dev)
    t0 = time.perf_counter()
    it = iter(loader)
    n_steps = len(loader) if cfg.max_steps is None else min(len(loader), max(0, cfg.max_steps - before))
    for step in range(n_steps):
        meter.before_next()
        batch = next(it)
        meter.got_batch()
        x, y = norm(batch.low), norm(batch.high)
        with amp_context(cfg.amp, dev):
            out = model(x)
        out = out.float()
        loss = F.l1_loss(out, y)
        if cfg.ssim_weight:
            loss = loss + cfg.ssim_weight * (1 - ssim(out, y).mean())
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        # One path for every precision, public API only: the scaler finds non-finite gradients on the device and a
        # fused optimizer skips the update there (no host synchronisation per step, so the CPU keeps running ahead
        # and loading stays hidden). DDP has averaged the gradients, so all ranks skip together. Outside fp16 the
        # scale stays 1.0 (`skip_guard`).
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad or float("inf"))
        bad = (~torch.isfinite(grad_norm)).float()
        scaler.step(optimizer)
        scaler.update(None if cfg.amp == "fp16" else 1.0)
        skipped = skipped + bad
        loss = torch.where(bad > 0, torch.zeros_like(loss), loss)
        scheduler.step()
        meter.step_done()
        loss_sum += loss.detach()
        steps += 1
        pairs += len(batch)
        keys_log.append((before + step, batch.keys))  # host-side only: reading batch.padded would sync every step
        if on_step:
            on_step(before + step + 1, before + n_steps)
        done = before + step + 1
        if checkpoint and cfg.save_every_steps and done % cfg.save_every_steps == 0 and step + 1 < n_steps:
            sums = totals + torch.stack([loss_sum, loss_sum.new_tensor(steps), loss_sum.new_tensor(pairs),
                                         loss_sum.new_tensor(float(skipped))])
            all_reduce_sum(sums)
            keys = gather_keys(keys_log, info)
            checkpoint(done, loader.state_dict(), None if keys is None else earlier_keys + keys, sums.tolist())
    del it
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elapsed = time.perf_counter() - t0
    # this run's part (throughput, data wait) and the whole epoch's totals (loss, skipped steps), all ranks
    sums = torch.tensor([float(loss_sum), steps, pairs, meter.fraction(), elapsed, float(skipped)],
                        dtype=torch.float64, device=dev)
    all_reduce_sum(sums)
    epoch_totals = totals + torch.stack([loss_sum, loss_sum.new_tensor(steps), loss_sum.new_tensor(pairs),
                                         loss_sum.new_tensor(float(skipped))])
    all_reduce_sum(epoch_totals)
    peak = torch.tensor([torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0], dtype=torch.float64,
                        device=dev)
    all_reduce_max(peak)
    keys = gather_keys(keys_log, info)
    seen = None if keys is None else earlier_keys + keys
    return {"train_loss": float(epoch_totals[0]) / max(1.0, float(epoch_totals[1])),
            "pairs_per_s": float(sums[2]) / max(float(sums[4]) / info.world_size, 1e-9),
            "data_wait_frac": float(sums[3]) / info.world_size, "skipped_steps": int(epoch_totals[3]),
            "peak_gpu_mem_mb": float(peak[0]) / 2**20, "steps": before + n_steps,
            "data_digest": None if seen is None else data_digest(seen),
            "data_samples": None if seen is None else len(seen),
            "data_repeats": None if seen is None else len(seen) - len(set(seen))}


@torch.no_grad()
def evaluate(model, loader, norm: Normalize, cfg: TrainConfig, info: DistInfo, keep_images: int = 0) -> dict:
    """PSNR/SSIM over every test pair exactly once across ranks; padded rows are never counted."""
    model.eval()
    dev = info.device
    sums = torch.zeros(5, dtype=torch.float64, device=dev)  # psnr, ssim, count, and the input's psnr, ssim
    images = []
    for batch in loader:
        x, y = norm(batch.low), norm(batch.high)
        with amp_context(cfg.amp, dev):
            out = model(x)
        out = out.float().clamp(0, 1)
        valid = batch.valid.to(dev)
        sums[0] += psnr(out, y)[valid].sum().double()
        sums[1] += ssim(out, y)[valid].sum().double()
        sums[2] += valid.sum()
        sums[3] += psnr(x.float(), y)[valid].sum().double()  # the do-nothing baseline: is training helping?
        sums[4] += ssim(x.float(), y)[valid].sum().double()
        if len(images) < keep_images:
            for j in range(min(keep_images - len(images), len(batch))):
                images.append(torch.cat([x[j], out[j], y[j]], dim=2).cpu())
    all_reduce_sum(sums)
    n = max(1.0, float(sums[2]))
    return {"val_psnr": float(sums[0]) / n, "val_ssim": float(sums[1]) / n, "val_samples": int(sums[2]),
            "val_psnr_input": float(sums[3]) / n, "val_ssim_input": float(sums[4]) / n, "images": images}


def save_triplets(images: list[torch.Tensor], path: Path) -> None:
    """low | output | high, one row per test image, as a PNG written atomically."""
    import cv2

    if not images:
        return
    width = max(im.shape[2] for im in images)  # test images may differ in size: pad each row on the right
    rows = [F.pad(im, (0, width - im.shape[2])) for im in images]
    grid = torch.cat(rows, dim=1).clamp(0, 1).mul(255).round().byte().permute(1, 2, 0).numpy()
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(grid[..., ::-1]))
    write_bytes_atomic(path, buf.tobytes(), fsync=False)


def save_checkpoint(path: Path, state: dict) -> None:
    """torch.save under a temporary name in the same folder, fsync, rename: never a half-written checkpoint."""
    with atomic_open(path, "wb") as fh:
        torch.save(state, fh)


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])


def load_checkpoint(path: Path, model_cfg: ModelConfig) -> dict:
    if not path.is_file():
        raise ConfigError(f"--resume: no checkpoint at {path}; run without --resume first, or point --out at the run")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ConfigError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {exc})") from None
    if state.get("version") != CHECKPOINT_VERSION:
        raise ConfigError(f"{path}: checkpoint version {state.get('version')!r}, expected {CHECKPOINT_VERSION}")
    if state.get("model_config") != model_cfg.to_dict():
        raise ConfigError(f"{path}: checkpoint of model {state.get('model_config')}, but this run builds "
                          f"{model_cfg.to_dict()}; pass the same --width/--depth, or a new --out")
    return state


def dataset_fingerprint(cfg: TrainConfig) -> str:
    """A digest of the training data: the train split's shard hashes, or the raw pairs' paths (dali-file)."""
    import hashlib

    h = hashlib.sha256()
    if cfg.loader != "dali-file":
        folders = [folder for folder, _ in mix_sources(cfg.mix).values()] if cfg.mix else [cfg.shards]
        for folder in folders:
            for sh in read_manifest_at(folder)["splits"].get(cfg.train_split, {}).get("shards", []):
                h.update(sh["sha256"].encode())
    else:
        from ..raw.discover import find_pairs

        for p in find_pairs(cfg.raw).pairs:
            h.update(f"{p.split}\t{p.low_rel}\t{p.high_rel}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


@contextlib.contextmanager
def epoch_progress(is_main: bool, epoch: int, epochs: int):
    """A progress bar for the epoch on rank 0 when stderr is a terminal (None otherwise: logs stay clean)."""
    if not (is_main and sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn(f"epoch {epoch + 1}/{epochs}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("train", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


RUN_FILES = ("config.json", "metrics.jsonl", "last.pt", "best.pt")


def prepare_run_dir(out: Path, overwrite: bool, is_main: bool) -> None:
    """A run folder holding an earlier run is refused (its checkpoints would be mixed with this run's) unless
    --overwrite, which removes that run's files, and only those."""
    held = [n for n in RUN_FILES if (out / n).exists()] if out.is_dir() else []
    if not held:
        return
    if not overwrite:
        raise ConfigError(f"--out {out} already holds a run ({', '.join(held)}); pass --resume to continue it, "
                          "--overwrite to start it again, or choose another --out")
    if is_main:
        for p in list(out.iterdir()):
            if p.name in RUN_FILES or re.fullmatch(r"val-epoch\d+\.png", p.name):
                p.unlink()


def tidy_run_dir(out: Path, epoch: int) -> None:
    """Before resuming at `epoch`: drop metrics rows of later epochs (written before a checkpoint that never
    landed) and temporary files of a checkpoint write that was killed."""
    for p in out.iterdir():
        if any(is_temp_of(p.name, name) for name in RUN_FILES):
            p.unlink(missing_ok=True)
    metrics = out / "metrics.jsonl"
    if metrics.is_file():
        rows = [line for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
        keep = [line for line in rows if json.loads(line).get("epoch", 0) <= epoch]
        if keep != rows:
            write_bytes_atomic(metrics, "".join(line + "\n" for line in keep).encode())


# ------------------------------------------------------------------ main

def resolve_amp(amp: str, device: torch.device) -> str:
    """`auto`: bf16 autocast on a GPU, none on a CPU (where bf16 autocast runs about 10x slower than float32)."""
    if amp != "auto":
        return amp
    return "bf16" if device.type == "cuda" else "none"


def rate(x: float) -> str:
    """A throughput for the log: three significant digits below 100, whole numbers above."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def run(cfg: TrainConfig, info: DistInfo, log=print) -> list[dict]:
    """Train; returns the per-epoch metrics (rank 0 also writes them to RUN_DIR/metrics.jsonl)."""
    cfg = replace(cfg, amp=resolve_amp(cfg.amp, info.device))
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    dev = info.device
    if cfg.loader.startswith("dali"):
        import pairload.dali  # noqa: F401 - raises MissingDependencyError with install advice
    model_cfg = ModelConfig(width=cfg.width, depth=cfg.depth)
    model = EnhanceUNet(model_cfg)
    if cfg.sync_bn and info.distributed:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(dev)
    channels_last = dev.type == "cuda"
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    norm = Normalize(channels_last=channels_last).to(dev)
    train_loader = build_train_loader(cfg, info)
    val_loader = build_val_loader(cfg, info)
    # the schedule is sized from the plan of every epoch (a crop/batch schedule changes the step count per epoch)
    per_epoch = [train_loader.batches_in(e) if cfg.max_steps is None else min(train_loader.batches_in(e), cfg.max_steps)
                 for e in range(cfg.epochs)]
    steps_per_epoch = per_epoch[0] if per_epoch else 0
    fused = {"fused": True} if dev.type == "cuda" else {}
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, **fused)
    total_steps = sum(per_epoch)
    warmup = min(cfg.warmup_steps, max(1, total_steps // 10))  # a short run must still reach its learning rate
    if warmup < cfg.warmup_steps and info.is_main:
        log(f"warm-up shortened from {cfg.warmup_steps} to {warmup} steps (a tenth of this run's {total_steps} steps)")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(warmup, total_steps))
    scaler = make_scaler(cfg.amp, dev)
    out = Path(cfg.out) if cfg.out else None
    if out is None and info.is_main:
        log("note: no --out, so no checkpoint, metrics or pictures are written")
    elif not cfg.resume:
        prepare_run_dir(out, cfg.overwrite, info.is_main)
    data_id = dataset_fingerprint(cfg)
    start_epoch, best, mid = 0, -math.inf, None
    if cfg.resume:
        state = load_checkpoint(out / "last.pt", model_cfg)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if state["scaler"]:  # empty from runs before the skip guard: its scale (1.0) is the default
            scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng"])
        start_epoch, best = state["epoch"], state["best_psnr"]
        if state.get("data") is not None and state["data"] != data_id:
            source = state.get("train_config", {}).get("shards") or state.get("train_config", {}).get("raw")
            raise ConfigError(f"--resume: {out / 'last.pt'} was trained on other data ({source}) than this run's "
                              f"({cfg.shards or cfg.raw}); resume with the same data, or start a new --out")
        mid = state.get("mid_epoch")
        if mid:  # the rest of the interrupted epoch, dealt over this run's ranks
            train_loader.load_state_dict(mid["loader"])
            if info.is_main:
                log(f"resuming epoch {start_epoch + 1} after step {mid['step']} (saved with "
                    f"{mid['loader']['world_size']} ranks, now {info.world_size})")
        if info.is_main:
            tidy_run_dir(out, start_epoch)
        if start_epoch >= cfg.epochs:
            log(f"checkpoint is at epoch {start_epoch}, which is already --epochs {cfg.epochs}: nothing to do")
    net = model
    if info.distributed:
        # the graph is the same every step: static_graph lets DDP skip the per-step search for unused parameters
        # and overlap all-reduces from the first bucket; gradient_as_bucket_view saves a copy of every gradient
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None,
                                                        static_graph=True, gradient_as_bucket_view=True)
    if cfg.compile:
        net = torch.compile(net)
    if out and info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(out / "config.json", (json.dumps({**asdict(cfg), "world_size": info.world_size,
                                                             "device": str(dev), "steps_per_epoch": steps_per_epoch,
                                                             "model": model_cfg.to_dict(), "data": data_id},
                                                            indent=2) + "\n").encode())
    def state_at(epoch_done: int, mid_epoch: dict | None = None) -> dict:
        return {"version": CHECKPOINT_VERSION, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "epoch": epoch_done,
                "best_psnr": best, "model_config": model_cfg.to_dict(), "rng": rng_state(),
                "train_config": asdict(cfg), "data": data_id, "mid_epoch": mid_epoch}

    history = []
    for epoch in range(start_epoch, cfg.epochs):
        def checkpoint(step: int, loader_state: dict, keys: list[str] | None, sums: list[float], epoch=epoch) -> None:
            if out and info.is_main:
                save_checkpoint(out / "last.pt", state_at(epoch, {"step": step, "loader": loader_state,
                                                                  "keys": keys, "sums": sums}))

        with epoch_progress(info.is_main, epoch, cfg.epochs) as on_step:
            stats = train_one_epoch(net, train_loader, optimizer, scheduler, scaler, norm, cfg, info, epoch, on_step,
                                    resume=mid if epoch == start_epoch else None, checkpoint=checkpoint)
        val = {} if val_loader is None else evaluate(model, val_loader, norm, cfg, info,
                                                     keep_images=cfg.image_count if info.is_main else 0)
        images = val.pop("images", [])
        row = {"epoch": epoch + 1, "train_loss": stats["train_loss"], **val, "pairs_per_s": stats["pairs_per_s"],
               "data_wait_frac": stats["data_wait_frac"], "world_size": info.world_size,
               "lr": scheduler.get_last_lr()[0], "skipped_steps": stats["skipped_steps"],
               "peak_gpu_mem_mb": stats["peak_gpu_mem_mb"], "steps": stats["steps"], "loader": cfg.loader,
               "data_digest": stats["data_digest"], "data_samples": stats["data_samples"],
               "data_repeats": stats["data_repeats"]}
        history.append(row)
        if info.is_main:
            log(f"epoch {epoch + 1}/{cfg.epochs}: loss {row['train_loss']:.4f}  "
                + (f"val PSNR {row['val_psnr']:.2f} dB SSIM {row['val_ssim']:.4f} on {row['val_samples']} pairs "
                   f"(input: {row['val_psnr_input']:.2f} dB, {row['val_ssim_input']:.4f})  " if val else "")
                + f"{rate(row['pairs_per_s'])} pairs/s  data wait {row['data_wait_frac']:.3f}"
                + (f"  skipped {row['skipped_steps']} non-finite steps" if row["skipped_steps"] else ""))
            if out:
                with open(out / "metrics.jsonl", "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row) + "\n")
                save_triplets(images, out / f"val-epoch{epoch + 1:03d}.png")
                score = row.get("val_psnr", -row["train_loss"])  # without validation, the lowest training loss
                best_now = score > best
                best = max(best, score)
                state = state_at(epoch + 1)
                save_checkpoint(out / "last.pt", state)
                if best_now:
                    save_checkpoint(out / "best.pt", state)
        if cfg.stop_after_epoch is not None and epoch + 1 >= cfg.stop_after_epoch:
            break
    return history


HELP = {
    "loader": "ram | wds | dali-external | dali-file",
    "shards": "folder written by `pairload pack` (all loaders but dali-file)",
    "raw": "raw image folder (dali-file; also what `pairload pack` read)",
    "out": "run folder: config.json, metrics.jsonl, last.pt/best.pt, validation pictures",
    "epochs": "total epochs (with --resume: the new total)",
    "batch_size": "pairs per step on each rank",
    "crop": "training crop, pixels",
    "lr": "peak learning rate (AdamW); not scaled with the number of ranks",
    "weight_decay": "AdamW weight decay",
    "warmup_steps": "linear warm-up steps, capped at a tenth of the run; then cosine decay to 0",
    "amp": "auto (bf16 on a GPU, none on a CPU) | bf16 | fp16 | none",
    "width": "model channels at full resolution",
    "depth": "model levels (inputs are padded to a multiple of 2**depth inside the model)",
    "sync_bn": "synchronise batch-norm statistics across ranks",
    "compile": "torch.compile the model",
    "ssim_weight": "loss = L1 + w * (1 - SSIM)",
    "clip_grad": "clip the gradient norm (0: no clipping; non-finite steps are skipped either way)",
    "workers": "loader workers (ram, wds) or threads (DALI) per rank",
    "seed": "seed of the planner (order, crops, flips) and of the model",
    "device": "auto | cpu | cuda",
    "val_batch_size": "validation batch (whole images; 1 when the test images differ in size)",
    "resume": "continue the run in --out from last.pt",
    "stop_after_epoch": "stop after this epoch (the schedule still spans --epochs)",
    "max_steps": "at most this many steps per epoch (benchmarks)",
    "save_every_steps": "also write last.pt every N steps, mid-epoch, with the loaders' state (0: epoch ends only)",
    "image_count": "validation triplets (low | output | high) saved per epoch",
    "dist_timeout": "seconds a collective waits for the other ranks before the job stops with an error",
    "train_split": "split to train on",
    "val_split": "split to validate on ('none': no validation)",
    "overwrite": "replace a run already in --out",
    "crop_schedule": "progressive training, STEP:CROP:BATCH,… from step 0 (e.g. 0:128:8,92000:160:5): replaces "
                     "--crop/--batch-size; the learning rate follows its own per-step schedule and is not rescaled "
                     "when the batch shrinks",
    "repeats": "passes over the training split per epoch, each with fresh crops (tiny sets such as LOL)",
    "mix": "train on a weighted mix of shard folders, NAME=FOLDER:WEIGHT,… (validation stays on --shards)",
    "epoch_size": "samples per epoch drawn from the --mix (default: all of its samples)",
    "cache_dir": "node-local folder for shards read from a URL (--shards s3://…, https://…), shared by the node's "
                 "ranks (default: ~/.cache/pairload)",
    "cache_limit": "bytes of shards the cache keeps, e.g. 500GB (default: the disk's free space); ram needs the "
                   "split whole, wds streams within it",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """A usage error in one line that names the command the user typed (argparse prints the whole usage)."""
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def parse_args(argv: list[str] | None = None, prog: str = "python -m pairload.train") -> TrainConfig:
    ap = _Parser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = TrainConfig(shards="x")
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name) if f.name != "shards" else None
        text = HELP[f.name]
        if isinstance(default, bool):
            ap.add_argument(flag, action="store_true", default=default, help=text)
        else:
            kind = {"int": int, "float": float}.get(type(default).__name__, str)
            if f.name in ("stop_after_epoch", "max_steps", "epoch_size"):  # None by default, integers when given
                kind = int
            ap.add_argument(flag, type=kind, default=default, help=f"{text} (default: %(default)s)")
    ns = ap.parse_args(argv)
    return TrainConfig(**vars(ns))


def main(argv: list[str] | None = None, prog: str = "python -m pairload.train") -> int:
    try:
        cfg = parse_args(argv, prog)
        info = dist_info(cfg.device)
        init_distributed(info, timeout_s=cfg.dist_timeout)
        try:
            run(cfg, info)
        except BaseException as exc:
            cleanup(finished=False)
            lost = lost_ranks_error(exc, info, cfg.dist_timeout)
            if lost is not None:
                raise lost from None
            raise
        cleanup()
    except PairloadError as exc:
        sys.stderr.write(f"error: {in_cli_terms(str(exc)) if isinstance(exc, ConfigError) else exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
