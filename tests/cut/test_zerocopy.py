"""The device cut paths (`pairload.cut`: zero-copy and resident): the GPU cuts the planned windows straight out of the
page cache. Without a GPU: when it is used and why not. With one (marked gpu): batches equal the worker path's bit
for bit, on data whose pixels name the pair, row and column."""

import os
import warnings

import numpy as np
import pytest
import torch

from pairload import make_loader
from pairload.errors import ConfigError, ShardError
from pairload.cut import kernel
from pairload.cut.memory import driver, pages
from pairload.cut.paths import PATHS, Request, default_budget
from pairload.loaders.byshard import pinned_buffer
from pairload.read.shards import open_shards

from conftest import make_raw


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """40 pairs of mixed sizes (some square, some not) in several 64 KB shards."""
    from pairload.pack import PackOptions, pack

    root = tmp_path_factory.mktemp("zc")
    sizes = [(40, 56), (48, 48), (37, 61), (64, 40)] * 10
    make_raw(root / "raw", 40, split="train", sizes=sizes)
    pack(root / "raw", root / "shards", PackOptions(workers=1, shard_size=64 * 1024))
    return root / "shards"


# ------------------------------------------------------------------------------------- without a GPU


def why_not(ds, device, path="zero-copy", **request):
    """The reason the cut path `path` gives for not running on `device` (None: it can)."""
    return PATHS[path].why_not(Request(ds=ds, cfg=None, plan_for=None, device=torch.device(device), who="test",
                                       **request))


