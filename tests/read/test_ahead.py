"""Reading ahead of the cuts (`pairload.read.ahead`): ranges merged within a batch, never across; the reader thread
asks for exactly the ranges the queued batches read, no further than its window beyond the batch handed out to be
cut, and stops on close. Advice only, recorded here instead of given (posix_fadvise patched)."""

import os
import time
from pathlib import Path

import numpy as np
import pytest

from pairload.read.ahead import AT_ONCE, ReadAhead, merged
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import ShardDataset

from conftest import make_raw


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ahead")
    make_raw(root / "raw", 12, split="train", size=(96, 128))  # 72 KB a pair
    pack(root / "raw", root / "shards", PackOptions(workers=1, shard_size=256 << 10))  # several shards
    return root / "shards"


def test_ranges_merge_where_they_touch_within_a_batch_and_never_across():
    group, shard, start, end = merged(np.array([0, 0, 1, 0, 0]), np.array([100, 0, 0, 50, 200]),
                                      np.array([150, 50, 10, 100, 300]), np.array([0, 0, 0, 0, 1]))
    assert list(zip(group.tolist(), shard.tolist(), start.tolist(), end.tolist())) == [
        (0, 0, 0, 150), (0, 1, 0, 10), (1, 0, 200, 300)]


def record(monkeypatch, calls: list, entry, opened: list | None = None) -> None:
    """posix_fadvise patched: each WILLNEED asked for recorded in `calls` as `entry(fd, offset, length, advice)`;
    the descriptors advised RANDOM (read without the kernel's read-ahead) in `opened`."""
    def advise(fd, off, n, advice):
        if advice == os.POSIX_FADV_RANDOM:
            (opened if opened is not None else []).append(os.readlink(f"/proc/self/fd/{fd}"))
        else:
            calls.append(entry(fd, off, n, advice))

    monkeypatch.setattr(os, "posix_fadvise", advise)


def settled(calls: list, want: int) -> list:
    """The calls recorded once at least `want` came and no more come."""
    deadline = time.monotonic() + 10
    while len(calls) < want and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    return list(calls)


def test_the_reader_asks_for_what_the_batches_read_a_window_ahead_and_stops_on_close(split, monkeypatch):
    ds = ShardDataset(split, "train")
    assert len(ds.files) > 1
    calls = []
    record(monkeypatch, calls, lambda fd, off, n, advice: (os.readlink(f"/proc/self/fd/{fd}"), off, off + n, advice))
    order = np.random.default_rng(0).permutation(len(ds))
    batches = np.split(order, 6)  # 6 batches of 2

    def ranges(first: int, last: int) -> list:
        """The merged ranges batches first..last read, batch by batch."""
        rows = np.concatenate(batches[first:last + 1])
        group = np.repeat(np.arange(first, last + 1), 2)
        _, shard, start, end = merged(*ds.spans(rows), np.tile(group, 2))
        return [(str(ds.files[k]), a, b, os.POSIX_FADV_WILLNEED)
                for k, a, b in zip(shard.tolist(), start.tolist(), end.tolist())]

    reader = ReadAhead(ds, window=1)
    reader.add(order[:4], np.array([2, 2]))  # queued a block at a time: batches 0-1, then 2-5
    reader.add(order[4:], np.array([2, 2, 2, 2]))
    assert reader.queued == 6
    assert settled(calls, len(ranges(0, 0))) == ranges(0, 0)  # none handed out to be cut yet: the window from there
    reader.cutting(0)  # batch 0 and the window's batch 1
    assert settled(calls, len(ranges(0, 1))) == ranges(0, 1)
    reader.cutting(4)  # up to batch 5: the rest, in order
    assert settled(calls, len(ranges(0, 5))) == ranges(0, 1) + ranges(2, 5)
    assert reader.asked == len(calls) and reader.alive and reader.failed is None
    t = time.monotonic()
    reader.close()
    assert not reader.alive and time.monotonic() - t < 1.0


def test_a_reset_reader_forgets_what_it_queued_and_a_missing_shard_is_no_error(split, tmp_path, monkeypatch):
    ds = ShardDataset(split, "train")
    calls = []
    record(monkeypatch, calls, lambda fd, off, n, advice: off)
    reader = ReadAhead(ds, window=2)
    reader.add(np.arange(4), np.array([2, 2]))
    reader.reset()
    assert reader.queued == 0
    reader.cutting(5)
    assert settled(calls, 0) == []
    reader.files = [tmp_path / "gone.tar"] * len(ds.files)  # every shard missing: skipped, the thread goes on
    reader.add(np.arange(4), np.array([2, 2]))
    reader.cutting(0)
    assert settled(calls, 0) == [] and reader.alive and reader.failed is None
    reader.close()
    assert not reader.alive


