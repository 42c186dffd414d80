"""BasicSR-family training code (BasicSR, Restormer, Retinexformer, NAFNet) on pairload batches.

- `python -m pairload.basicsr -opt OPTIONS.yml --shards SHARDS [their arguments]`, run from such a repository,
  trains with the repository's own `basicsr` (options, model, training loop, validation, logger, checkpoints) and
  swaps only the train data path for a pairload `ram` loader (`pairload.basicsr.run`);
- `loader_options` maps a BasicSR options dict to `make_loader` arguments (refusing what pairload cannot
  reproduce), for a train.py one edits by hand;
- `BasicSRBatches` hands the loader's batches over as BasicSR's prefetchers do, in the dict form its models'
  `feed_data` takes.

Needs neither basicsr nor torchvision; torch is imported when batches are converted."""

from __future__ import annotations

from .batches import BasicSRBatches
from .options import IGNORED, MADE_BY_TYPE, MAPPED, PAIRED_TYPES, ignored_keys, loader_options

__all__ = ["BasicSRBatches", "IGNORED", "MADE_BY_TYPE", "MAPPED", "PAIRED_TYPES", "ignored_keys", "loader_options",
           "main"]


def main(argv: list[str] | None = None) -> int:
    """The `python -m pairload.basicsr` command (see `pairload.basicsr.run`); returns its exit status."""
    from .run import main as run_main

    return run_main(argv)