def test_a_cpu_device_keeps_the_worker_path_without_a_note(shards):
    ds = open_shards(shards)
    assert "not a CUDA device" in why_not(ds, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no note on a CPU: nothing was given up
        loader = make_loader("ram", shards, batch_size=4, crop=16)
    assert not loader.zero_copy and loader.path_note == ""
    assert len(list(loader)) == len(loader)


def test_zero_copy_true_refuses_what_cannot_run_it(shards):
    with pytest.raises(ConfigError, match=r"zero_copy=True: device cpu is not a CUDA device .*leave zero_copy unset"):
        make_loader("ram", shards, batch_size=4, crop=16, zero_copy=True)


def test_a_split_beyond_the_pinning_budget_falls_back_and_says_how_much(shards):
    ds = open_shards(shards)
    total = sum(ds.shard_bytes)
    got = why_not(ds, "cuda", pin_budget=total - 1)
    assert "more than the pinning budget" in got and "pin_budget=" in got
    # the budget does not apply to a resident split (the device holds that copy, nothing is pinned)
    resident = why_not(ds, "cuda", "resident", pin_budget=1)
    assert resident is None or "Triton" in resident


def test_the_default_budget_is_half_the_available_memory():
    import psutil

    assert 0 < default_budget() <= psutil.virtual_memory().available


def test_a_compressed_split_keeps_its_decoding_workers(tmp_path):
    pytest.importorskip("zstandard")
    from pairload.pack import PackOptions, pack

    make_raw(tmp_path / "raw", 4)
    pack(tmp_path / "raw", tmp_path / "z", PackOptions(workers=1, compress="zstd"))
    got = why_not(open_shards(tmp_path / "z"), "cuda")
    assert "compressed" in got and "repack without --compress" in got


@pytest.mark.parametrize("bad", [0, -5, 1.5, "1GB"])
def test_pin_budget_must_be_a_positive_byte_count(shards, bad):
    with pytest.raises(ConfigError, match=r"pin_budget="):
        make_loader("ram", shards, batch_size=4, crop=16, pin_budget=bad)


def test_without_triton_the_reason_names_it(monkeypatch, shards):
    import builtins

    real = builtins.__import__

    def no_triton(name, *a, **k):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("No module named 'triton'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_triton)
    assert "Triton is not importable" in why_not(open_shards(shards), "cuda")


def test_the_pieces_the_schedule_registers_cover_every_byte_each_batch_reads(shards):
    """`pages.Grid`: each sample's input and target bytes lie inside the pieces it names; a run's schedule lists
    every piece once, in the order the batches first read them, and the last batch reading each."""
    ds = open_shards(shards)
    loader = make_loader("wds", shards, batch_size=4, crop=16, seed=3, shuffle_buffer=8)
    plans = loader.plan_for(0)
    for chunk in (4096, 3 * 4096, None):
        grid = pages.Grid(ds, chunk)
        idx, members = ds.index, ds.members
        for i in range(len(ds)):
            h, w = (int(v) for v in ds.sizes[i])
            for off, n in ((int(idx.low[i]), members.low.nbytes(h, w)),
                           (int(idx.high[i]), members.high.nbytes(h * members.scale, w * members.scale))):
                pieces = range(grid.lo[i], grid.hi[i] + 1)
                assert all(grid.shard[p] == idx.shard[i] for p in pieces)
                begin = min(grid.start[p] for p in pieces)
                end = max(grid.start[p] + grid.nbytes[p] for p in pieces)
                assert begin <= off and off + n <= end
        sched = grid.schedule(plans)
        assert len(set(sched.order.tolist())) == len(sched.order)
        seen, last = [], {}
        for b, bp in enumerate(plans):
            need = set(sched.pieces(b).tolist())
            want = {p for i in bp.index for p in range(grid.lo[i], grid.hi[i] + 1)}
            assert need == want
            seen += [p for p in sorted(want, key=lambda p: sched.order.tolist().index(p)) if p not in seen]
            assert sched.order[:sched.upto[b]].tolist() == seen  # batches 0..b first read exactly these
            last.update(dict.fromkeys(want, b))
        assert {p: int(sched.last[p]) for p in last} == last
        assert (sched.last >= 0).sum() == len(last)
        assert sched.bytes_to[-1] == grid.nbytes[sched.order].sum()


def test_wds_on_a_cpu_keeps_its_workers_and_refuses_what_cannot_stream(shards):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = make_loader("wds", shards, batch_size=4, crop=16, shuffle_buffer=8)
    assert loader.path == "workers" and loader.path_note == ""
    with pytest.raises(ConfigError, match=r"zero_copy=True: device cpu is not a CUDA device"):
        make_loader("wds", shards, batch_size=4, crop=16, shuffle_buffer=8, zero_copy=True)
    with pytest.raises(ConfigError, match=r"unknown option\(s\) resident; this kind accepts .*zero_copy"):
        make_loader("wds", shards, batch_size=4, crop=16, resident=True)
    ds = open_shards(shards)
    window = pinned_buffer(ds, 8, 1)
    got = why_not(ds, "cuda", pin_budget=window.need - 1, need=window.need)
    assert "a shuffle buffer of shards and the next one" in got and "shuffle_buffer" in got


# ------------------------------------------------------------------------------------- on a GPU

gpu = pytest.mark.gpu


def run(loader, epochs=(0, 1)):
    """Every batch of the epochs, on the host: (keys, low, high, padded)."""
    out = []
    for e in epochs:
        loader.set_epoch(e)
        for b in loader:
            out.append((b.keys, b.low.cpu(), b.high.cpu(), b.padded.cpu()))
    return out


def same(a, b) -> None:
    assert len(a) == len(b) and len(a) > 0
    for (ka, la, ha, pa), (kb, lb, hb, pb) in zip(a, b):
        assert ka == kb
        assert torch.equal(la, lb) and torch.equal(ha, hb) and torch.equal(pa, pb)


@gpu
@pytest.mark.parametrize("crop", [16, 37])
def test_zero_copy_equals_the_workers_bit_for_bit_in_every_orientation(shards, crop):
    opts = dict(batch_size=6, crop=crop, seed=11, device="cuda", last_batch="pad")
    with make_loader("ram", shards, zero_copy=True, **opts) as zc, \
            make_loader("ram", shards, zero_copy=False, num_workers=2, **opts) as workers:
        assert zc.zero_copy and not workers.zero_copy
        codes = np.concatenate([bp.code for e in (0, 1, 2) for bp in zc.plan_for(e)])
        assert set(codes.tolist()) == set(range(8))  # every flip/transpose combination is exercised
        first = run(zc, (0, 1, 2))
        same(first, run(workers, (0, 1, 2)))
        # registered piece by piece as epoch 0 read it, the rest of the split in the background: all of it now
        memory = zc.cutter.memory
        assert memory.pinned == int(memory.grid.nbytes[memory.grid.read].sum()) > 0
        for _keys, low, high, _ in run(zc, (3,)):  # the pixels name their pair: the target is 255 - input
            assert torch.equal(high.int(), 255 - low.int())
        zc.close()  # unpins; iterating again registers the shards again
        assert zc.zero_copy
        same(run(zc, (0, 1, 2)), first)


@gpu
def test_zero_copy_whole_images_and_a_resident_split_equal_the_workers(tmp_path):
    from pairload.pack import PackOptions, pack

    make_raw(tmp_path / "raw", 12, size=(30, 44))
    pack(tmp_path / "raw", tmp_path / "s", PackOptions(workers=1, shard_size=64 * 1024))
    opts = dict(batch_size=4, crop=None, seed=3, device="cuda")
    ref = run(make_loader("ram", tmp_path / "s", zero_copy=False, **opts))
    same(run(make_loader("ram", tmp_path / "s", zero_copy=True, **opts)), ref)
    resident = make_loader("ram", tmp_path / "s", resident=True, **opts)
    assert resident.zero_copy  # the same kernel, reading the device's copy
    same(run(resident), ref)


@gpu
def test_a_resident_split_equals_the_workers_in_every_orientation(tmp_path):
    """Windows cut from the device copy: square (every code) and not, widths of whole words and not."""
    from pairload.pack import PackOptions, pack

    make_raw(tmp_path / "raw", 12, sizes=[(150, 170), (160, 160), (133, 201)] * 4)
    pack(tmp_path / "raw", tmp_path / "s", PackOptions(workers=1, shard_size=256 * 1024))
    for crop in (128, 36, (64, 100), 37):
        opts = dict(batch_size=5, crop=crop, seed=7, device="cuda", last_batch="pad")
        resident = make_loader("ram", tmp_path / "s", resident=True, **opts)
        assert resident.path == "resident"
        if crop in (128, 36):
            codes = np.concatenate([bp.code for e in range(4) for bp in resident.plan_for(e)])
            assert set(codes.tolist()) == set(range(8))
        got = run(resident, range(4))
        same(got, run(make_loader("ram", tmp_path / "s", zero_copy=False, **opts), range(4)))
        for _keys, low, high, _ in got:  # the pixels name their pair: the target is 255 - input
            assert torch.equal(high.int(), 255 - low.int())


@gpu
def test_zero_copy_with_shared_targets(tmp_path):
    from test_datasets import Replica, packed

    r = Replica(tmp_path / "SID")
    for scene in range(6):
        r.group([f"train/short/{scene:05d}/{k}" for k in range(3)], f"train/long/{scene:05d}/gt")
    out, _ = packed(tmp_path, r.root, shard_size=64 * 1024)
    opts = dict(batch_size=3, crop=16, seed=5, device="cuda")
    same(run(make_loader("ram", out, zero_copy=True, **opts)), run(make_loader("ram", out, zero_copy=False, **opts)))


@gpu
def test_zero_copy_resumes_on_another_world_size_and_mixes(shards, tmp_path):
    opts = dict(batch_size=4, crop=16, seed=8, device="cuda")
    whole = run(make_loader("ram", shards, zero_copy=False, **opts), (0,))
    first = make_loader("ram", shards, zero_copy=True, **opts)
    it = iter(first)
    seen = [next(it).keys for _ in range(3)]
    state = first.state_dict()
    rest = []
    for rank in (0, 1):
        other = make_loader("ram", shards, zero_copy=True, rank=rank, world_size=2, **opts)
        other.load_state_dict(state)
        rest += [keys for keys, *_ in run(other, (0,))]
    flat = sorted(k for keys in seen + rest for k in keys)
    assert flat == sorted(k for keys, *_ in whole for k in keys)  # the rest of the epoch, each sample once

    mix = {"a": shards, "b": shards}
    mopts = dict(batch_size=5, crop=16, seed=2, device="cuda", weights={"a": 1, "b": 3}, epoch_size=40)
    same(run(make_loader("ram", mix, zero_copy=True, **mopts)), run(make_loader("ram", mix, zero_copy=False, **mopts)))


@gpu
def test_a_replaced_or_truncated_shard_is_a_named_error_not_wrong_pixels(tmp_path):
    from pairload.pack import PackOptions, pack

    make_raw(tmp_path / "raw", 24, size=(40, 56))
    pack(tmp_path / "raw", tmp_path / "s", PackOptions(workers=1, shard_size=64 * 1024))
    loader = make_loader("ram", tmp_path / "s", batch_size=2, crop=16, seed=1, device="cuda", zero_copy=True)
    ref = run(make_loader("ram", tmp_path / "s", batch_size=2, crop=16, seed=1, device="cuda", zero_copy=False), (0,))
    shard = sorted((tmp_path / "s").glob("train-*.tar"))[0]
    it = iter(loader)
    first = next(it)
    assert torch.equal(first.low.cpu(), ref[0][1])
    os.truncate(shard, shard.stat().st_size // 2)  # the GPU still reads the pinned pages: the pack as it was
    ends_naming_the_truncated_shard(it, loader, shard.name)


def ends_naming_the_truncated_shard(it, loader, name: str) -> None:
    """The rest of `it` stops with the ShardError naming `name` (a pattern) once the files are next checked."""
    import time

    time.sleep(pages.CHECK_S + 0.1)
    with pytest.raises(ShardError, match=rf"{name}: \d+ bytes, the manifest says \d+; the shard is truncated"):
        for _ in it:
            pass
    loader.close()


@gpu
def test_a_loader_dropped_without_close_gives_its_pinned_pages_back(shards):
    """Its registering thread holds it only weakly: collected, its registrations go (as close() would). The thread
    may be registering a piece when the loader is dropped (`wds` reads ahead): it lets go once that piece is in, and
    ends."""
    import gc

    gc.collect()
    before = driver.registered()
    for kind, extra in (("ram", {}), ("wds", {"shuffle_buffer": 8})):
        loader = make_loader(kind, shards, batch_size=4, crop=16, device="cuda", zero_copy=True, **extra)
        next(iter(loader))
        assert len(driver.registered()) > len(before)
        thread = loader.cutter.memory.thread
        del loader
        gc.collect()
        thread.join(timeout=5)
        assert not thread.is_alive(), kind
        gc.collect()  # what the thread held last may sit in a reference cycle
        assert driver.registered() == before, kind


@gpu
def test_a_refused_registration_falls_back_with_the_drivers_reason(shards, monkeypatch):
    monkeypatch.setattr(driver.Driver, "register", classmethod(lambda cls, ptr, nbytes: 1))  # the driver says no
    refused = (r"registering the first shard failed \(registering .* of .*train-.*\.tar with cuda.* failed: "
               r"CUDA driver error 1")
    with pytest.warns(UserWarning, match=r"ram loader: the workers cut the crops .*" + refused):
        loader = make_loader("ram", shards, batch_size=4, crop=16, device="cuda")
    assert not loader.zero_copy and "CUDA driver error 1" in loader.path_note
    with pytest.raises(ConfigError, match=r"zero_copy=True: " + refused):
        make_loader("ram", shards, batch_size=4, crop=16, device="cuda", zero_copy=True)
    with pytest.warns(UserWarning, match=r"wds loader: the workers cut the crops .*" + refused):
        streamed = make_loader("wds", shards, batch_size=4, crop=16, device="cuda", shuffle_buffer=8)
    assert streamed.path == "workers"


@gpu
@pytest.mark.parametrize("crop", [16, 37])
def test_wds_zero_copy_equals_its_workers_across_window_moves_and_gives_the_pages_back(shards, crop, monkeypatch):
    """The by-shard deal through the kernel: a shuffle buffer of shards registered at a time, pieces unregistered once
    their last batch is cut; batches bit-identical to the worker path's over several epochs and every orientation."""
    monkeypatch.setattr(pages, "CHUNK", 4096)  # small pieces: many of them, sample bytes across piece boundaries
    ds = open_shards(shards)
    window = pinned_buffer(ds, 8, 1)
    assert window.need < sum(ds.shard_bytes)
    opts = dict(batch_size=4, crop=crop, seed=13, device="cuda", shuffle_buffer=8)
    # a budget below the split's size: the window streams
    with make_loader("wds", shards, zero_copy=True, pin_budget=window.need, **opts) as zc, \
            make_loader("wds", shards, zero_copy=False, num_workers=2, **opts) as workers:
        assert zc.path == "zero-copy" and workers.path == "workers"
        memory = zc.cutter.memory
        assert memory.streaming
        peak = []
        got = []
        for e in (0, 1, 2):
            zc.set_epoch(e)
            for b in zc:
                got.append((b.keys, b.low.cpu(), b.high.cpu(), b.padded.cpu()))
                peak.append(memory.pinned)
        same(got, run(workers, (0, 1, 2)))
        total = sum(ds.shard_bytes)
        assert max(peak) < total  # never the whole split: windows come and go
    # within the budget: registered once, kept across epochs as ram's (registering costs more than reading)
    with make_loader("wds", shards, zero_copy=True, **opts) as kept:
        assert not kept.cutter.memory.streaming
        first = run(kept, (0, 1, 2))
        # read piece by piece in epoch 0 (the rest in the background), kept: the whole split is registered
        memory = kept.cutter.memory
        assert memory.pinned == int(memory.grid.nbytes[memory.grid.read].sum()) > 0
        same(first, got)
        for _keys, low, high, _ in got:  # the pixels name their pair: the target is 255 - input
            assert torch.equal(high.int(), 255 - low.int())


@gpu
def test_wds_zero_copy_resumes_on_another_world_size_and_mixes(shards):
    opts = dict(batch_size=4, crop=16, seed=9, device="cuda", shuffle_buffer=8)
    first = make_loader("wds", shards, zero_copy=True, **opts)
    it = iter(first)
    seen = [next(it).keys for _ in range(2)]
    state = first.state_dict()
    first.close()
    for rank in (0, 1):
        zc = make_loader("wds", shards, zero_copy=True, rank=rank, world_size=2, **opts)
        workers = make_loader("wds", shards, zero_copy=False, rank=rank, world_size=2, **opts)
        zc.load_state_dict(state)
        workers.load_state_dict(state)
        rest = run(zc, (0, 1))
        same(rest, run(workers, (0, 1)))
        seen += [keys for keys, *_ in rest]
    assert len(seen) > 2
    mix = {"a": shards, "b": shards}
    mopts = dict(batch_size=5, crop=16, seed=2, device="cuda", weights={"a": 1, "b": 3}, epoch_size=40,
                 shuffle_buffer=8)
    same(run(make_loader("wds", mix, zero_copy=True, **mopts)), run(make_loader("wds", mix, zero_copy=False, **mopts)))


@gpu
def test_wds_zero_copy_names_a_shard_truncated_mid_window(tmp_path):
    """A shard truncated while the loader runs: pinned pages keep the pack as it was, a piece not yet registered
    cannot be (the file is shorter): either way a ShardError naming the file, never a SIGBUS or wrong pixels."""
    from pairload.pack import PackOptions, pack

    make_raw(tmp_path / "raw", 48, size=(40, 56))
    pack(tmp_path / "raw", tmp_path / "s", PackOptions(workers=1, shard_size=64 * 1024))
    opts = dict(batch_size=2, crop=16, seed=1, device="cuda", shuffle_buffer=4)
    ref = run(make_loader("wds", tmp_path / "s", zero_copy=False, **opts), (0,))
    loader = make_loader("wds", tmp_path / "s", zero_copy=True, **opts)
    it = iter(loader)
    first = next(it)
    assert torch.equal(first.low.cpu(), ref[0][1])
    shards = sorted((tmp_path / "s").glob("train-*.tar"))
    for shard in shards:
        os.truncate(shard, shard.stat().st_size // 2)
    ends_naming_the_truncated_shard(it, loader, r"train-\d+\.tar")


@gpu
@pytest.mark.dali
def test_dali_external_takes_the_device_batches_and_equals_its_workers(shards):
    pytest.importorskip("nvidia.dali")
    opts = dict(batch_size=6, crop=24, seed=4, device="cuda")
    zc = make_loader("dali-external", shards, **opts)
    workers = make_loader("dali-external", shards, zero_copy=False, num_workers=2, **opts)
    assert zc.zero_copy and not workers.zero_copy
    try:
        got = run(zc, (0, 1))
        same(got, run(workers, (0, 1)))
        same(got, run(make_loader("ram", shards, zero_copy=False, **opts), (0, 1)))
    finally:
        zc.close()
        workers.close()


@gpu
@pytest.mark.dali
def test_dali_reads_a_batch_only_after_the_kernel_has_cut_it(shards, monkeypatch):
    """external_source takes the cut batches without a copy: DALI must order its reads after the stream that cuts
    them. A GPU sleep queued before every cut makes a read that does not wait see unwritten memory."""
    pytest.importorskip("nvidia.dali")
    real = kernel.cut

    def slow(*a, **k):
        torch.cuda._sleep(50_000_000)  # tens of ms of GPU time on the cut's stream, before the cut
        return real(*a, **k)

    opts = dict(batch_size=6, crop=24, seed=4, device="cuda")
    expected = run(make_loader("ram", shards, zero_copy=False, **opts), (0, 1))
    zc = make_loader("dali-external", shards, **opts)  # its start-up self-test uses the real kernel
    monkeypatch.setattr(kernel, "cut", slow)
    try:
        assert zc.zero_copy
        same(run(zc, (0, 1)), expected)
    finally:
        zc.close()


@gpu
def test_a_kernel_that_cannot_run_falls_back_with_its_error(shards, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")

    monkeypatch.setattr(kernel, "cut", broken)
    with pytest.warns(UserWarning, match=r"the GPU kernel could not be built or run \(RuntimeError: Failed to find C"):
        loader = make_loader("ram", shards, batch_size=4, crop=16, device="cuda")
    assert not loader.zero_copy and len(list(loader)) == len(loader)
