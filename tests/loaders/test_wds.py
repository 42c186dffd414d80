"""The wds loader (the by-shard deal): exactness for any number of workers, pad and partial, equal batch counts
across ranks with the skipped samples reported and changing with the epoch, and reads confined to a rank's own
block of shards, one shuffle buffer at a time. Pixels encode the pair index."""

import numpy as np
import pytest

from pairload import make_loader
from pairload.pack.writer import PackOptions, pack

from conftest import make_raw

N = 43  # prime: no batch size or worker count divides it


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("wds")
    make_raw(root / "raw", N, split="train", size=(24, 32))
    pack(root / "raw", root / "shards", PackOptions(workers=1, shard_size=64 * 1024))  # ~12 pairs per shard
    return root / "shards"


def epoch_rows(loader, epoch):
    loader.set_epoch(epoch)
    out = []
    for b in loader:
        low, high = b.low.numpy(), b.high.numpy()
        assert np.array_equal(high, 255 - low)
        index = [int(v) for v in low[:, 0, 0, 0]]
        assert [f"{i:05d}" for i in index] == b.keys  # the pixels are the key's
        out.append((index, b.padded.numpy().tolist()))
    return out


@pytest.mark.parametrize("workers", [0, 1, 2, 3, 4])
def test_one_rank_any_workers(shards, workers):
    bs = 5
    for mode in ("drop", "partial", "pad"):
        loader = make_loader("wds", shards, batch_size=bs, crop=16, seed=1, num_workers=workers, last_batch=mode)
        rows = epoch_rows(loader, 0)
        loader.close()
        seen = [i for idx, _ in rows for i in idx]
        real = [i for idx, pad in rows for i, p in zip(idx, pad) if not p]
        assert len(rows) == len(loader)
        if mode == "drop":
            assert all(len(idx) == bs for idx, _ in rows)
            assert len(set(seen)) == len(seen) and N - len(seen) <= bs - 1
            assert loader.skipped == N - len(seen)
        elif mode == "partial":
            assert sorted(seen) == list(range(N))
        else:
            assert sorted(real) == list(range(N)) and all(len(idx) == bs for idx, _ in rows)
            assert set(seen) - set(real) <= set(real)  # repeats come from the rank's own stream, flagged


@pytest.mark.parametrize("ws", [2, 3, 4])
@pytest.mark.parametrize("workers", [0, 2])
def test_several_ranks_equal_batch_counts_and_the_skipped_set_moves(shards, ws, workers):
    bs = 3
    seen_over_epochs = set()
    loaders = [make_loader("wds", shards, batch_size=bs, crop=16, seed=2, rank=r, world_size=ws, num_workers=workers)
               for r in range(ws)]
    for epoch in range(12):
        per_rank, skipped = [], 0
        for loader in loaders:
            rows = epoch_rows(loader, epoch)
            skipped += loader.skipped
            per_rank.append([i for idx, _ in rows for i in idx])
        assert len({len(p) for p in per_rank}) == 1  # every rank delivers as many batches
        flat = [i for p in per_rank for i in p]
        assert len(flat) == len(set(flat)) and N - len(flat) == skipped
        assert skipped <= ws * (12 + bs)  # at most about one shard's worth per rank
        seen_over_epochs |= set(flat)
    for loader in loaders:
        loader.close()
    assert seen_over_epochs == set(range(N))  # the skipped samples change with the epoch


def test_an_epoch_is_reproducible_with_workers(shards):
    a = make_loader("wds", shards, batch_size=4, crop=16, seed=5, num_workers=3)
    b = make_loader("wds", shards, batch_size=4, crop=16, seed=5, num_workers=3)
    assert epoch_rows(a, 2) == epoch_rows(b, 2) and epoch_rows(a, 3) != epoch_rows(a, 2)
    a.close()
    b.close()


@pytest.mark.parametrize("kind", ["ram", "wds"])
def test_every_sample_is_delivered_when_the_shards_are_evicted_between_epochs(shards, kind):
    from pairload.bench.loaders import evict
    from pairload.read.shards import ShardDataset

    files = ShardDataset(shards, "train").files
    loader = make_loader(kind, shards, batch_size=4, crop=16, seed=3, num_workers=2, last_batch="partial")
    for epoch in range(3):
        loader.close()  # no process maps the shards: the eviction really empties the page cache
        evict(files)
        rows = epoch_rows(loader, epoch)
        assert sorted(i for idx, _ in rows for i in idx) == list(range(N))
    loader.close()


