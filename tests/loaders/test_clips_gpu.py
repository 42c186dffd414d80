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


def test_degraded_clips_on_the_gpu(video: Path):
    """lowlight on clips: every CUDA path the same degraded bytes per clip, the CPU within the stated tolerance,
    one parameter set per clip."""
    import numpy as np

    common = dict(batch_size=3, crop=16, clips="4,short=pad", seed=5, last_batch="partial", degrade="lowlight")

    def inputs(loader):
        got = {}
        for batch in loader:
            assert all(v.shape == (len(batch),) for v in batch.degradation.values())
            for i in range(len(batch)):
                got.setdefault(tuple(batch.keys[i]), []).append(batch.low[i].cpu().numpy())
        loader.close()
        return got

    ref = inputs(make_loader("ram", video, device="cuda", zero_copy=True, **common))
    for kind, extra in (("ram", {"resident": True}), ("ram", {"zero_copy": False, "num_workers": 2}), ("wds", {})):
        got = inputs(make_loader(kind, video, device="cuda", **common, **extra))
        assert got.keys() == ref.keys()
        for k in got:
            assert sorted(a.tobytes() for a in got[k]) == sorted(a.tobytes() for a in ref[k]), (kind, extra, k)
    cpu = inputs(make_loader("ram", video, **common))
    diff = np.concatenate([np.abs(sorted(ref[k], key=bytes)[0].astype(int) - sorted(cpu[k], key=bytes)[0])
                           .ravel() for k in ref if len(ref[k]) == 1])
    assert diff.max() <= 1 and (diff > 0).mean() <= 2e-3