def test_the_first_batch_waits_for_the_first_blocks_only_and_the_distance_read_ahead_grows(tmp_path):
    # a long run's first blocks are short (FIRST_BLOCK batches, doubling) and the worker path's reader is given a
    # block at a time as batches are cut: the first batch plans and looks up 24 batches, not a window of 256 (with an
    # index bigger than memory, every row looked up is a read from disk)
    from pairload import make_loader
    from pairload.plan.run import FIRST_BLOCK

    make_raw(tmp_path / "raw", 1100, split="train", size=(24, 32))  # 1,100 batches: a long run
    pack(tmp_path / "raw", tmp_path / "shards", PackOptions(workers=1))
    loader = make_loader("ram", tmp_path / "shards", batch_size=1, crop=16, seed=1, num_workers=1)
    it = iter(loader)
    next(it)
    reader = loader.cutter.reader
    assert reader is not None and 0 < reader.queued <= 3 * FIRST_BLOCK
    rest = sum(1 for _ in it)
    assert rest == len(loader) - 1 and reader.queued >= len(loader)  # every batch queued (and the next epoch's first)
    loader.close()


def test_the_reader_goes_on_into_the_next_epoch_and_keeps_it_queued_when_that_epoch_begins(split, monkeypatch):
    # a split read from disk every epoch: once the current run is all queued, the run expected next (the next epoch)
    # is queued behind it within the same window, so that its first batches are read while the last ones are cut
    from pairload import make_loader

    ds = ShardDataset(split, "train")
    calls = []
    record(monkeypatch, calls, lambda fd, off, n, advice: (os.readlink(f"/proc/self/fd/{fd}"), off, off + n))
    loader = make_loader("ram", split, batch_size=2, crop=32, seed=3)
    run0, run1 = loader.plan_for(0), loader.plan_for(1)

    def asked(bp) -> set:
        shard, start, end = ds.spans(bp.index)
        return {(str(ds.files[k]), a, b) for k, a, b in zip(shard.tolist(), start.tolist(), end.tolist())}

    reader = ReadAhead(ds, window=2)
    asked_for = [0]
    reader.reset(run0, after=lambda: asked_for.append(1) or run1)
    reader.follow(0)
    assert len(asked_for) == 1 and reader.foreseen is None  # this run first
    reader.follow(len(run0) - 1)  # the last batch: the window reaches into the next epoch
    assert reader.foreseen is run1 and len(asked_for) == 2 and reader.queued > len(run0)
    got = settled(calls, 1)
    covered = {c for c in got}
    # the next epoch's first batch asked for (whole members merged with their neighbours: inside what was asked)
    assert all(any(f == g and a <= s and e <= b for g, a, b in covered) for f, s, e in asked(run1[0]))
    queued = reader.queued
    reader.reset(run1, after=lambda: None)  # that epoch begins: what was queued of it stays
    assert reader.queued == queued and reader.foreseen is None
    reader.follow(len(run1) - 1)
    assert reader.foreseen is None and reader.queued == len(run0) + len(run1)  # nothing expected after it
    reader.reset(loader.plan_for(5))  # another run: everything queued forgotten
    assert reader.queued == 0
    reader.close()
    assert not reader.alive and reader.failed is None


def test_a_run_broken_off_for_the_one_queued_behind_it_is_not_read_on(split, monkeypatch):
    # the loader begins the next epoch before the current one's batches were all asked for (the thread held up by the
    # disk): what is left of the old run is dropped, what was queued of the next one is kept
    import threading

    from pairload import make_loader

    ds = ShardDataset(split, "train")
    held, worked = threading.Event(), []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, advice: advice == os.POSIX_FADV_RANDOM or held.wait(10))
    loader = make_loader("ram", split, batch_size=2, crop=32, seed=3)
    run0, run1 = loader.plan_for(0), loader.plan_for(1)
    assert len(run0) > AT_ONCE

    def ranges(plans, read):  # 100 bytes a batch of shard 0
        worked.extend(tuple(bp.index.tolist()) for bp in plans)
        n = np.arange(len(plans))
        return n, np.zeros(len(plans), np.int64), n * 4096, n * 4096 + 100

    reader = ReadAhead(ds, window=4 * len(run0), ranges=ranges)
    reader.reset(run0, after=lambda: run1)
    reader.follow(0)  # the whole run queued, then the next one behind it
    deadline = time.monotonic() + 10
    while len(worked) < AT_ONCE and time.monotonic() < deadline:  # the first batches worked out, their asking held
        time.sleep(0.005)
    assert reader.foreseen is run1
    reader.reset(run1)  # the next epoch begins
    held.set()
    reader.follow(len(run1) - 1)
    want = [tuple(bp.index.tolist()) for bp in run1]
    deadline = time.monotonic() + 10
    while worked[-len(want):] != want and time.monotonic() < deadline:
        time.sleep(0.005)
    old = [tuple(bp.index.tolist()) for bp in run0]
    assert worked == old[:AT_ONCE] + want  # the rest of the old run never worked out, nor asked for
    reader.close()
    assert reader.failed is None


