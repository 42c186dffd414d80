"""The one job type of `pairload.pack.jobs`: a raw job and a compressed job of the same pair store the same pixels
with the same notes and CRCs, and a failed job says whose fault it is (the pair's or the output's)."""

import io
import os
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import pair_pixels, write_rgb
from pairload import ImageError, OutputError
from pairload.format.encoding import ZSTD
from pairload.pack.jobs import Job, run_job


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """A gray low image (which decodes to three equal channels) and an RGB high image of 40x56."""
    low, high = pair_pixels(3, 40, 56)
    gray = low[..., 1]  # the row index: the three decoded channels must all hold it
    assert cv2.imwrite(str(tmp_path / "low.png"), gray)
    write_rgb(tmp_path / "high.png", high)
    return tmp_path / "low.png", tmp_path / "high.png", np.dstack([gray] * 3), high


def job(pair, **where) -> Job:
    return Job(7, pair[0], pair[1], (40, 56), (40, 56), (40, 56), False, **where)


def test_a_raw_job_and_a_compressed_job_store_the_same_pixels(pair, tmp_path):
    pytest.importorskip("zstandard")
    from pairload.format.schema import npy_header

    _, _, low, high = pair
    size = 40 * 56 * 3
    shard = tmp_path / "s.tar.partial"
    shard.write_bytes(bytes(100 + 2 * size))
    raw = run_job(job(pair, file=str(shard), low_off=100, high_off=100 + size)).check()
    zst = run_job(job(pair, encoding=ZSTD, level=3)).check()

    data = shard.read_bytes()
    assert data[100:100 + size] == low.tobytes() and data[100 + size:] == high.tobytes()
    for frame, pixels in ((zst.low_frame, low), (zst.high_frame, high)):
        npy = ZSTD.decode(frame, len(npy_header(40, 56)) + size)
        assert np.array_equal(np.load(io.BytesIO(npy)), pixels)
    assert raw.index == zst.index == 7 and raw.notes == zst.notes == ("low:gray",)
    assert (raw.crc_low, raw.crc_high) == (zst.crc_low, zst.crc_high) == (zlib.crc32(low), zlib.crc32(high))
    assert raw.low_frame is None and zst.without_frames().low_frame is None


def test_a_job_sharing_its_target_stores_only_the_low_image(pair, tmp_path):
    shard = tmp_path / "s.tar.partial"
    shard.write_bytes(bytes(40 * 56 * 3 + 8))
    res = run_job(Job(0, pair[0], None, (40, 56), (40, 56), (40, 56), False, file=str(shard), low_off=8)).check()
    assert res.crc_high is None and shard.read_bytes()[8:] == pair[2].tobytes()


def test_an_unreadable_image_is_the_pairs_fault_and_a_missing_shard_the_outputs(pair, tmp_path):
    pair[0].write_bytes(b"not a png")
    with pytest.raises(ImageError, match=rf"^{pair[0]}"):
        run_job(job(pair, encoding=ZSTD, level=3)).check()
    write_rgb(pair[0], pair[3])
    missing = tmp_path / "gone" / "s.tar.partial"
    res = run_job(job(pair, file=str(missing), low_off=0, high_off=0))
    assert res.output_failed
    with pytest.raises(OutputError, match=rf"^{missing}: cannot write this file \(No such file or directory\); check "
                                          r"the folder's permissions and free space"):
        res.check()


def test_a_job_needs_exactly_one_destination(pair):
    with pytest.raises(ValueError, match="either a shard file"):
        job(pair)
    with pytest.raises(ValueError, match="either a shard file"):
        job(pair, file="x", level=3)
    with pytest.raises(ValueError, match="either a shard file"):
        job(pair, file="x", encoding=ZSTD, level=3)
    with pytest.raises(ValueError, match="either a shard file"):
        job(pair, encoding=ZSTD)


def test_idle_openblas_pools_are_shut_down_so_the_pack_forks_its_workers_and_blas_still_works():
    """numpy and OpenCV each start an OpenBLAS thread pool on import; `start_method` shuts those idle pools down (as
    OpenBLAS itself does before a fork) and then finds one thread, so workers fork instead of spawning 16
    interpreters. OpenBLAS starts its pool again on its next call, and its results are unchanged."""
    import subprocess
    import sys

    code = ("import os, numpy as np, cv2\n"
            "from pairload.forking import start_method, threads\n"
            "a = np.arange(40000, dtype=np.float64).reshape(200, 200) % 7; want = a @ a\n"
            "before = threads()\n"
            "print(before, start_method(), threads(), bool((a @ a == want).all()))\n")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}  # a pool even on a 1-core machine
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    before, method, after, same = res.stdout.split()
    assert int(before) > 1, "the test needs OpenBLAS pools running"
    assert (method, after, same) == ("fork", "1", "True"), res.stderr[-2000:]


def test_spread_interleaves_a_chunks_shards_evenly_and_keeps_each_shards_order():
    from pairload.pack.shardwrite import spread

    chunk = [Job(i, Path(f"{i}.png"), Path(f"{i}h.png"), (4, 4), (4, 4), (4, 4), False, file=f"s{i // 10}",
                 low_off=0) for i in range(5, 35)]  # shard s0: 5 jobs, s1 and s2: 10 each, s3: 5
    out = spread(chunk)
    assert sorted(j.index for j in out) == [j.index for j in chunk]  # every job once
    for name in ("s0", "s1", "s2", "s3"):  # each shard's jobs in their own order…
        mine = [j.index for j in out if j.file == name]
        assert mine == sorted(mine)
        places = [k for k, j in enumerate(out) if j.file == name]  # …spread over the whole chunk
        assert places[0] < len(out) / 4 and places[-1] >= 3 * len(out) / 4, (name, places)
    single = [j for j in chunk if j.file == "s1"]
    assert spread(single) == single


def test_a_task_holds_one_large_pair_and_several_small_ones():
    from pairload.pack.shardwrite import task_size

    def chunk(h, w):
        return [Job(i, Path(f"{i}.png"), Path(f"{i}h.png"), (h, w), (h, w), (h, w), False, file="s", low_off=0)
                for i in range(8)]

    assert task_size(chunk(1080, 1920)) == 1  # the workers' last tasks end together
    assert task_size(chunk(3000, 4000)) == 1
    assert task_size(chunk(400, 600)) == 8  # measured together (`jobs.measured`)
    assert task_size(chunk(256, 256)) == 16
    assert task_size(chunk(16, 16)) == 16  # a round trip per tiny pair would cost the parent more than the decode
    assert task_size([]) == 16
