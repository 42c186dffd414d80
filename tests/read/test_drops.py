"""Dropping pages off the caller's thread (`pairload.read.drops.Drops`): every group handed over is dropped, by the
drop thread, in order, before `close` returns; at most QUEUED groups wait, so the caller waits behind a slow one."""

import threading
import time

import numpy as np
import pytest

from pairload.bench.bounds import evict, resident_fraction
from pairload.pack.writer import PackOptions, pack
from pairload.read import drops
from pairload.read.drops import Drops
from pairload.read.shards import ShardDataset

from conftest import make_raw


class Watched:
    """A split whose `dontneed` records the thread and the samples, then drops them (or waits for `gate` first)."""

    def __init__(self, ds, gate: threading.Event | None = None):
        self.ds, self.gate, self.calls = ds, gate, []

    def dontneed(self, indices) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        self.calls.append((threading.current_thread().name, list(np.asarray(indices).tolist())))
        self.ds.dontneed(indices)


def test_each_group_is_dropped_in_order_by_the_drop_thread_before_close_returns(tmp_path):
    make_raw(tmp_path / "raw", 16, split="train", size=(256, 384))  # 590 KB a pair: whole pages inside each member
    pack(tmp_path / "raw", tmp_path / "shards", PackOptions(workers=1))
    ds = ShardDataset(tmp_path / "shards", "train")
    files = [str(f) for f in ds.files]
    evict(files)
    if resident_fraction(files) > 0.5:
        pytest.skip("this filesystem keeps the files in memory (tmpfs): nothing to drop")
    for i in range(len(ds)):  # read through the maps, as a decode call's staging does
        low, high = ds.arrays(i)
        int(low.sum()) + int(high.sum())
    assert resident_fraction(files) > 0.9
    source = Watched(ds)
    dropper = Drops(source)
    groups = [np.arange(k, k + 4) for k in range(0, 16, 4)]
    for g in groups:
        dropper.drop(g)
    dropper.close()
    assert [samples for _, samples in source.calls] == [g.tolist() for g in groups]
    assert {name for name, _ in source.calls} != {threading.current_thread().name}
    assert all(name.startswith("pairload-drop") for name, _ in source.calls)
    assert resident_fraction(files) < 0.2  # what stays: pages shared by two members, the tar headers, the index


def test_at_most_queued_groups_wait_and_the_caller_waits_behind_them(tmp_path):
    make_raw(tmp_path / "raw", 4, split="train", size=(24, 32))
    pack(tmp_path / "raw", tmp_path / "shards", PackOptions(workers=1))
    gate = threading.Event()
    source = Watched(ShardDataset(tmp_path / "shards", "train"), gate)
    dropper = Drops(source)
    handed = []

    def hand_over():
        for k in range(drops.QUEUED + 2):
            dropper.drop(np.array([k % 4]))
            handed.append(k)

    caller = threading.Thread(target=hand_over)
    caller.start()
    time.sleep(0.3)
    # the first is being dropped (held at the gate) and QUEUED - 1 more wait behind it: the next one waits
    assert len(handed) == drops.QUEUED and source.calls == []
    gate.set()
    caller.join(10)
    dropper.close()
    assert len(handed) == drops.QUEUED + 2 and len(source.calls) == drops.QUEUED + 2
