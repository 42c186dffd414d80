"""What DALI users call: `paired_source` (make a source once), `paired_inputs` (its aligned low/high crops inside
a `@pipeline_def` function), `PairedIterator` (planned epochs of that pipeline), and the `dali-external` and
`dali-file` loaders (those sources through a pipeline returning the crops, yielding `PairBatch`)."""

from __future__ import annotations

import dataclasses

from nvidia.dali.pipeline import Pipeline

from ...batch import PairBatch
from ...cut.convert import batches_of
from ...errors import ConfigError
from ...plan import BatchPlan, PlanConfig
from ..base import LoaderOptions, check_options
from .convert import pair_tensors
from .external import ExternalSource
from .files import FileSource
from .graph import PairedNodes, source_of
from .source import PairedSource


class _AsPairBatch:
    """The loaders: a source iterated through its default pipeline, each batch a `PairBatch` on the device."""

    def _convert(self, outputs, bp: BatchPlan) -> PairBatch:
        return self._convert_many(outputs, (bp,))[0]

    def _convert_many(self, outputs, plans: tuple) -> list[PairBatch]:
        low, high = pair_tensors(outputs, self.device, self._share, sum(len(bp) for bp in plans))
        return batches_of(low, high, [self._rows_now(bp) for bp in plans])


class DaliExternalLoader(_AsPairBatch, ExternalSource):
    """make_loader("dali-external"): `ExternalSource` through a pipeline that returns its crops. On a GPU where the
    kernel cuts the crops, each iteration of that pipeline carries ITERATION_BATCHES planned batches (one launch of
    the kernel), split again when they come out."""

    ITERATION_BATCHES = 4

    def _iteration_batches(self) -> int:
        return self.ITERATION_BATCHES if self._zero is not None else 1


class DaliFileLoader(_AsPairBatch, FileSource):
    """make_loader("dali-file"): `FileSource` through a pipeline that returns its crops and checks the readers."""


def paired_source(source, *, kind: str = "external", split: str = "train", num_workers: int = 0,
                  **options) -> PairedSource:
    """A `PairedSource` over packed shards (kind "external"; a folder, or `{name: folder}` to mix) or raw image
    folders (kind "file"; `low_dir`, `high_dir`, `pairs_file` as for `pairload pack`). `options` are the planner's,
    as for `make_loader` (batch_size, crop, seed, rank, world_size, last_batch, augment, shuffle, repeats, weights,
    epoch_size, schedule). Make it once per process and pass it to `paired_inputs` inside the pipeline function;
    `num_workers` is its CPU parallelism (cutting processes for "external"; the pipeline's own `num_threads`
    decodes for "file"). With a schedule, the pipeline's batch_size is the largest stage's."""
    if kind not in ("external", "file"):
        raise ConfigError(f"kind={kind!r}: expected 'external' (packed shards) or 'file' (image folders)")
    plan_names = {f.name for f in dataclasses.fields(PlanConfig)}
    backend = {k: options.pop(k) for k in list(options) if k not in plan_names}
    cls = ExternalSource if kind == "external" else FileSource
    check_options(cls, backend, f"paired_source(kind={kind!r})")
    opts = LoaderOptions.build(split=split, num_workers=num_workers, **options)
    return cls(source, opts, **backend)


def paired_inputs(source, **options) -> PairedNodes:
    """Inside a `@pipeline_def` function: `low, high = paired_inputs(source)`, the planned, aligned crops of one
    batch as uint8 HWC DataNodes (on the GPU when the pipeline has a device), fed epoch after epoch by the
    planner. `source` is a `PairedSource` (from `paired_source`), or a path with `paired_source`'s options."""
    if not isinstance(source, PairedSource):
        source = paired_source(source, **options)
    elif options:
        raise ConfigError(f"paired_inputs(PairedSource, ...): the source is already configured; unexpected "
                          f"{', '.join(sorted(options))}")
    return source.nodes()


class PairedIterator:
    """Epochs of a pipeline built on `paired_inputs`, of the planned length: each batch is a dict of the
    pipeline's outputs named by `output_map` (torch tensors on the pipeline's device, cut to the batch's real
    length), `keys` and `padded`. `pipeline` is a built or unbuilt Pipeline, or a function that builds one
    (needed by kind "file" to start its readers over). `len`, `set_epoch`, `state_dict`/`load_state_dict` and
    `close` are the source's."""

    def __init__(self, pipeline, output_map=("low", "high"), *, source: PairedSource | None = None):
        if source is None:
            source = source_of(pipeline) if isinstance(pipeline, Pipeline) else None
            if source is None:
                raise ConfigError("PairedIterator: pass source= (the PairedSource the pipeline function uses), or a "
                                  "pipeline whose graph calls paired_inputs()")
        self.source = source
        source.bind(pipeline, output_map)

    def __iter__(self):
        return iter(self.source)

    def __len__(self) -> int:
        return len(self.source)

    def batches_in(self, epoch: int) -> int:
        return self.source.batches_in(epoch)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def epoch(self) -> int:
        return self.source.epoch

    def set_epoch(self, epoch: int) -> None:
        self.source.set_epoch(epoch)

    def state_dict(self) -> dict:
        return self.source.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.source.load_state_dict(state)

    def close(self) -> None:
        self.source.close()
