"""Fixtures that build tiny datasets in tmp_path whose pixels make mistakes visible.

Pair i's low image has pixel (y, x) = (i, y, x) mod 256 in its three channels, and the high image is exactly
255 - low, so a crop or flip applied differently to the two images, or two images from different pairs, are
caught by one comparison; the pair index can be read back from any pixel's first channel.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from s3server import s3  # noqa: F401 - the session's S3-compatible server (moto), for tests of URL destinations

# the benchmarks' own code (`benchlib`: no part of the package) is tested too, and its DNG writer builds test data
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
# the tests mirror the package, a folder per subpackage; a test module may import another's helpers by name
# (`from test_loaders import check_batch`) wherever the two sit
sys.path[1:1] = sorted(str(d) for d in Path(__file__).resolve().parent.rglob("*") if d.is_dir()
                       and not d.name.startswith((".", "_")))


def pair_pixels(index: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """RGB uint8 (low, high) of pair `index`: channel 0 holds the index, 1 and 2 the row and column."""
    yy, xx = np.mgrid[0:height, 0:width]
    low = np.stack([np.full_like(yy, index), yy, xx], axis=-1) % 256
    low = low.astype(np.uint8)
    return low, (255 - low).astype(np.uint8)


def write_rgb(path: Path, rgb: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.ascontiguousarray(rgb[..., ::-1]))


def make_raw(root: Path, n: int = 6, size: tuple[int, int] = (40, 56), ext: str = ".png", split: str | None = None,
             low: str = "low", high: str = "high", start: int = 0, sizes: list[tuple[int, int]] | None = None) -> Path:
    """Write n pairs named 00000.ext… under root/[split/]{low,high}/; returns root."""
    base = root / split if split else root
    for i in range(start, start + n):
        h, w = sizes[i - start] if sizes else size
        lo, hi = pair_pixels(i, h, w)
        write_rgb(base / low / f"{i:05d}{ext}", lo)
        write_rgb(base / high / f"{i:05d}{ext}", hi)
    return root


def raw_and_shards(root: Path, train: int, *, test: int = 0, size: tuple[int, int] = (40, 56)) -> Path:
    """root/raw with `train` (and `test`, numbered from 200) pairs, packed into root/shards in 64 KB shards."""
    from pairload.pack import PackOptions, pack

    make_raw(root / "raw", train, split="train", size=size)
    if test:
        make_raw(root / "raw", test, split="test", start=200, size=size)
    pack(root / "raw", root / "shards", PackOptions(workers=1, shard_size=64 * 1024))
    return root


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    skip_dali = pytest.mark.skip(reason="needs nvidia-dali (pip install 'pairload[dali]')")
    gpu, dali = cuda_available(), has_module("nvidia.dali")
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(skip_gpu)
        if "dali" in item.keywords and not dali:
            item.add_marker(skip_dali)


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    """train (8 pairs of 40x56) and test (4 pairs) splits of PNG pairs."""
    root = tmp_path / "raw"
    make_raw(root, 8, split="train")
    make_raw(root, 4, split="test", start=100)
    return root


@pytest.fixture
def packed(raw: Path, tmp_path: Path) -> Path:
    from pairload.pack.writer import PackOptions, pack

    out = tmp_path / "shards"
    pack(raw, out, PackOptions(workers=1, shard_size=64 * 1024))
    return out


def kill_when_written(proc, folder: Path, pattern: str, timeout: float = 120) -> None:
    """SIGKILL `proc` as soon as a file matching `pattern` (a half-written shard, say) appears in `folder`, and
    reap it; skip the test if it finished before it could be killed."""
    import signal
    import time

    deadline = time.monotonic() + timeout
    while not list(folder.glob(pattern)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    if proc.returncode == 0:
        pytest.skip("it finished before it could be killed")


def kill_tree(pid: int) -> None:
    """SIGKILL process `pid` and every process under it at once, as a machine losing power would. Killing torchrun's
    process group is not enough: torchrun starts each rank in a session of its own (`start_new_session`), so its
    ranks would keep training without it. Each process is stopped before its children are listed, so none can fork
    one unseen; then all are killed."""
    import psutil

    try:
        todo = [psutil.Process(pid)]
    except psutil.NoSuchProcess:
        return
    stopped: dict[int, psutil.Process] = {}
    while todo:
        p = todo.pop()
        if p.pid in stopped:
            continue
        try:
            p.suspend()
            todo.extend(p.children())
        except psutil.NoSuchProcess:
            continue
        stopped[p.pid] = p
    for p in stopped.values():
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