def _shard_of(shards):
    from pairload.read.shards import ShardDataset

    ds = ShardDataset(shards, "train")
    return dict(zip(ds.keys, ds.index.shard.tolist())), len(ds.files)


def test_a_rank_reads_its_own_block_of_shards_one_window_at_a_time(shards):
    shard_of, n_shards = _shard_of(shards)
    assert n_shards >= 3
    per_rank = []
    for r in range(2):
        loader = make_loader("wds", shards, batch_size=2, crop=16, seed=4, rank=r, world_size=2,
                             last_batch="partial", shuffle_buffer=1, num_workers=2)
        seq = [shard_of[k] for b in loader for k in b.keys]
        loader.close()
        # window of one shard: the rank finishes each shard before it starts the next
        changes = sum(a != b for a, b in zip(seq, seq[1:]))
        assert changes == len(set(seq)) - 1, seq
        per_rank.append(set(seq))
    assert len(per_rank[0] & per_rank[1]) <= 1  # at most the shard the block boundary cuts
    assert per_rank[0] | per_rank[1] == set(range(n_shards))


def test_shuffle_windows_are_bounded_by_memory_and_part_of_the_plan(shards):
    from pairload import ConfigError
    from pairload.loaders.byshard import SHUFFLE_BYTES, auto_shuffle_buffer

    big = 3840 * 2160 * 6  # 4K pairs: 50 MB each
    assert auto_shuffle_buffer(big) == SHUFFLE_BYTES // big == 21
    assert auto_shuffle_buffer(600 * 400 * 6) * 600 * 400 * 6 <= SHUFFLE_BYTES
    assert auto_shuffle_buffer(2 * SHUFFLE_BYTES) == 1
    loader = make_loader("wds", shards, batch_size=2, crop=16, num_workers=2)
    assert loader.shuffle_buffer == SHUFFLE_BYTES // (32 * 24 * 6)  # the whole tiny split is one window
    whole = sorted(k for b in loader for k in b.keys)
    assert len(whole) == N - N % 2
    other = make_loader("wds", shards, batch_size=2, crop=16, num_workers=2, shuffle_buffer=8)
    next(iter(loader))
    with pytest.raises(ConfigError, match=rf"deal was 'by_shard, shuffle buffer {loader.shuffle_buffer}'"):
        other.load_state_dict(loader.state_dict())  # another window gives another order: refused, named
    with pytest.raises(ConfigError, match=r"shuffle_buffer=0: expected at least 1 sample"):
        make_loader("wds", shards, batch_size=2, crop=16, shuffle_buffer=0)
    loader.close()


@pytest.mark.parametrize("kind", ["ram", "wds"])
def test_batches_are_the_same_when_each_is_dropped_from_the_page_cache_once_cut(shards, kind, monkeypatch):
    """A split larger than the memory that could cache it: the workers drop each batch's pages once cut, and a thread
    of the loading process asks for the batches ahead (or none does); what is delivered does not change."""
    import pairload.cut.workers as cut_workers

    rows = {}
    for outgrows, ahead in ((False, True), (True, True), (True, False)):
        monkeypatch.setattr(cut_workers, "outgrows_cache", lambda nbytes, mem=None, v=outgrows: v)
        loader = make_loader(kind, shards, batch_size=4, crop=16, seed=5, num_workers=2, last_batch="partial")
        assert loader.cutter.evict is outgrows
        loader.cutter.read_ahead = ahead
        rows[outgrows, ahead] = [epoch_rows(loader, epoch) for epoch in range(2)]
        reader = loader.cutter.reader
        assert (reader is not None and reader.alive and reader.asked > 0 and reader.failed is None) is ahead
        loader.close()
        assert loader.cutter.reader is None and (reader is None or not reader.alive)  # the thread stops with it
    assert rows[True, True] == rows[False, True] == rows[True, False]
    assert sorted(i for idx, _ in rows[True, True][1] for i in idx) == list(range(N))
