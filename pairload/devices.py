"""The one place a device name becomes a `torch.device`: "auto", "cpu", "cuda" or "cuda:k"."""

from __future__ import annotations

import torch

from .errors import ConfigError


def resolve_device(spec: str | torch.device = "auto", *, local_rank: int | None = None) -> torch.device:
    """auto → CUDA when available, else CPU. A CUDA device without an index gets `local_rank` (one GPU per rank
    on a node), else the current device. Refused with a ConfigError: CUDA where there is none, an index beyond the
    visible GPUs, any other name."""
    spec = str(spec)
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(spec)
    except RuntimeError:
        raise ConfigError(f"device {spec!r}: expected auto, cpu, cuda or cuda:K") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ConfigError(f"device {spec!r}: expected auto, cpu, cuda or cuda:K")
    if not torch.cuda.is_available():
        raise ConfigError(f"device {spec!r} but CUDA is not available here; use cpu")
    count = torch.cuda.device_count()
    index = dev.index if dev.index is not None else (local_rank if local_rank is not None
                                                     else torch.cuda.current_device())
    if index >= count:
        raise ConfigError(f"device cuda:{index} but only {count} CUDA devices are visible"
                          + ("; start at most that many processes per node" if local_rank is not None else ""))
    return torch.device("cuda", index)
