"""Typed members: a split of another dtype, channel count and size relation reads, cuts and loads exactly through
every shard loader on the CPU, its windows aligned (the target's at the input's place times the scale); the
orientation table and the crop policies behave as their reference says."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pairload import ConfigError, ShardError, make_loader, open_shards
from pairload.dihedral import CODES, TRANSPOSE, matrices, orient, source_index
from pairload.format.members import Member, Members
from pairload.plan import key_hashes, sample_params

from typed_split import write_typed_split

RAWLIKE = Members(low=Member("uint16", 4), high=Member("uint16", 3), scale=2)


@pytest.fixture(scope="module")
def rawlike(tmp_path_factory):
    folder = tmp_path_factory.mktemp("typed") / "shards"
    arrays = write_typed_split(folder, RAWLIKE, [(12, 16)] * 9 + [(14, 12)] * 3, per_shard=4)
    return folder, arrays


def test_dataset_reads_typed_members_with_their_shapes(rawlike):
    folder, arrays = rawlike
    ds = open_shards(folder)
    assert ds.members == RAWLIKE and len(ds) == 12
    for i, key in enumerate(ds.keys):
        low, high = ds.arrays(i)
        assert low.dtype == np.uint16 and high.dtype == np.uint16
        np.testing.assert_array_equal(low, arrays[key][0])
        np.testing.assert_array_equal(high, arrays[key][1])


def expected(arrays, key, epoch, seed, crop, hw):
    y, x, code = (int(v[0]) for v in sample_params(key_hashes([key]), np.array([hw]), seed=seed, epoch=epoch,
                                                   crop=crop, augment=True))
    ch, cw = crop if isinstance(crop, tuple) else (crop, crop)
    low, high = arrays[key]
    return orient(low[y:y + ch, x:x + cw], code), orient(high[2 * y:2 * (y + ch), 2 * x:2 * (x + cw)], code)


@pytest.mark.parametrize("kind,options,workers", [("ram", {}, 0), ("ram", {}, 2), ("ram", {"resident": True}, 0),
                                                  ("wds", {}, 0), ("wds", {}, 2),
                                                  pytest.param("dali-external", {}, 2, marks=pytest.mark.dali)])
@pytest.mark.parametrize("crop", [6, (4, 10)])
def test_every_shard_loader_cuts_typed_members_exactly(rawlike, kind, options, workers, crop):
    if kind.startswith("dali"):
        pytest.importorskip("nvidia.dali")
    folder, arrays = rawlike
    hw = {k: a[0].shape[:2] for k, a in arrays.items()}
    with make_loader(kind, folder, batch_size=3, crop=crop, seed=5, num_workers=workers, **options) as loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            seen = 0
            for batch in loader:
                ch, cw = crop if isinstance(crop, tuple) else (crop, crop)
                assert batch.low.dtype == torch.uint16 and tuple(batch.low.shape[1:]) in ((4, ch, cw), (4, cw, ch))
                assert batch.high.shape[1] == 3 and batch.high.shape[2:] == tuple(2 * d for d in batch.low.shape[2:])
                for j, key in enumerate(batch.keys):
                    lo, hi = expected(arrays, key, epoch, 5, crop, hw[key])
                    np.testing.assert_array_equal(batch.low[j].permute(1, 2, 0).numpy(), lo)
                    np.testing.assert_array_equal(batch.high[j].permute(1, 2, 0).numpy(), hi)
                    seen += 1
            assert seen == len(loader) * 3


def test_a_damaged_members_field_is_named(rawlike, tmp_path):
    folder, _ = rawlike
    doc = json.loads((folder / "manifest.json").read_text())
    doc["splits"]["train"]["members"]["low"]["dtype"] = "float32"
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in folder.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    (bad / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"split 'train': \"members\" is .*float32.*expected one of uint8, uint16"):
        open_shards(bad)


def test_orientation_reference_gather_form_and_matrices_agree():
    rng = np.random.default_rng(1)
    for h, w in ((5, 5), (4, 7)):
        window = rng.integers(0, 255, (h, w, 2))
        for code in CODES:
            if h != w and code & TRANSPOSE:
                continue
            out = orient(window, code)
            oh, ow = out.shape[:2]
            m = matrices(np.array([code]), np.array([[oh, ow]]))[0]
            for i in range(oh):
                for j in range(ow):
                    si, sj = source_index(code, oh, ow, i, j)
                    assert (out[i, j] == window[si, sj]).all()
                    # DALI's inverse map sends the output pixel's centre to the source pixel's centre
                    sx, sy = m @ np.array([j + 0.5, i + 0.5, 1.0])
                    assert (int(np.floor(sy)), int(np.floor(sx))) == (si, sj)


def test_crop_policies_fit_and_never_transpose_a_rectangle():
    keys = [f"k{i}" for i in range(400)]
    hw = np.array([[30, 40]] * 400)
    for crop in (8, (6, 20), None):
        y, x, code = sample_params(key_hashes(keys), hw, seed=3, epoch=1, crop=crop, augment=True)
        ch, cw = (8, 8) if crop == 8 else (6, 20) if crop else (30, 40)
        assert (y >= 0).all() and (y + ch <= 30).all() and (x + cw <= 40).all()
        if crop is not None:  # every corner is reachable: the draws cover the range
            assert y.max() == 30 - ch and x.max() == 40 - cw
        assert bool((code & TRANSPOSE).any()) == (ch == cw)


@pytest.mark.parametrize("crop", [32.5, True, "64", (8,), (8, 0)])
def test_a_crop_that_is_not_a_size_is_refused(crop):
    with pytest.raises(ConfigError, match=r"crop=.*expected"):
        make_loader("ram", "nowhere", batch_size=2, crop=crop)


@pytest.mark.parametrize("version, says", [("1", r"\"version\" is the string '1'; it must be the number 1"),
                                           (9, r"shard format version 9, this pairload reads versions 1, 2, 3, 4"),
                                           (True, r"shard format version True")])
def test_a_manifest_version_that_is_not_a_known_number_is_named(rawlike, tmp_path, version, says):
    folder, _ = rawlike
    doc = json.loads((folder / "manifest.json").read_text())
    doc["version"] = version
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=says):
        open_shards(tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("kind,options", [("ram", {"zero_copy": True}), ("ram", {"resident": True}),
                                          ("ram", {"zero_copy": False}),
                                          pytest.param("dali-external", {"zero_copy": True}, marks=pytest.mark.dali)])
def test_typed_members_on_the_gpu_through_the_kernel_and_the_workers(rawlike, kind, options):
    """The zero-copy kernel, the resident copy, the workers with the device's orientation step, and DALI fed the
    kernel's uint16 batches: each batch equals numpy crops of the arrays written."""
    if kind.startswith("dali"):
        pytest.importorskip("nvidia.dali")
    folder, arrays = rawlike
    hw = {k: a[0].shape[:2] for k, a in arrays.items()}
    with make_loader(kind, folder, batch_size=3, crop=6, seed=2, num_workers=2, device="cuda", **options) as loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            for batch in loader:
                assert batch.low.is_cuda and batch.low.dtype == torch.uint16 and batch.high.shape[1] == 3
                for j, key in enumerate(batch.keys):
                    lo, hi = expected(arrays, key, epoch, 2, 6, hw[key])
                    np.testing.assert_array_equal(batch.low[j].permute(1, 2, 0).cpu().numpy(), lo)
                    np.testing.assert_array_equal(batch.high[j].permute(1, 2, 0).cpu().numpy(), hi)
