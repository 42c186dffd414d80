"""The host path every shard loader shares: planned batches cut by the workers into the ring (`ring.HostWindows`),
then the one device stage (`device.DeviceStage`), one batch ahead of the caller. The kinds differ only in their
deal (`ram`: strided over the whole split; `wds`: by shard) and their options."""

from __future__ import annotations

import os

import torch

from ..errors import ConfigError
from ..plan import BatchPlan, Shards
from ..read.shards import ShardDataset
from .base import LoaderOptions, PlannedLoader, RemoteOptions
from .device import DeviceStage
from .ring import HostWindows


class HostLoader(PlannedLoader):
    """Planned batches of packed shards, cut on the host by `num_workers` worker processes (or by this process
    with none) and copied to the device on a side stream. `timeout`: seconds to wait for a batch from the workers
    before a `LoaderError` names the stopped or stuck ones."""

    NAME = "pairload"

    def __init__(self, source: str | os.PathLike | ShardDataset, opts: LoaderOptions, *, prefetch: int = 4,
                 timeout: float = 300.0, shards: Shards | None = None, remote: RemoteOptions = RemoteOptions(),
                 whole: bool = True):
        """`remote`: where shards from URLs are cached; `whole`: such a split is made local whole before the first
        batch (False: shards are fetched ahead of use and may be evicted once used, as wds does)."""
        if prefetch < 1:
            raise ConfigError(f"prefetch={prefetch}: expected at least 1 batch")
        self.ds = remote.open(source, opts.split, whole=whole)
        super().__init__(self.ds.keys, self.ds.sizes, self.ds.split, opts, self.ds.groups, shards)
        self.prefetch = prefetch
        self._cuda = self.device.type == "cuda"
        self._stage = DeviceStage(self.device)
        # on a CPU device the host side applies the flips while copying (nearly free there, a full pass later)
        self._host = HostWindows(self.ds, self.cfg, self.plan_for, num_workers=opts.num_workers, prefetch=prefetch,
                                 pin=self._cuda, apply_codes=not self._cuda, name=self.NAME,
                                 timeout=timeout)

    def start_workers(self) -> None:
        """Start the worker processes now and wait until they are ready (no shard data is read), so that the first
        batch does not also pay for process start-up. Iterating starts them anyway."""
        self._host.start()

    def worker_pids(self) -> list[int]:
        return self._host.worker_pids()

    def close(self) -> None:
        """Stop the worker processes and free the shared ring (also done when the loader is garbage collected)."""
        self._host.close()
        self._stage.clear()
        self.ds.close_remote()

    def _code(self, bp: BatchPlan) -> torch.Tensor | None:
        return torch.from_numpy(bp.code) if self.cfg.augment else None

    def _batches(self, epoch: int, plans: list[BatchPlan], consumed: tuple):
        produced = (self._stage.put(torch.from_numpy(host), self._code(bp), self._keys(bp), self._padded(bp), release,
                                    self._source(bp))
                    for bp, (host, release) in zip(plans, self._host.batches((epoch, consumed), plans,
                                                                              self._stage.reclaim)))
        yield from self._stage.one_ahead(produced)  # batch k+1 is copied while the caller works on batch k