def test_a_reader_given_ranges_asks_for_those_of_each_planned_batch_in_order(split, monkeypatch):
    # a decode stage of tiled members tells the reader what a batch reads (only the tiles its crops touch), which the
    # reader works out in its own thread, reading what it needs of the shards (the members' headers), after asking
    # for the starts of those members (`heads`): it asks for exactly those ranges, batch by batch, a window ahead
    from pairload import make_loader

    ds = ShardDataset(split, "train")
    calls = []
    opened = []
    record(monkeypatch, calls, lambda fd, off, n, advice: (os.readlink(f"/proc/self/fd/{fd}"), off, off + n), opened)
    run = make_loader("ram", split, batch_size=2, crop=32, seed=3).plan_for(0)
    read_back, worked = [], []

    class Ranges:
        def heads(self, plans):  # 10 bytes a batch at 8192 * its first index: what it reads to work the batch out
            first = np.array([int(bp.index[0]) for bp in plans])
            return ds.spans(first)[0][:len(plans)], first * 8192, first * 8192 + 10

        def __call__(self, plans, read):  # 100 bytes a batch at 4096 * its first index, in its first sample's shard
            worked.append(len(plans))
            first = np.array([int(bp.index[0]) for bp in plans])
            shard = ds.spans(first)[0][:len(plans)]
            read_back.extend((int(s), bytes(read(int(s), int(a), 10))) for s, a in zip(shard, first * 8192))
            return np.arange(len(plans)), shard, first * 4096, first * 4096 + 100

    reader = ReadAhead(ds, window=1, ranges=Ranges())
    reader.reset(run)
    reader.follow(0)
    firsts = [int(bp.index[0]) for bp in run]
    shards = ds.spans(np.array(firsts))[0][:len(run)].tolist()
    want = [(str(ds.files[s]), 4096 * i, 4096 * i + 100) for s, i in zip(shards, firsts)]
    heads = [(str(ds.files[s]), 8192 * i, 8192 * i + 10) for s, i in zip(shards, firsts)]
    got = settled(calls, 2 + len(heads))
    assert [c for c in got if c[2] - c[1] == 100] == want[:2]  # batches 0 and 1 (the window), nothing else
    reader.follow(len(run) - 1)
    got = settled(calls, len(run) + len(heads))
    assert [c for c in got if c[2] - c[1] == 100] == want
    assert sorted(c for c in got if c[2] - c[1] == 10) == sorted(heads)  # each start asked for once
    # worked out a few batches at a time, as they come within the window (a block at once kept the thread reading
    # its headers while nothing was asked for)
    assert sum(worked) == len(run) > AT_ONCE and max(worked) == AT_ONCE
    for k, c in enumerate(want):  # and before the batch's ranges
        assert got.index(heads[k]) < got.index(c)
    # what the thread read through `read`: the shards' own bytes
    assert read_back == [(s, Path(ds.files[s]).read_bytes()[8192 * i:8192 * i + 10]) for s, i in zip(shards, firsts)]
    # each shard the thread reads through is read without the kernel's read-ahead (which read neighbours of each
    # header no batch asked for)
    assert sorted(opened) == sorted({str(ds.files[s]) for s in shards})
    assert reader.failed is None
    reader.close()


def test_a_reader_whose_ranges_or_next_epoch_fail_asks_for_whole_members_and_stops_at_the_run_end(split, monkeypatch):
    from pairload import make_loader

    ds = ShardDataset(split, "train")
    calls = []
    record(monkeypatch, calls, lambda fd, off, n, advice: off)
    run = make_loader("ram", split, batch_size=2, crop=32, seed=3).plan_for(0)

    def broken(*args):
        raise RuntimeError("broken")

    reader = ReadAhead(ds, window=len(run), ranges=broken)
    reader.reset(run, after=broken)
    reader.follow(len(run) - 1)  # neither raises into the loader
    assert reader.foreseen is None and reader.queued == len(run)
    batch = np.repeat(np.arange(len(run)), [len(bp) for bp in run])
    want = merged(*ds.spans(np.concatenate([bp.index for bp in run])), np.tile(batch, 2))[2].tolist()
    assert settled(calls, len(want)) == want  # the members themselves, whole, batch by batch
    assert isinstance(reader.failed, RuntimeError)
    reader.close()
