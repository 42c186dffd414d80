"""The DALI side of a paired pipeline: the operators pairload adds to a graph (the exact flip warp and its
matrices, the fed inputs), the (low, high) nodes handed to users, and which pipeline a source iterates and how it
is made (`Binding`)."""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import nvidia.dali.fn as fn
import nvidia.dali.types as types
import torch
from nvidia.dali.pipeline import Pipeline

from ...dihedral import matrices
from ...errors import ConfigError

_SOURCE_ATTR = "_pairload_source"  # set on a pipeline whose graph calls paired_inputs(): PairedIterator finds it


def attach(pipe, source) -> None:
    setattr(pipe, _SOURCE_ATTR, source)


def source_of(pipe):
    """The source whose `paired_inputs()` this pipeline's graph calls (None: none)."""
    return getattr(pipe, _SOURCE_ATTR, None)


def device_id(device: torch.device) -> int | None:
    return device.index if device.type == "cuda" else None


def augment(images, matrix):
    """The planner's transpose/vflip/hflip of every sample as one exact nearest-neighbour `warp_affine`.

    The per-sample 2x3 matrix maps output pixel centres onto source pixel centres, so every output pixel is
    copied from exactly one source pixel (no interpolation); no DALI conditionals are needed."""
    if matrix is None:
        return images
    return fn.warp_affine(images, matrix=matrix, interp_type=types.INTERP_NN, inverse_map=True, fill_value=0)


def dihedral_matrices(code: np.ndarray, hw: np.ndarray) -> np.ndarray:
    """(N, 2, 3) float32 inverse maps (output x, y, 1 -> source x, y) for orientation codes on H×W outputs, as
    `warp_affine(inverse_map=True)` takes them: `pairload.dihedral.matrices`, the one table of the codes."""
    return np.ascontiguousarray(matrices(np.asarray(code), np.asarray(hw)))


class Feed:
    """What `fn.external_source(cycle="raise")` iterates: `iter()` gives the next run's inputs, lazily (a generator
    body runs at the first `next()`, after the consumer has said which run comes next)."""

    def __init__(self, start: Callable[[], Iterator]):
        self.start = start

    def __iter__(self):
        return self.start()


class PairedNodes(tuple):
    """`(low, high)` DataNodes of one pipeline, plus `source` (the `PairedSource` feeding them) and `checks`
    (for kind "file": the two readers' labels and the labels the plan expects; return them after your own
    outputs and `PairedIterator` stops at the first batch where the readers disagree)."""

    source: object
    checks: tuple

    def __new__(cls, low, high, source, checks: tuple = ()):
        self = super().__new__(cls, (low, high))
        self.source, self.checks = source, checks
        return self


class Binding:
    """The pipeline a source iterates: its default one ("default"), a function that builds one ("factory"; called
    again to start over), or one user instance ("instance"; used once: it serves the runs it was built for)."""

    def __init__(self, how: str = "default", what=None):
        self.how, self.what = how, what

    @classmethod
    def of(cls, pipeline, source) -> "Binding":
        """Bind `pipeline` (a Pipeline whose graph calls paired_inputs() with `source`, or a function building one)."""
        if isinstance(pipeline, Pipeline):
            if source_of(pipeline) is not source:
                raise ConfigError("this pipeline's graph does not call paired_inputs() with this source")
            return cls("instance", pipeline)
        if callable(pipeline):
            return cls("factory", pipeline)
        raise ConfigError(f"expected a DALI Pipeline or a function that builds one, found {type(pipeline).__name__}")

    def make(self, source, fits: Callable[[], bool], default: Callable[[], Pipeline]) -> Pipeline:
        """The (unbuilt) pipeline for the next run; `fits()`: whether an instance's graph can deliver that run."""
        if self.how == "instance":
            if self.what is None or not fits():
                raise ConfigError("a bound pipeline instance serves the epochs it was built for, from their start; "
                                  "bind a function that builds the pipeline (PairedIterator(lambda: my_pipe(...), "
                                  "source=src)) to go on at another epoch or after leaving one early")
            pipe, self.what = self.what, None
            return pipe
        pipe = self.what() if self.how == "factory" else default()
        if source_of(pipe) is not source:
            raise ConfigError("the pipeline function did not call paired_inputs() with this source (make the "
                              "source once with paired_source(...) and pass it to paired_inputs in the function)")
        return pipe
