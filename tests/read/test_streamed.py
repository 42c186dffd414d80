"""Reading a run shard by shard (`pairload.read.streamed`): a by-shard run (wds) gets its shards read whole, in the
order it first reads them, within a budget of bytes; a strided run (ram) does not; each shard's stretch is handed
back to be dropped once its last batch is done, and a shard the batches passed unread is never read."""

import time
from pathlib import Path

import numpy as np
import pytest

from pairload import make_loader
from pairload.bench.bounds import evict, resident_fraction
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import ShardDataset, open_shards
from pairload.read.streamed import ShardStream, shard_runs

from conftest import make_raw


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("streamed")
    make_raw(root / "raw", 24, split="train", size=(96, 128))  # 72 KB a pair
    pack(root / "raw", root / "shards", PackOptions(workers=1, shard_size=256 << 10))  # 3 pairs a shard
    return root / "shards"


def run_of(kind: str, shards: Path, **opts):
    loader = make_loader(kind, shards, batch_size=2, crop=32, seed=3, **opts)
    return loader.plan_for(0)


def settled(stream: ShardStream, want: int | None = None) -> int:
    """The bytes the stream has read once it reads no more (or, given `want`, once it has read that many)."""
    before, deadline = -1, time.monotonic() + 10
    while (stream.read != before if want is None else stream.read < want) and time.monotonic() < deadline:
        before = stream.read
        time.sleep(0.1)
    return stream.read


