"""One training epoch of the reference loop (`train_one_epoch`) and the pieces of a step: autocast, the loss
scaler that skips non-finite steps, the warm-up + cosine learning rate, and the digest of the data consumed."""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ..batch import Normalize
from ..distributed import DistInfo, all_reduce_max, all_reduce_sum
from .config import TrainConfig
from .metrics import ssim
from .model import centre_frame
from .stop import StopSignal, Stopped
from .timing import DataWait


def resolve_amp(amp: str, device: torch.device) -> str:
    """`auto`: bf16 autocast on a GPU, none on a CPU (where bf16 autocast runs about 10x slower than float32)."""
    if amp != "auto":
        return amp
    return "bf16" if device.type == "cuda" else "none"


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


class Seen(NamedTuple):
    """The data an epoch consumed so far, in consumption order: the keys (a clip's frame keys as one line,
    `key_line`) and, with degraded inputs, the names of their parameters (`columns`) and each sample's values
    (`params`: float32 little-endian, a row of len(columns) per key, NaN for a sample that was not degraded)."""

    keys: list[str]
    columns: tuple[str, ...] = ()
    params: bytes = b""

    def then(self, later: "Seen") -> "Seen":
        """This part followed by `later` (an epoch resumed from a mid-epoch checkpoint)."""
        return Seen(self.keys + later.keys, self.columns or later.columns, self.params + later.params)

    def to_state(self) -> dict:
        """As a mid-epoch checkpoint keeps it."""
        return {"keys": self.keys, "params": {"columns": list(self.columns), "rows": self.params} if self.columns
                else None}

    @classmethod
    def from_state(cls, state: dict) -> "Seen":
        params = state.get("params")
        return cls(list(state["keys"])) if not params else cls(list(state["keys"]), tuple(params["columns"]),
                                                                params["rows"])


def parameters_of(batch) -> torch.Tensor | None:
    """The batch's drawn degradation parameters as one (N, columns) float32 tensor where the batch is (no host sync), or
    None when its inputs are the stored ones."""
    d = batch.degradation
    return None if d is None else torch.stack([v.float() for v in d.values()], dim=1)


def _on_host(log: list) -> list:
    """The log's parameter tables moved to the host in one copy (one synchronisation for the whole log)."""
    tables = [t for _, _, t in log if t is not None]
    if not tables:
        return [(step, keys, None) for step, keys, _ in log]
    host = torch.cat(tables).cpu().numpy()
    out, at = [], 0
    for step, keys, t in log:
        out.append((step, keys, None if t is None else host[at:at + len(t)]))
        at += 0 if t is None else len(t)
    return out


def gather_seen(log: list[tuple[int, list[str], torch.Tensor | None]], columns: tuple[str, ...],
                info: DistInfo) -> Seen | None:
    """On rank 0: what every rank consumed (`log`: (step, keys, parameter table) per batch), in (step, rank, row)
    order; None on the other ranks."""
    local = _on_host(log)
    if info.distributed:
        parts = [None] * info.world_size if info.is_main else None
        torch.distributed.gather_object((columns, local), parts, dst=0)
        if not info.is_main:
            return None
        columns = next((names for names, _ in parts if names), ())  # a rank with no batch left knows none
        rows = sorted(((step, rank, keys, t) for rank, (_, part) in enumerate(parts) for step, keys, t in part),
                      key=lambda row: row[:2])
    else:
        rows = [(step, 0, keys, t) for step, keys, t in local]
    keys = [k for _, _, ks, _ in rows for k in ks]
    if not columns or not rows:
        return Seen(keys)
    nan = np.float32(np.nan)
    table = np.concatenate([np.full((len(ks), len(columns)), nan, np.float32) if t is None else t
                            for _, _, ks, t in rows])
    return Seen(keys, columns, table.astype("<f4").tobytes())


def key_line(key: str | list[str]) -> str:
    """A sample's key as the digest hashes it; a clip's frame keys joined by spaces (a key never holds one)."""
    return key if isinstance(key, str) else " ".join(key)


def data_digest(keys: list[str] | list[list[str]], columns: tuple[str, ...] = (), params: bytes = b"") -> str:
    """sha256 of the keys consumed in an epoch, one per line in consumption order (a clip's line: its frames' keys,
    `key_line`); with degraded inputs followed by a line "degradation NAME,…" (`columns`) and each sample's (each
    clip's) parameter values in the same order (`params`: float32 little-endian, `Seen.params`). Two runs that saw
    the same data, degraded alike, in the same order have the same digest; without a degradation it is the digest of
    the keys alone."""
    h = hashlib.sha256("".join(key_line(k) + "\n" for k in keys).encode())
    if columns:
        h.update(("degradation " + ",".join(columns) + "\n").encode())
        h.update(params)
    return h.hexdigest()


