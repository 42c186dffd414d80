"""`BasicSRBatches`: a pairload loader behind BasicSR's prefetcher interface, in the dict form BasicSR models'
`feed_data` takes. torch is imported when batches are converted."""

from __future__ import annotations

from typing import Iterator

from ..errors import ConfigError


class BasicSRBatches:
    """A pairload loader behind BasicSR's prefetcher interface (`CPUPrefetcher`/`CUDAPrefetcher`): `next()` gives
    the next batch of the loader's current epoch, None once the epoch is over (and again until `reset()`);
    `reset()` starts the loader's current epoch anew (`set_epoch(e)` first, as BasicSR's loop does with its
    sampler); iterating gives one epoch's batches. The loader already delivers on its device one batch ahead, as
    the CUDA prefetcher does.

    Each batch is a dict: `lq` and `gt` float32 N×C×H×W on the loader's device, from `normalize.pair(batch)`
    (default `Normalize()`: values in [0, 1], each member type divided by its range: 255 for uint8, 65535 for
    uint16, camera raw included; `RawNormalize()` levels camera raw by its black and white levels instead), and
    `lq_path`, `gt_path`: lists of the rows' shard keys ("source/key" when sources are mixed). The original file
    names are recorded in each sample's `.json` member but batches do not carry them; the key is the input's
    path below its split's low folder with '/' as '+', other characters escaped and the extension dropped
    (`pairload.format.schema.key_from_relpath`): enough to name outputs, which is what BasicSR uses paths for."""

    def __init__(self, loader, normalize=None):
        if normalize is None:
            from ..batch import Normalize

            normalize = Normalize(mean=(0.0,), std=(1.0,))  # one value for every channel: 1, 3 or 4 (raw)
        if not callable(getattr(normalize, "pair", None)):
            raise ConfigError(f"BasicSRBatches: normalize={normalize!r}: expected an object with pair(batch) -> "
                              "(input, target), e.g. pairload.Normalize(mean, std) or pairload.RawNormalize()")
        self.loader, self.normalize = loader, normalize
        self._on = None  # the device `normalize` was last moved to
        self._it: Iterator | None = None

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """The loader's `set_epoch` (BasicSR's loop calls its sampler's; with pairload the loader is the sampler)."""
        self.loader.set_epoch(epoch)

    def reset(self) -> None:
        self._close()
        self._it = iter(self.loader)

    def next(self) -> dict | None:
        if self._it is None:
            self._it = iter(self.loader)
        try:
            batch = next(self._it)
        except StopIteration:
            return None
        return self.as_dict(batch)

    def __iter__(self) -> Iterator[dict]:
        self._close()
        for batch in self.loader:
            yield self.as_dict(batch)

    def as_dict(self, batch) -> dict:
        """One `PairBatch` as BasicSR's `PairedImageDataset` batches are: {'lq', 'gt', 'lq_path', 'gt_path'}."""
        import torch

        device = batch.low.device
        if isinstance(self.normalize, torch.nn.Module) and self._on != device:
            self.normalize.to(device)
            self._on = device
        lq, gt = self.normalize.pair(batch)
        return {"lq": lq, "gt": gt, "lq_path": list(batch.keys), "gt_path": list(batch.keys)}

    def close(self) -> None:
        """End the epoch under way (its workers' batches are let go) and close the loader."""
        self._close()
        self.loader.close()

    def _close(self) -> None:
        if self._it is not None and hasattr(self._it, "close"):
            self._it.close()  # a generator left half-way would hold the loader's ring and workers until collected
        self._it = None
