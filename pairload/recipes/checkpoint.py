"""The run folder of the reference loop: checkpoints written atomically and checked when loaded, RNG states,
and the folder's own rules (a folder holding a run needs --resume or --overwrite; a resume tidies what a kill left)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from ..format.atomic import atomic_open, is_temp_of, write_bytes_atomic
from .model import ModelConfig

CHECKPOINT_VERSION = 1


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


def _read(path: Path):
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise ConfigError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {exc})") from None


def load_checkpoint(path: Path, model_cfg: ModelConfig) -> dict:
    if not path.is_file():
        raise ConfigError(f"--resume: no checkpoint at {path}; run without --resume first, or point --out at the run")
    state = _read(path)
    if state.get("version") != CHECKPOINT_VERSION:
        raise ConfigError(f"{path}: checkpoint version {state.get('version')!r}, expected {CHECKPOINT_VERSION}")
    if state.get("model_config") != model_cfg.to_dict():
        raise ConfigError(f"{path}: checkpoint of model {state.get('model_config')}, but this run builds "
                          f"{model_cfg.to_dict()}; pass the same --width/--depth (and --clips), or a new --out")
    return state


def load_weights(path: Path, model_cfg: ModelConfig) -> dict:
    """--init-from: the model weights of another run's checkpoint, for the model this run builds."""
    if not path.is_file():
        raise ConfigError(f"--init-from {path}: no such file; expected a checkpoint of an earlier run (its last.pt "
                          "or best.pt)")
    state = _read(path)
    if not isinstance(state, dict) or "model" not in state or "model_config" not in state:
        raise ConfigError(f"--init-from {path}: expected a checkpoint of pairload's reference loop (last.pt or "
                          "best.pt), found no model weights and model config in it")
    if state["model_config"] != model_cfg.to_dict():
        raise ConfigError(f"--init-from {path}: weights of model {state['model_config']}, but this run builds "
                          f"{model_cfg.to_dict()}; pass the --width/--depth (and --clips) it was trained with, on data "
                          "of the same channels")
    return state["model"]


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
