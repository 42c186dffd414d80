"""The memory a process may use, under a cgroup limit (v1 and v2 file layouts, and a real limited cgroup where this
machine lets a test make one): what the page cache may pin is a fraction of it, and a split bigger than the limit
is still read whole, with a warning naming the limit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pairload.hostmemory import HostMemory, host_memory, outgrows_cache

MB = 1 << 20


def _tree(tmp_path: Path, listing: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc = tmp_path / "proc_cgroup"
    proc.write_text(listing)
    return root, proc


def test_v2_limit_of_a_parent_bounds_the_process(tmp_path):
    root, proc = _tree(tmp_path, "0::/job/step\n", {
        "job/memory.max": str(512 * MB), "job/memory.current": str(300 * MB),
        "job/memory.stat": f"anon {100 * MB}\nactive_file {150 * MB}\ninactive_file {50 * MB}\n",
        "job/step/memory.max": "max", "job/step/memory.current": str(200 * MB)})
    got = host_memory(root, proc)
    assert got.total == 512 * MB
    assert got.available == 512 * MB - (300 - 200) * MB  # the file pages it holds can be reclaimed
    assert got.limit == str(root / "job") and "memory limit in" in got.describe()


def test_v1_limit_and_no_limit(tmp_path):
    root, proc = _tree(tmp_path, "4:memory:/slurm/job_7\n3:cpu:/other\n", {
        "memory/slurm/job_7/memory.limit_in_bytes": str(2048 * MB),
        "memory/slurm/job_7/memory.usage_in_bytes": str(1024 * MB),
        "memory/slurm/job_7/memory.stat": f"total_inactive_file {24 * MB}\ntotal_active_file 0\n",
        "memory/slurm/memory.limit_in_bytes": "9223372036854771712"})
    got = host_memory(root, proc)
    assert (got.total, got.available) == (2048 * MB, 1048 * MB)
    unlimited = host_memory(tmp_path / "nothing", tmp_path / "no_such_file")
    assert unlimited.limit == "" and unlimited.total > 2048 * MB  # the machine's own memory


def _limited_cgroup(name: str, limit: int) -> Path | None:
    """A new cgroup limited to `limit` bytes (v1 or v2), or None where this machine does not let a test make one."""
    for folder, limit_file in ((Path("/sys/fs/cgroup/memory") / name, "memory.limit_in_bytes"),
                               (Path("/sys/fs/cgroup") / name, "memory.max")):
        if not folder.parent.is_dir() or not os.access(folder.parent, os.W_OK):
            continue
        try:
            folder.mkdir()
        except OSError:
            continue
        try:
            (folder / limit_file).write_text(str(limit))
            return folder
        except OSError:
            folder.rmdir()
    return None


@pytest.fixture
def cgroup_160mb():
    folder = _limited_cgroup(f"pairload-test-{os.getpid()}", 160 * MB)
    if folder is None:
        pytest.skip("this machine does not let a test make a memory-limited cgroup (not root, or cgroupfs read-only)")
    yield folder
    _remove_cgroup(folder)


def _remove_cgroup(folder: Path) -> None:
    """Remove a cgroup `_limited_cgroup` made, once the test's processes have left it."""
    for _ in range(50):
        try:
            folder.rmdir()
            return
        except OSError:  # the test's process is still leaving it
            import time

            time.sleep(0.1)


