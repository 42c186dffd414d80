"""The wds loader's exactness: no sample lost to a worker's remainder, pad and partial, equal batch counts across
ranks with the skipped samples reported and changing with the epoch. Pixels encode the pair index."""

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


def test_shuffle_buffers_are_bounded_by_memory_not_only_by_count(shards):
    from pairload import ConfigError
    from pairload.loaders.wds import SHUFFLE_BYTES, SHUFFLE_MOST, auto_shuffle_buffer

    assert auto_shuffle_buffer(40 * 56 * 6, 2) == SHUFFLE_MOST  # small pairs: the usual 256 per worker
    big = 3840 * 2160 * 6  # 4K pairs: 50 MB each
    assert auto_shuffle_buffer(big, 15) == max(2, SHUFFLE_BYTES // (15 * big)) == 2
    assert auto_shuffle_buffer(600 * 400 * 6, 15) * 15 * 600 * 400 * 6 <= SHUFFLE_BYTES
    loader = make_loader("wds", shards, batch_size=2, crop=16, num_workers=2)
    assert loader.shuffle_buffer == SHUFFLE_MOST
    assert make_loader("wds", shards, batch_size=2, crop=16, shuffle_buffer=8).shuffle_buffer == 8
    other = make_loader("wds", shards, batch_size=2, crop=16, num_workers=2, shuffle_buffer=8)
    with pytest.raises(ConfigError, match=r"deal was 'by shard, 2 workers, shuffle buffer 256'"):
        other.load_state_dict(loader.state_dict())  # another buffer gives another order: refused, named
