"""Advice on a split's pages (what the worker path gives the kernel as it streams a split larger than memory):
`willneed` reads a sample's members into the page cache, `dontneed` drops them again (the pages wholly inside them;
a neighbour's stay), and neither changes what is read. Pixels encode the pair index."""

import ctypes
import mmap
import time
from pathlib import Path

import numpy as np
import pytest

from pairload.bench.bounds import evict
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import ShardDataset

from conftest import make_raw, pair_pixels

SIZE = (96, 128)  # 36 KB a member: nine pages


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pagecache")
    make_raw(root / "raw", 4, split="train", size=SIZE)
    pack(root / "raw", root / "shards", PackOptions(workers=1, shard_size=1 << 20))  # one shard
    return root / "shards"


def resident(ds: ShardDataset, i: int) -> float:
    """The share of the pages wholly inside sample i's two members that are in the page cache (mincore)."""
    mincore = ctypes.CDLL(None, use_errno=True).mincore
    idx, page = ds.index, mmap.PAGESIZE
    mm = ds.shard_map(int(idx.shard[i]))
    pages = []
    for off, n in ((int(idx.low[i]), int(idx.low_bytes[i])), (int(idx.high[i]), int(idx.high_bytes[i]))):
        a, b = -(-off // page) * page, (off + n) // page * page
        vec = (ctypes.c_ubyte * ((b - a) // page))()
        assert mincore(ctypes.c_void_p(mm.ctypes.data + a), ctypes.c_size_t(b - a), vec) == 0
        pages.append(np.frombuffer(vec, np.uint8) & 1)
    return float(np.concatenate(pages).mean())


def keeps_dropped_pages(path: Path) -> bool:
    """The file system keeps pages that posix_fadvise(DONTNEED) drops elsewhere (tmpfs: they are the file)."""
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        where, fstype = line.split()[1:3]
        if str(path.resolve()).startswith(where) and len(where) > len(best):
            best, kind = where, fstype
    return kind in ("tmpfs", "ramfs")


def test_willneed_reads_a_sample_and_dontneed_drops_it_leaving_its_neighbours(split):
    ds = ShardDataset(split, "train")
    evict(ds.files)
    ds.willneed([1])
    deadline = time.monotonic() + 10
    while resident(ds, 1) < 1.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert resident(ds, 1) == 1.0
    for i in range(len(ds)):
        ds.arrays(i)[0].sum()  # every page read (and mapped here)
    ds.dontneed([1])
    assert resident(ds, 0) == resident(ds, 2) == 1.0
    if keeps_dropped_pages(split) and resident(ds, 1) == 1.0:
        pytest.skip(f"{split} is on a file system whose pages are the file (tmpfs): nothing to drop")
    assert resident(ds, 1) == 0.0
    low, high = ds.arrays(1)  # read again from the file, the same pixels
    want = pair_pixels(1, *SIZE)
    assert np.array_equal(low, want[0]) and np.array_equal(high, want[1])


def test_advice_on_a_mix_goes_to_the_source_of_each_sample(split):
    from pairload import open_shards

    mix = open_shards({"a": split, "b": split})
    second = mix.sources[1]
    evict(second.files)
    mix.willneed([len(mix.sources[0]) + 2])  # the second source's sample 2
    deadline = time.monotonic() + 10
    while resident(second, 2) < 1.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert resident(second, 2) == 1.0
    for i in range(len(second)):
        second.arrays(i)[0].sum()
    mix.dontneed([len(mix.sources[0]) + 2])
    if keeps_dropped_pages(split) and resident(second, 2) == 1.0:
        pytest.skip(f"{split} is on a file system whose pages are the file (tmpfs): nothing to drop")
    assert resident(second, 2) == 0.0 and resident(second, 3) == 1.0


def test_a_decode_process_lets_go_of_the_pages_it_maps_so_that_the_loader_can_drop_them(split):
    # the loader's JPEG decode process maps the shards and reads each call's members; under a memory limit the loader
    # drops each call's pages once cut, which the kernel refuses for pages another process still maps
    from pairload.workers.decode import ShardMaps

    ds = ShardDataset(split, "train")
    maps = ShardMaps([str(f) for f in ds.files])
    rows = ds.stored_members([1, 2])
    shard, start, length = (np.repeat(rows.shard, 2).astype(np.int64), rows.offset.ravel().astype(np.int64),
                            rows.length.ravel().astype(np.int64))
    for s, a, n in zip(shard.tolist(), start.tolist(), length.tolist()):
        assert maps.map(s)[a:a + n].sum() > 0  # read there, as the decoder reads them
    maps.let_go(shard[:2], start[:2], length[:2])  # sample 1's two members: decoded
    ds.dontneed([1, 2])
    if keeps_dropped_pages(split) and resident(ds, 1) == 1.0:
        pytest.skip(f"{split} is on a file system whose pages are the file (tmpfs): nothing to drop")
    assert resident(ds, 1) == 0.0
    assert resident(ds, 2) == 1.0  # still mapped by the "process": the kernel keeps them
    maps.close()
