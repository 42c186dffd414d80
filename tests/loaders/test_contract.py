"""The loader contract, the same checks for every kind: PairBatch shape and dtype, len() equal to what an epoch
yields, epochs reproducible by a new loader, each sample at most once per epoch and every rank's share disjoint,
unknown options refused naming the accepted ones, a context manager that stops the workers, JSON-able state."""

import json

import numpy as np
import psutil
import pytest
import torch

from pairload import ConfigError, PairBatch, make_loader
from pairload.loaders import Loader

from conftest import raw_and_shards

N, CROP = 30, 16
KINDS = {
    "ram": ("ram", {}),
    "ram-workers": ("ram", {"num_workers": 2}),
    "ram-resident": ("ram", {"resident": True}),
    "wds": ("wds", {"num_workers": 2}),
    "dali-external": ("dali-external", {}),
    "dali-external-workers": ("dali-external", {"num_workers": 2}),
    "dali-file": ("dali-file", {"num_workers": 2}),
}
PARAMS = [pytest.param(k, marks=pytest.mark.dali) if k.startswith("dali") else k for k in KINDS]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return raw_and_shards(tmp_path_factory.mktemp("contract"), N, size=(24, 32))


def build(data, name, **kw):
    kind, extra = KINDS[name]
    source = data / ("raw" if kind == "dali-file" else "shards")
    return make_loader(kind, source, batch_size=4, crop=CROP, seed=9, **{**extra, **kw})


def epoch(loader, e):
    loader.set_epoch(e)
    out = []
    for b in loader:
        assert isinstance(b, PairBatch)
        assert b.low.dtype == b.high.dtype == torch.uint8 and b.low.shape == (len(b), 3, CROP, CROP)
        assert b.padded.dtype == torch.bool and len(b.keys) == len(b)
        low, high = b.low.cpu().numpy(), b.high.cpu().numpy()
        assert np.array_equal(high, 255 - low)  # one window and one flip for both images
        out.append((list(b.keys), low.copy()))
    return out


def children() -> set[int]:
    """Worker processes under this one (not multiprocessing's resource tracker, which lives on)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if "spawn_main" in " ".join(p.cmdline()):
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.parametrize("name", PARAMS)
def test_every_kind_keeps_the_contract(data, name):
    before = children()
    with build(data, name) as loader:
        assert isinstance(loader, Loader)
        n = len(loader)
        first = epoch(loader, 0)
        again = epoch(loader, 1)
        assert len(first) == len(again) == n == len(loader) == N // 4
        keys = [k for ks, _ in first for k in ks]
        assert len(keys) == len(set(keys))  # each sample at most once in an epoch
        assert keys != [k for ks, _ in again for k in ks]  # epochs differ
        json.dumps(loader.state_dict())
        loader.start_workers()  # allowed at any time, for every kind
    assert children() <= before, "the context manager left worker processes running"
    fresh = build(data, name)
    try:
        replay = epoch(fresh, 1)  # a new loader told set_epoch(1) reproduces epoch 1 exactly
        assert [ks for ks, _ in replay] == [ks for ks, _ in again]
        assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(replay, again))
    finally:
        fresh.close()


@pytest.mark.parametrize("name", PARAMS)
def test_early_breaks_and_jumps_never_leak_batches_of_another_epoch(data, name):
    """Workers and pipelines run ahead into the next epoch; leaving an epoch early or jumping to another must
    still give every epoch exactly its own batches."""
    with build(data, name) as loader:
        for e, stop in ((0, None), (1, 2), (5, None), (6, None), (2, 1), (3, None)):
            loader.set_epoch(e)
            got = []
            for b in loader:
                got.append((list(b.keys), b.low.cpu().clone()))
                if stop is not None and len(got) == stop:
                    break
            with build(data, name) as fresh:
                expect = epoch(fresh, e)[: len(got)]
            assert [g[0] for g in got] == [x[0] for x in expect], e
            assert all(np.array_equal(g[1].numpy(), x[1]) for g, x in zip(got, expect)), e


@pytest.mark.parametrize("name", PARAMS)
def test_ranks_get_disjoint_shares_of_equal_length(data, name):
    shares = []
    for rank in range(2):
        with build(data, name, rank=rank, world_size=2) as loader:
            got = epoch(loader, 3)
            assert len(got) == len(loader)
            shares.append({k for ks, _ in got for k in ks})
    assert not shares[0] & shares[1]
    assert len(shares[0]) == len(shares[1])


@pytest.mark.parametrize("name", PARAMS)
def test_unknown_options_name_the_accepted_ones(data, name):
    kind, _ = KINDS[name]
    with pytest.raises(ConfigError, match=rf"make_loader\('{kind}'\): unknown option\(s\) bogus; this kind accepts .*"
                                          r"CPU parallelism is num_workers for every kind"):
        build(data, name, bogus=1)


@pytest.mark.dali
@pytest.mark.parametrize("kind", ["external", "file"])
def test_paired_source_names_an_unknown_option_as_make_loader_does(data, kind):
    pytest.importorskip("nvidia.dali")
    from pairload.dali import paired_source

    source = data / ("shards" if kind == "external" else "raw")
    with pytest.raises(ConfigError, match=rf"paired_source\(kind='{kind}'\): unknown option\(s\) unknown; this kind "
                                          r"accepts .*prefetch"):
        paired_source(source, kind=kind, batch_size=2, crop=16, unknown=1)
