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
