"""Clips on a CUDA device: the zero-copy kernel, a resident copy, the workers, the streaming loader and DALI deliver
every clip with the bytes the CPU delivers (one window and one orientation across its frames, both sides)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from clipdata import make_video_raw, pack_video, read_clip
from pairload import make_loader

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("video")
    make_video_raw(root / "raw", [7, 5, 9, 3])
    return pack_video(root / "raw", root / "shards")


def _clips(loader) -> Counter:
    out = Counter()
    for batch in loader:
        for i in range(len(batch)):
            low, high = batch.low[i].cpu().numpy(), batch.high[i].cpu().numpy()
            read_clip(low, high)
            out[tuple(batch.keys[i]), low.tobytes()] += 1
    loader.close()
    return out


def _paths():
    paths = [("ram", {"zero_copy": True}), ("ram", {"resident": True}), ("ram", {"zero_copy": False, "num_workers": 2}),
             ("wds", {})]
    from conftest import has_module

    if has_module("nvidia.dali"):
        paths += [("dali-external", {}), ("dali-external", {"zero_copy": False, "num_workers": 2})]
    return paths


def test_every_cuda_path_delivers_the_cpu_clips(video: Path):
    common = dict(batch_size=3, crop=16, clips="4,short=pad", seed=5, last_batch="partial")
    want = _clips(make_loader("ram", video, **common))
    assert sum(want.values()) == 4 + 2 + 6 + 1
    for kind, extra in _paths():
        loader = make_loader(kind, video, device="cuda", **common, **extra)
        if extra.get("zero_copy"):
            assert loader.zero_copy, loader.path_note
        assert _clips(loader) == want, (kind, extra)
