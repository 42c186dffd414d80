"""The decode path (`pack --store encoded` read on a CUDA device): the GPU decodes the JPEG members the plan reads,
and the batches equal the CPU workers' (OpenCV's decode) within JPEG_TOLERANCE, for pairs, targets-only packs with a
degradation, a mix with a decoded pack, and resume; a damaged member is refused by key, never delivered."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from conftest import has_module
from decode_pairs import epochs_alike
from pairload import make_loader
from pairload.cut.memory.decoders import JPEG_TOLERANCE
from pairload.errors import LoaderError, ShardError
from pairload.pack import PackOptions, pack

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not has_module("nvidia.nvimgcodec"), reason="needs nvImageCodec (nvidia-nvimgcodec)")]


def photo(i: int, h: int = 120, w: int = 176) -> np.ndarray:
    rng = np.random.default_rng(i)
    base = cv2.resize(rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8), (w, h), interpolation=cv2.INTER_CUBIC)
    return np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)


def jpeg_pairs(root: Path, n: int = 12, targets_only: bool = False) -> Path:
    for i in range(n):
        img = photo(i)
        for side, pixels in (("high", img), ("low", img // 5)):
            if targets_only and side == "low":
                continue
            folder = root / (side if not targets_only else "")
            folder.mkdir(parents=True, exist_ok=True)
            assert cv2.imwrite(str(folder / f"{i:03d}.jpg"), pixels, [cv2.IMWRITE_JPEG_QUALITY, 90])
    return root


@pytest.fixture
def encoded(tmp_path: Path) -> Path:
    pack(jpeg_pairs(tmp_path / "raw"), tmp_path / "shards", PackOptions(workers=1, store="encoded"))
    return tmp_path / "shards"


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    assert a.shape == b.shape
    worst = int((a.cpu().int() - b.cpu().int()).abs().max())
    assert worst <= JPEG_TOLERANCE, f"the GPU's decode differs from OpenCV's by {worst} levels"
    return True


@pytest.mark.parametrize("kind", ["ram", "wds"])
def test_the_gpu_decodes_what_the_cpu_decodes(encoded, kind):
    epochs_alike(encoded, kind, close)


@pytest.mark.parametrize("kind", ["ram", "wds"])
def test_a_decode_calls_batches_cut_by_one_launch_are_the_cpus(tmp_path, kind, monkeypatch):
    # `benchmarks/diag_knobs.py group`: the batches of one decode call cut by one kernel launch (and degraded by one)
    from pairload.cut.memory.decoded import AHEAD
    from pairload.hooks import StageTotals
    from pairload.loaders import shards

    monkeypatch.setitem(shards.KERNEL_GROUP, "decode", 1 << 10)
    pack(jpeg_pairs(tmp_path / "raw", n=40), tmp_path / "shards", PackOptions(workers=1, store="encoded"))
    epochs_alike(tmp_path / "shards", kind, close)  # 10 batches of 4 a epoch: calls of 4, 4 and 2
    pack(jpeg_pairs(tmp_path / "photos", n=40, targets_only=True), tmp_path / "targets",
         PackOptions(workers=1, store="encoded", targets_only=True))
    opts = dict(batch_size=4, crop=64, seed=2, degrade="lowlight")
    cpu = list(make_loader(kind, tmp_path / "targets", **opts))
    gpu = make_loader(kind, tmp_path / "targets", device="cuda", **opts)
    totals = StageTotals()
    gpu.hooks.add(totals)
    got = list(gpu)
    # one launch a call (one more where a block of the plan ends inside a call), not one a batch
    assert len(got) == len(cpu) == 10 and totals.calls["launch"] == totals.calls["degrade"] <= -(-10 // AHEAD) + 1
    # each call's host part timed once, within the waits for the batches
    assert 3 <= totals.calls["prepare"] <= -(-10 // AHEAD) + 1
    assert 0 < totals.seconds["prepare"] < totals.seconds["wait"]
    for a, b in zip(cpu, got):
        assert a.keys == b.keys and close(a.high, b.high)
        assert b.low.float().mean() < b.high.float().mean()


def test_targets_only_with_a_degradation_decodes_the_targets(tmp_path):
    pack(jpeg_pairs(tmp_path / "photos", targets_only=True), tmp_path / "shards",
         PackOptions(workers=1, store="encoded", targets_only=True))
    cpu = make_loader("ram", tmp_path / "shards", batch_size=4, crop=64, seed=1, degrade="lowlight")
    gpu = make_loader("ram", tmp_path / "shards", batch_size=4, crop=64, seed=1, degrade="lowlight", device="cuda")
    assert gpu.path == "decode"
    for a, b in zip(cpu, gpu, strict=True):
        assert a.keys == b.keys and close(a.high, b.high)
        assert b.low.float().mean() < b.high.float().mean()  # made darker from the decoded target


def test_exif_orientation_is_ignored_as_the_cpu_and_a_decoded_pack_ignore_it(tmp_path):
    # phone photos carry an EXIF orientation tag; pack stores pixels as the file holds them (OpenCV ignores the tag),
    # and nvImageCodec applies it unless told not to: a 90° tag would give a 176x120 image, a 180° or mirror tag
    # other pixels of the same size
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    for i, tag in enumerate((1, 3, 6, 8, 2, 5)):
        exif = Image.Exif()
        exif[0x0112] = tag
        Image.fromarray(photo(i)).save(folder / f"{i:03d}.jpg", quality=90, exif=exif)
    pack(folder, tmp_path / "shards", PackOptions(workers=1, store="encoded", targets_only=True))
    opts = dict(batch_size=3, crop=96, seed=4, shuffle=False, degrade="lowlight")
    cpu = list(make_loader("ram", tmp_path / "shards", **opts))
    gpu = list(make_loader("ram", tmp_path / "shards", device="cuda", **opts))
    assert len(cpu) == len(gpu) == 2
    for a, b in zip(cpu, gpu):
        assert a.keys == b.keys and close(a.high, b.high)


def test_resume_and_a_mix_with_a_decoded_pack(encoded, tmp_path):
    pack(jpeg_pairs(tmp_path / "raw2", n=8), tmp_path / "decoded", PackOptions(workers=1))
    source = {"enc": encoded, "dec": tmp_path / "decoded"}
    whole = list(make_loader("ram", source, batch_size=4, crop=32, seed=5, device="cuda"))
    first = make_loader("ram", source, batch_size=4, crop=32, seed=5, device="cuda")
    it = iter(first)
    seen = [next(it) for _ in range(2)]
    state = first.state_dict()
    rest = make_loader("ram", source, batch_size=4, crop=32, seed=5, device="cuda")
    rest.load_state_dict(state)
    got = seen + list(rest)
    assert [b.keys for b in got] == [b.keys for b in whole]
    assert all(torch.equal(a.high, b.high) for a, b in zip(got, whole))  # one decoder: exactly the same pixels


@pytest.mark.parametrize("side", ["low", "high"])
def test_a_damaged_member_is_refused_by_key(encoded, side):
    # the last sample's member (not sample 0's: the self-test's); a call's inputs go to the first decode process,
    # its targets to the second: each names the key it was given
    tar = sorted(encoded.glob("*.tar"))[0]
    data = bytearray(tar.read_bytes())
    suffix = f".{side}.jpg".encode()
    at = data.rfind(suffix)
    key = bytes(data[at // 512 * 512:at]).decode()  # its tar header's name
    end = data.find(b"\xff\xd9", at)  # its EOI
    data[end:end + 2] = b"\x00\x00"
    tar.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=rf"key {key}: its {side} member is not a whole JPEG"):
        for _ in make_loader("ram", encoded, batch_size=12, crop=32, seed=0, device="cuda", shuffle=False):
            pass


def test_the_coming_batches_are_read_ahead_and_the_batches_stay_the_same(tmp_path):
    pack(jpeg_pairs(tmp_path / "photos", n=40, targets_only=True), tmp_path / "shards",
         PackOptions(workers=1, store="encoded", targets_only=True))
    opts = dict(batch_size=4, crop=64, seed=3, degrade="lowlight", device="cuda")
    loader = make_loader("ram", tmp_path / "shards", **opts)
    got = list(loader)
    reader = loader.cutter.memory.reader
    assert reader is not None and reader.asked > 0 and reader.failed is None
    loader.close()
    assert not reader.alive  # closing the loader stops the thread
    # a caller busy on the device (a training step's work queued after each batch): the batches are the same, the
    # coming calls decoded in the decode thread
    busy = make_loader("ram", tmp_path / "shards", **opts)
    work = torch.ones(2048, 2048, device="cuda")
    again = []
    for b in busy:
        again.append(b.high.clone())
        for _ in range(8):
            work = (work @ work).clamp_(0, 1)
    assert busy.cutter.memory.calls_ahead > 0
    assert len(again) == len(got) and all(torch.equal(a.high, b) for a, b in zip(got, again))


def test_a_reader_faster_than_the_decode_gets_its_calls_made_in_the_loading_thread(tmp_path, monkeypatch):
    # the decode thread's calls made slower than a loop that only reads the loader: after LATE_CALLS calls not done
    # when asked for, the calls are made in the loading thread; a caller slower than a call keeps the thread. The
    # batches are the same either way.
    from pairload.cut.memory import decoded
    from pairload.cut.memory.decoded import AHEAD, LATE_CALLS, DecodedMemory

    monkeypatch.setattr(decoded, "PROCESS", False)  # the decode thread of the loading process, not a process
    launch = DecodedMemory.launch

    def slowed(self, out):
        if threading.current_thread().name.startswith("pairload-decode"):
            time.sleep(0.02)
        return launch(self, out)

    monkeypatch.setattr(DecodedMemory, "launch", slowed)
    pack(jpeg_pairs(tmp_path / "photos", n=96, targets_only=True), tmp_path / "shards",
         PackOptions(workers=1, store="encoded", targets_only=True))
    opts = dict(batch_size=2, crop=32, seed=5, degrade="lowlight", device="cuda")
    bare = make_loader("ram", tmp_path / "shards", **opts)
    got = [b.high.clone() for b in bare]
    memory = bare.cutter.memory
    assert len(got) // AHEAD > LATE_CALLS + 2 and memory.calls_inline > 0 and memory.calls_ahead >= LATE_CALLS
    slow = make_loader("ram", tmp_path / "shards", **opts)
    again = []
    for b in slow:
        again.append(b.high.clone())
        torch.cuda.synchronize()
        time.sleep(0.03)  # a training step: the call decoded ahead (0.02 s) is done when its batches are asked for
    assert slow.cutter.memory.calls_inline == 0 and slow.cutter.memory.calls_ahead > LATE_CALLS
    assert len(got) == len(again) and all(torch.equal(a, b) for a, b in zip(got, again))


def test_a_split_bigger_than_the_page_cache_has_each_calls_pages_dropped_once_decoded(tmp_path, monkeypatch):
    # the split outgrows the memory that could cache it (a memory limit smaller than it): every epoch reads it from
    # disk, and each call's pages are dropped once its images are on the device, so that they never push out the
    # pages read ahead for the coming calls; the batches are the same as with the pages kept
    from pairload.cut.memory import decoded
    from pairload.read.dataset import ShardDataset

    pack(jpeg_pairs(tmp_path / "photos", n=40, targets_only=True), tmp_path / "shards",
         PackOptions(workers=1, store="encoded", targets_only=True))
    opts = dict(batch_size=4, crop=64, seed=3, degrade="lowlight", device="cuda")
    kept = make_loader("ram", tmp_path / "shards", **opts)
    assert not kept.cutter.memory.evict
    want = [b.high.clone() for b in kept]
    dropped = []
    dontneed = ShardDataset.dontneed
    monkeypatch.setattr(ShardDataset, "dontneed", lambda self, idx: (dropped.append(np.array(idx)),
                                                                     dontneed(self, idx))[1])
    monkeypatch.setattr(decoded, "outgrows_cache", lambda nbytes: True)
    loader = make_loader("ram", tmp_path / "shards", **opts)
    assert loader.cutter.memory.evict
    for epoch in range(2):
        loader.set_epoch(epoch)
        got = [b.high.clone() for b in loader]
        if epoch == 0:
            assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(want, got))
        assert loader.cutter.memory.reader.asked > 0  # read ahead in every epoch, not only the first
    loader.close()  # the last call's pages are dropped once its batches are done, at the latest here
    counts = np.bincount(np.concatenate(dropped), minlength=40)
    assert len(counts) == 40 and counts.min() >= 2  # every sample's pages, once an epoch (sample 0: the self-test's)
    assert counts[1:].max() == 2


def test_the_decode_process_gives_the_loading_process_decodes_batches(tmp_path, monkeypatch):
    # a JPEG split is decoded by a process of the loader's own: the same decoder as the loading process's own decode
    # thread, so the same batches bit for bit, two epochs, inputs and targets; closing the loader ends the processes
    from pairload.cut.memory import decoded, jpegproc

    pack(jpeg_pairs(tmp_path / "raw", n=24), tmp_path / "shards", PackOptions(workers=1, store="encoded"))
    opts = dict(batch_size=4, crop=64, seed=2, device="cuda")

    def two_epochs(loader):
        out = []
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            out += [(b.keys, b.low.clone(), b.high.clone()) for b in loader]
        return out

    by_process = make_loader("ram", tmp_path / "shards", **opts)
    proc = by_process.cutter.memory.proc
    assert proc is not None and len(set(proc.pids)) == jpegproc.PROCESSES > 1
    assert by_process.worker_pids() == proc.pids  # what bench-loaders counts the CPU and memory of
    got = two_epochs(by_process)
    by_process.close()
    assert not any(Path(f"/proc/{pid}").exists() for pid in proc.pids)
    monkeypatch.setattr(decoded, "PROCESS", False)
    by_thread = make_loader("ram", tmp_path / "shards", **opts)
    assert by_thread.cutter.memory.proc is None
    want = two_epochs(by_thread)
    assert len(got) == len(want) == 12
    assert all(a[0] == b[0] and torch.equal(a[1], b[1]) and torch.equal(a[2], b[2]) for a, b in zip(got, want))


def test_a_decode_process_that_dies_is_named_not_waited_for(tmp_path):
    pack(jpeg_pairs(tmp_path / "photos", n=96, targets_only=True), tmp_path / "shards",
         PackOptions(workers=1, store="encoded", targets_only=True))
    loader = make_loader("ram", tmp_path / "shards", batch_size=2, crop=32, seed=0, degrade="lowlight", device="cuda")
    it = iter(loader)
    next(it)
    os.kill(loader.cutter.memory.proc.pid, signal.SIGKILL)
    with pytest.raises(LoaderError, match=r"JPEG decode process \(pid \d+\) was killed by SIGKILL"):
        for _ in it:
            pass


def test_where_the_decode_process_cannot_start_the_loading_process_decodes(tmp_path, monkeypatch):
    from pairload.cut.memory.jpegproc import JpegProcess

    pack(jpeg_pairs(tmp_path / "raw", n=8), tmp_path / "shards", PackOptions(workers=1, store="encoded"))
    opts = dict(batch_size=4, crop=64, seed=2, device="cuda")
    want = [b.high.clone() for b in make_loader("ram", tmp_path / "shards", **opts)]
    monkeypatch.setattr(JpegProcess, "ready", lambda self: "no memory shared between processes here")
    with pytest.warns(UserWarning, match=r"could not start \(no memory shared between processes here\)"):
        loader = make_loader("ram", tmp_path / "shards", **opts)
    assert loader.path == "decode" and loader.cutter.memory.proc is None
    got = [b.high.clone() for b in loader]
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