def test_a_by_shard_run_is_read_whole_shard_by_shard_and_a_strided_run_is_not(split):
    ds = ShardDataset(split, "train")
    wds, ram = run_of("wds", split, shuffle_buffer=3), run_of("ram", split)
    first, last, start, end, used = shard_runs(ds, wds)
    sizes = np.array(ds.shard_bytes)
    assert len(ds.files) >= 6 and (last >= first).all() and (end <= sizes).all()
    # every sample is read once: each shard's stretch holds what it reads, and the batches read nearly all of it
    assert (used <= end - start).all() and used.sum() >= 0.8 * (end - start).sum()
    stream = ShardStream.of(ds, wds, most=int(sizes.sum()) // 2)
    try:
        assert stream is not None
        assert stream.shard.tolist() == np.argsort(first, kind="stable").tolist()  # in the order they are first read
    finally:
        stream.close()
    assert ShardStream.of(ds, ram, most=int(sizes.sum()) // 2) is None  # every shard open from first batch to last
    assert ShardStream.of(ds, wds, most=int(sizes.min()) // 2) is None  # a shuffle buffer's shards would not fit


def test_shards_are_read_within_the_budget_and_handed_back_at_their_last_batch(split):
    ds = ShardDataset(split, "train")
    files = [str(f) for f in ds.files]
    evict(files)
    run = run_of("wds", split, shuffle_buffer=3)
    _, last, start, end, _ = shard_runs(ds, run)
    most = int(2 * (end - start).max())
    stream = ShardStream.of(ds, run, most=most)
    try:
        assert 0 < settled(stream) <= most < int((end - start).sum())  # the budget holds the rest back
        dropped = []
        for b in range(len(run)):
            spans = stream.done(b)
            assert all(last[shard] <= b for shard, _, _ in spans)
            for span in spans:
                ds.dontneed_span(*span)
            dropped += spans
            settled(stream)  # the batches take their time: the shards coming are read before their batches
        assert settled(stream, int((end - start).sum())) == int((end - start).sum())  # each read once, whole
        dropped += stream.done(len(run) - 1)  # a shard still being read at its last batch is dropped once read
        assert sorted(dropped) == sorted(zip(range(len(files)), start.tolist(), end.tolist()))
        assert stream.failed is None
    finally:
        stream.close()
    assert not stream.alive
    if resident_fraction(files) < 1.0:  # a filesystem that can tell: nothing read is left behind
        assert resident_fraction(files) < 0.2


def test_a_shard_the_batches_passed_unread_is_not_read(split):
    ds = ShardDataset(split, "train")
    run = run_of("wds", split, shuffle_buffer=3)
    _, _, start, end, _ = shard_runs(ds, run)
    most = int(2 * (end - start).max())  # two shards at a time
    stream = ShardStream.of(ds, run, most=most)
    try:
        settled(stream)
        spans = stream.done(len(run) - 1)  # the run is over before the others are read
        assert len(spans) == len(ds.files)
        assert settled(stream) <= most < int((end - start).sum()) and stream.failed is None
    finally:
        stream.close()


def test_a_mix_reads_and_drops_its_sources_shards_in_its_own_numbering(split, tmp_path):
    make_raw(tmp_path / "raw", 9, split="train", size=(96, 128), start=100)
    pack(tmp_path / "raw", tmp_path / "other", PackOptions(workers=1, shard_size=256 << 10))
    mix = open_shards({"a": split, "b": tmp_path / "other"}, "train")
    run = make_loader("wds", {"a": split, "b": tmp_path / "other"}, batch_size=2, crop=32, seed=3,
                      shuffle_buffer=3).plan_for(0)
    stream = ShardStream.of(mix, run, most=1 << 30)
    try:
        assert stream is not None and sorted(stream.shard.tolist()) == list(range(len(mix.files)))
        other = [str(f) for f in mix.files[len(ShardDataset(split, "train").files):]]
        assert all(f.startswith(str(tmp_path / "other")) for f in other)
        settled(stream)
        spans = stream.done(len(run) - 1)
    finally:
        stream.close()
    assert stream.read == sum(end - start for _, start, end in spans)  # every shard of both, read whole once
    for span in spans:
        mix.dontneed_span(*span)
    if resident_fraction(other) < 1.0:
        assert resident_fraction(other) < 0.2  # the second source's shards: dropped by their number in the mix


def test_a_decode_stage_dropped_unclosed_stops_its_shard_readers(split, monkeypatch):
    # the decode stage's memory (made here on the CPU: its tables only) gives a by-shard run a ShardStream; a loader
    # dropped without close() must not leave the stream's threads waiting for memory that no batch will free
    import gc

    import torch

    from pairload.cut.memory import decoded

    ds = ShardDataset(split, "train")
    monkeypatch.setattr(decoded, "MOST", 2 * max(ds.shard_bytes))  # two shards at a time: the readers wait
    memory = decoded.DecodedMemory(ds, torch.device("cpu"), evict=True, background=False)
    memory.begin(run_of("wds", split, shuffle_buffer=3))
    stream = memory.reader
    assert isinstance(stream, ShardStream) and 0 < settled(stream) < sum(ds.shard_bytes) and stream.alive
    del memory
    gc.collect()
    deadline = time.monotonic() + 10
    while stream.alive and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not stream.alive


def stretches(ds, run) -> dict[int, tuple[int, int]]:
    """shard -> the (start, end) of it the run reads."""
    _, last, start, end, _ = shard_runs(ds, run)
    return {k: (int(start[k]), int(end[k])) for k in np.flatnonzero(last >= 0).tolist()}


def test_a_stream_goes_on_into_the_next_epoch_and_keeps_what_that_epoch_read_again(split):
    # the run expected next (the next epoch) is queued behind the current one once each of its shards is taken, so
    # the disk reads on while the last batches are cut; a shard the next epoch has read again is not dropped by the
    # run before, and that epoch goes on in the same stream
    ds = ShardDataset(split, "train")
    loader = make_loader("wds", split, batch_size=2, crop=32, seed=3, shuffle_buffer=3)
    run0, run1 = loader.plan_for(0), loader.plan_for(1)
    first, second = stretches(ds, run0), stretches(ds, run1)
    bytes0, bytes1 = (sum(b - a for a, b in s.values()) for s in (first, second))
    stream = ShardStream.of(ds, run0, most=1 << 30, after=lambda: run1)
    try:
        assert settled(stream) == bytes0  # nothing of the next epoch before it is asked for
        stream.follow(0)  # every shard of this run taken: the next queued
        assert stream.foreseen is run1 and settled(stream, bytes0 + bytes1) == bytes0 + bytes1
        spans = [span for b in range(len(run0)) for span in stream.done(b)]
        assert spans == []  # wds reads every shard each epoch, and the next epoch had read each again
        assert stream.rebase(loader.plan_for(2)) is None  # not the run queued: the caller starts another stream
        assert stream.rebase(run1) == [] and stream.base == len(run0)
        spans = [span for b in range(len(run1)) for span in stream.done(b)]
        assert len(stream.shard) == len(second)  # the first epoch's entries forgotten
        assert sorted(spans) == sorted((k, a, b) for k, (a, b) in second.items())
        assert settled(stream) == bytes0 + bytes1 and stream.failed is None
    finally:
        stream.close()
    assert not stream.alive


def test_under_a_budget_the_next_epoch_is_read_as_the_last_shards_go(split, monkeypatch):
    import os

    preadv = os.preadv

    def slow(*args):  # reads in flight as each epoch begins and ends
        time.sleep(0.01)
        return preadv(*args)

    monkeypatch.setattr(os, "preadv", slow)
    ds = ShardDataset(split, "train")
    files = [str(f) for f in ds.files]
    evict(files)
    loader = make_loader("wds", split, batch_size=2, crop=32, seed=3, shuffle_buffer=3)
    run0, run1 = loader.plan_for(0), loader.plan_for(1)
    first = stretches(ds, run0)
    bytes0 = sum(b - a for a, b in first.values())
    most = 3 * max(b - a for a, b in first.values())
    stream = ShardStream.of(ds, run0, most=most, after=lambda: run1)
    dropped = []
    try:
        for b in range(len(run0)):  # the batches take their time: what the budget allows is read meanwhile
            stream.follow(b)
            settled(stream)
            spans = stream.done(b)
            for span in spans:
                ds.dontneed_span(*span)
            dropped += [k for k, _, _ in spans]
        assert stream.foreseen is run1
        assert stream.rebase(run1, after=lambda: None) is not None  # that epoch begins, reads of it in flight
        ahead = settled(stream) - bytes0
        assert 0 < ahead <= most  # its first shards, read before its batches, within the budget
        assert len(set(dropped)) == len(dropped)  # each dropped once (none the next epoch had read again)
        second = stretches(ds, run1)
        for b in range(len(run1)):  # that epoch goes on in the stream, its reads in flight kept track of
            stream.follow(b)
            settled(stream)
            for span in stream.done(b):
                ds.dontneed_span(*span)
                dropped.append(span[0])
        assert settled(stream) == bytes0 + sum(b - a for a, b in second.values()) and stream.failed is None
        assert sorted(set(dropped)) == sorted(first) and len(stream.shard) == len(second)
    finally:
        stream.close()
    if resident_fraction(files) < 1.0:  # a filesystem that can tell: nothing read is left behind
        assert resident_fraction(files) < 0.2


def test_the_decode_stage_keeps_one_stream_across_epochs_when_the_next_was_foreseen(split, monkeypatch):
    # the decode stage's memory (on the CPU: its tables only) of a split every epoch reads from disk: begin() with
    # the epoch expected next goes on in the same stream when that epoch begins, and starts another for any other run
    import torch

    from pairload.cut.memory import decoded

    monkeypatch.setattr(decoded, "outgrows_cache", lambda nbytes: True)
    ds = ShardDataset(split, "train")
    loader = make_loader("wds", split, batch_size=2, crop=32, seed=3, shuffle_buffer=3)
    memory = decoded.DecodedMemory(ds, torch.device("cpu"), background=False)
    try:
        memory.begin(loader.plan_for(0), after=lambda: loader.plan_for(1))
        stream = memory.reader
        assert isinstance(stream, ShardStream)
        settled(stream)
        stream.follow(len(loader.plan_for(0)) - 1)
        assert stream.foreseen is loader.plan_for(1)
        memory.begin(loader.plan_for(1), after=lambda: loader.plan_for(2))
        assert memory.reader is stream and stream.base == len(loader.plan_for(0))
        memory.begin(loader.plan_for(4))  # not the epoch expected: a stream of its own
        assert isinstance(memory.reader, ShardStream) and memory.reader is not stream and not stream.alive
    finally:
        memory.close()


def test_a_next_epoch_that_cannot_be_planned_ends_the_reading_not_the_epoch(split):
    # reading ahead is advice: an error planning the next epoch is that epoch's to raise, when it is asked for
    ds = ShardDataset(split, "train")
    run = run_of("wds", split, shuffle_buffer=3)

    def broken():
        raise RuntimeError("no plan")

    stream = ShardStream.of(ds, run, most=1 << 30, after=broken)
    try:
        settled(stream)
        stream.follow(len(run) - 1)  # every shard taken: the next epoch asked for, and not there
        assert stream.foreseen is None and stream.rebase(run) is None
        deadline = time.monotonic() + 10
        while stream.alive and time.monotonic() < deadline:  # nothing more to read: the threads end
            time.sleep(0.02)
        assert not stream.alive and stream.failed is None
    finally:
        stream.close()


def test_a_loader_dropped_unclosed_with_its_next_epoch_foreseen_stops_its_shard_readers(split, monkeypatch):
    # the run expected next is planned by the loader; the stream's threads hold what plans it, and the loader holds
    # the stream (through its decode stage): the loader must be held weakly, or a loader dropped unclosed would never
    # be collected and its readers would wait forever for memory no batch frees
    import gc

    import torch

    from pairload.cut.memory import decoded
    from pairload.loaders.base import expected_after

    ds = ShardDataset(split, "train")
    monkeypatch.setattr(decoded, "MOST", 2 * max(ds.shard_bytes))  # two shards at a time: the readers wait
    monkeypatch.setattr(decoded, "outgrows_cache", lambda nbytes: True)  # every epoch read from disk
    loader = make_loader("wds", split, batch_size=2, crop=32, seed=3, shuffle_buffer=3)
    memory = decoded.DecodedMemory(ds, torch.device("cpu"), background=False)
    loader.decode_stage = memory  # as its device cut holds its memory
    memory.begin(loader.plan_for(0), after=expected_after(loader, (0, ())))
    stream = memory.reader
    assert isinstance(stream, ShardStream) and 0 < settled(stream) < sum(ds.shard_bytes) and stream.alive
    assert expected_after(loader, (0, ()))() is loader.plan_for(1)
    del loader, memory
    gc.collect()
    deadline = time.monotonic() + 10
    while stream.alive and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not stream.alive