def test_a_split_bigger_than_the_limit_is_read_whole(tmp_path, cgroup_160mb):
    """A real cgroup of 160 MB (for what the process allocates after joining it: its imports stay charged where they
    were) and a 300 MB split: the ram loader reads every pair, right, with the limit named, and is not killed."""
    from pairload.pack import PackOptions, pack

    h, w, n = 400, 640, 200
    for i in range(n):
        low = np.full((h, w, 3), i, np.uint8)
        low[..., 1] = (np.arange(h) % 256).astype(np.uint8)[:, None]
        for side, img in (("low", low), ("high", 255 - low)):
            (tmp_path / "raw" / side).mkdir(parents=True, exist_ok=True)
            np.save(tmp_path / "raw" / side / f"{i:05d}.npy", img)
    pack(tmp_path / "raw", tmp_path / "shards", PackOptions(workers=1, shard_size=16 * MB))
    os.sync()
    script = textwrap.dedent(f"""
        import os, warnings
        import numpy as np
        import torch
        import pairload
        import pairload.loaders.shards, pairload.cut.workers, pairload.read.dataset  # imported before joining
        from pairload.hostmemory import HostMemory, host_memory, outgrows_cache
        with open({str(cgroup_160mb / "cgroup.procs")!r}, "w") as f:
            f.write(str(os.getpid()))
        mem = host_memory()
        assert mem.total == {160 * MB} and mem.limit, mem
        seen = set()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = pairload.make_loader("ram", {str(tmp_path / "shards")!r}, batch_size=4, crop=({h}, {w}),
                                          augment=False, num_workers=0)
        assert any("under the memory limit" in str(c.message) for c in caught), [str(c.message) for c in caught]
        for batch in loader:
            low, high = batch.low.permute(0, 2, 3, 1).numpy(), batch.high.permute(0, 2, 3, 1).numpy()
            assert (high == 255 - low).all()
            for row in low:
                assert (row[..., 0] == row[0, 0, 0]).all() and (row[:, 0, 1] == np.arange({h}) % 256).all()
                seen.add(int(row[0, 0, 0]))
        print("pairs", len(seen))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == str(n)


def test_a_split_outgrows_the_cache_by_the_limit_under_one_else_by_the_memory_available():
    limited = HostMemory(total=1000 * MB, available=300 * MB, limit="/sys/fs/cgroup/job")
    assert not outgrows_cache(800 * MB, limited)  # the page cache may take the whole limit: reclaimed pages count
    assert outgrows_cache(950 * MB, limited)
    free = HostMemory(total=64_000 * MB, available=1000 * MB)
    assert not outgrows_cache(800 * MB, free)
    assert outgrows_cache(950 * MB, free)


def test_a_limit_that_leaves_the_page_cache_no_room_is_named_with_the_fix():
    from pairload.hostmemory import ROOM, room_note

    tight = HostMemory(total=160 * MB, available=30 * MB, limit="/sys/fs/cgroup/job")
    note = room_note(4 * MB, tight)
    assert note.startswith("under the memory limit in /sys/fs/cgroup/job (160.0 MB) the job's processes hold 130.0 MB,"
                           " leaving 30.0 MB for the page cache")
    assert "raise the limit (SLURM --mem" in note
    assert room_note(4 * MB, HostMemory(total=160 * MB, available=ROOM + 4 * MB, limit="/sys/fs/cgroup/job")) is None
    assert room_note(4 * MB, HostMemory(total=160 * MB, available=30 * MB)) is None  # no limit: the machine's memory


@pytest.mark.slow
def test_the_loader_warns_at_its_first_batch_where_a_real_limit_leaves_the_page_cache_no_room(tmp_path, cgroup_160mb):
    """Under a real 160 MB cgroup in which the job's processes hold ~120 MB (here a 96 MB array standing for the
    training's own memory), what is left cannot keep what the loader reads: every read is pushed out again at once,
    the processes' own code too (ram with 2 workers under 160 MB took 31.8 s for 21 batches where 250 MB took 2.2 s,
    2-core VM, 2026-11-30). The first batch says so, with the fix; under 512 MB it says nothing."""
    import cv2

    from pairload.pack import PackOptions, pack

    (tmp_path / "photos").mkdir()
    for i in range(24):
        img = np.random.default_rng(i).integers(0, 256, (400, 640, 3), dtype=np.uint8)
        assert cv2.imwrite(str(tmp_path / "photos" / f"{i:03d}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 90])
    pack(tmp_path / "photos", tmp_path / "shards", PackOptions(workers=1, store="encoded", targets_only=True))
    roomy = _limited_cgroup(f"pairload-test-roomy-{os.getpid()}", 512 * MB)
    assert roomy is not None  # the machine made the first one

    def first_batch_notes(cgroup: Path) -> list[str]:
        script = textwrap.dedent(f"""
            import os, warnings
            import numpy as np
            import torch
            import pairload
            import pairload.loaders.shards, pairload.cut.workers, pairload.read.dataset  # imported before joining
            with open({str(cgroup / "cgroup.procs")!r}, "w") as f:
                f.write(str(os.getpid()))
            held = np.ones(96 << 20, np.uint8)  # the training's own memory, charged to the limit
            loader = pairload.make_loader("ram", {str(tmp_path / "shards")!r}, batch_size=4, crop=128, seed=0,
                                          degrade="lowlight", num_workers=0)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                batch = next(iter(loader))
            assert batch.high.shape == (4, 3, 128, 128) and held.sum() == held.size
            print(repr([str(c.message) for c in caught if "for the page cache" in str(c.message)]))
        """)
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return eval(proc.stdout.strip().splitlines()[-1])

    try:
        tight = first_batch_notes(cgroup_160mb)
        assert len(tight) == 1 and "leaving" in tight[0] and "raise the limit" in tight[0], tight
        assert first_batch_notes(roomy) == []
    finally:
        _remove_cgroup(roomy)


def test_the_room_is_looked_at_again_as_the_jobs_memory_grows_and_named_once(tmp_path, monkeypatch):
    # the training's memory grows after the first batch: the loader looks again every ROOM_CHECK_S (0 here: every
    # batch) until the room is found too little, says so once and stops looking
    import warnings

    import pairload.hostmemory
    from pairload import make_loader
    from pairload.loaders import shards
    from pairload.pack import PackOptions, pack

    from conftest import make_raw

    make_raw(tmp_path / "raw", 12, split="train", size=(32, 48))
    pack(tmp_path / "raw", tmp_path / "shards", PackOptions(workers=1))
    looked: list[int] = []

    def room_note(in_flight, mem=None):
        looked.append(in_flight)
        return "leaving 1 MB for the page cache" if len(looked) >= 3 else None

    monkeypatch.setattr(pairload.hostmemory, "room_note", room_note)
    monkeypatch.setattr(shards, "ROOM_CHECK_S", 0.0)
    loader = make_loader("ram", tmp_path / "shards", batch_size=2, crop=16, num_workers=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            assert len(list(loader)) == 6  # every batch delivered, whatever the room
    notes = [str(c.message) for c in caught if "for the page cache" in str(c.message)]
    assert notes == ["leaving 1 MB for the page cache"] and len(looked) == 3
    assert looked[0] > 0  # a few batches' stored bytes in flight