def train_one_epoch(model, loader, optimizer, scheduler, scaler, norm: Normalize, cfg: TrainConfig,
                    info: DistInfo, epoch: int, on_step=None, resume: dict | None = None, checkpoint=None,
                    stop: StopSignal | None = None) -> dict:
    """One epoch (or the rest of one, from a mid-epoch checkpoint's `resume`); returns all-reduced mean loss,
    pairs/s, data-wait fraction, skipped steps, peak memory and the digest of the data consumed (keys, and the
    drawn parameters of --degrade). `checkpoint(step, loader_state, seen, sums)` is called every
    --save-every-steps steps (on every rank: it gathers; `seen` is a `Seen` on rank 0, None elsewhere), and before
    `Stopped` is raised when the ranks agree that `stop` was asked for (SIGTERM) before the epoch's last step."""
    model.train()
    loader.set_epoch(epoch)  # keeps the rest of this epoch when the loader was given a mid-epoch state
    dev = info.device
    before = resume["step"] if resume else 0
    # loss, steps, pairs, skipped so far in this epoch, all ranks together: rank 0 carries a checkpoint's totals
    totals = torch.tensor(resume["sums"] if resume and info.is_main else [0.0] * 4, dtype=torch.float64, device=dev)
    earlier = Seen.from_state(resume) if resume and info.is_main else Seen([])
    keys_log: list[tuple[int, list[str], torch.Tensor | None]] = []
    columns: tuple[str, ...] = ()  # the names of the degradation's parameters, from the first batch that has them
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
        x, y = norm.pair(batch)
        y = centre_frame(y)  # clips: the model predicts the centre frame's target
        with amp_context(cfg.amp, dev):
            out = model(x)
        out = out.float()
        loss = F.l1_loss(out, y)
        if cfg.ssim_weight:
            loss = loss + cfg.ssim_weight * (1 - ssim(out, y).mean())
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        # One path for every precision, public API only: `unscale_` finds non-finite gradients on the device and
        # `scaler.step` skips the update for them, inside the fused optimizer on a GPU (no host synchronisation per
        # step, so the CPU keeps running ahead and loading stays hidden; on a CPU the scaler checks on the host).
        # DDP has averaged the gradients, so all ranks skip together. Outside fp16 the scale stays 1.0
        # (`make_scaler`, and `update(1.0)` below): the scaler only skips. `bad` (the same non-finite gradients, seen
        # in their norm) counts the step as skipped and its loss as 0.
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
        # keys are host-side (reading batch.padded would sync every step); the parameters of degraded inputs stay
        # on the device until the log is gathered, and then go to the host in one copy
        if batch.degradation is not None and not columns:
            columns = tuple(batch.degradation)
        keys_log.append((before + step, [key_line(k) for k in batch.keys], parameters_of(batch)))
        if on_step:
            on_step(before + step + 1, before + n_steps)
        done = before + step + 1
        last = step + 1 >= n_steps  # (the epoch's end saves and checks for a stop itself)
        stopping = stop is not None and not last and stop.due(info, done) and stop.agreed(info)
        if checkpoint and (stopping or cfg.save_every_steps and done % cfg.save_every_steps == 0 and not last):
            sums = totals + torch.stack([loss_sum, loss_sum.new_tensor(steps), loss_sum.new_tensor(pairs),
                                         loss_sum.new_tensor(float(skipped))])
            all_reduce_sum(sums)
            seen = gather_seen(keys_log, columns, info)
            checkpoint(done, loader.state_dict(), None if seen is None else earlier.then(seen), sums.tolist())
        if stopping:
            raise Stopped(epoch, done, before + n_steps, saved=checkpoint is not None)
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
    seen = gather_seen(keys_log, columns, info)
    seen = None if seen is None else earlier.then(seen)
    return {"train_loss": float(epoch_totals[0]) / max(1.0, float(epoch_totals[1])),
            "pairs_per_s": float(sums[2]) / max(float(sums[4]) / info.world_size, 1e-9),
            "data_wait_frac": float(sums[3]) / info.world_size, "skipped_steps": int(epoch_totals[3]),
            "peak_gpu_mem_mb": float(peak[0]) / 2**20, "steps": before + n_steps,
            "data_digest": None if seen is None else data_digest(*seen),
            "data_samples": None if seen is None else len(seen.keys),
            "data_repeats": None if seen is None else len(seen.keys) - len(set(seen.keys))}


