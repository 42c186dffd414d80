"""Lossless `tiles` members decoded on the GPU (nvCOMP and the untile kernel): the very pixels stored, whole or
only the tiles a window touches, for 8- and 16-bit members of 1, 3 and 4 channels; through the loaders, batches
equal to the CPU's bit for bit; a damaged member refused by key, never delivered."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from conftest import has_module
from decode_pairs import epochs_alike
from pairload import make_loader, open_shards
from pairload.errors import ShardError
from pairload.format.members import Member
from pairload.format.tiles import encode_tiles, read_tiled
from pairload.pack import PackOptions, pack

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(not has_module("triton"), reason="needs Triton")]


def nvcomp_ready() -> bool:
    from pairload.cut.memory.nvcomp import nvcomp_missing

    return nvcomp_missing() is None


def image(seed: int, h: int, w: int, c: int, dtype) -> np.ndarray:
    """Smooth content (the predictors engage) plus noise (some tiles stay as they are), every value distinct
    enough that a misplaced tile shows."""
    rng = np.random.default_rng(seed)
    top = np.iinfo(dtype).max
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(y * 7 + x * 3 + 40 * k) % (top + 1) for k in range(c)], axis=-1).astype(np.float64)
    noisy = base + rng.normal(0, top / 64, base.shape) * (x[..., None] > w // 2)
    return np.clip(noisy, 0, top).astype(dtype)


def gpu_decode(members: list[np.ndarray], wanted=None) -> list[np.ndarray]:
    from pairload.cut.memory.tiles import TileDecoder

    decoder = TileDecoder(torch.device("cuda"))
    parsed = []
    for k, img in enumerate(members):
        data = np.frombuffer(encode_tiles(img), np.uint8)
        t = read_tiled(data, Member(img.dtype.name, img.shape[2]), *img.shape[:2])
        parsed.append((data, t, np.arange(len(t.modes)) if wanted is None else wanted[k]))
    addresses, images, _ = decoder.decode(parsed, lambda m, what: ValueError(f"member {m} {what}"))
    out = []
    for (_, t, tiles), address in zip(parsed, addresses):
        # the buffer holds the rows the wanted tiles cover; `address` is where the image's row 0 would be
        boxes = [t.tile_box(k) for k in tiles]
        top, bottom = min(y for y, _, _, _ in boxes), max(y + h for y, _, h, _ in boxes)
        row = t.w * t.channels * t.itemsize
        start = int(address) - images.data_ptr() + top * row
        raw = images[start:start + (bottom - top) * row].cpu().numpy()
        got = np.zeros((t.h, t.w, t.channels), np.uint16 if t.itemsize == 2 else np.uint8)
        got[top:bottom] = raw.view(got.dtype).reshape(bottom - top, t.w, t.channels)
        out.append(got)
    torch.cuda.synchronize()
    decoder.check()
    return out


@pytest.mark.skipif(not nvcomp_ready(), reason="needs nvCOMP's library (nvidia-libnvcomp)")
def test_every_member_type_decodes_to_the_very_pixels():
    members = [image(0, 400, 600, 3, np.uint8), image(1, 37, 301, 1, np.uint16), image(2, 300, 513, 4, np.uint16),
               image(3, 5, 7, 3, np.uint8), image(4, 256, 256, 3, np.uint8)]
    for img, got in zip(members, gpu_decode(members)):
        assert np.array_equal(got, img), (img.shape, img.dtype)


@pytest.mark.skipif(not nvcomp_ready(), reason="needs nvCOMP's library (nvidia-libnvcomp)")
def test_only_the_tiles_a_window_touches_are_decoded():
    img = image(5, 700, 900, 3, np.uint8)
    t = read_tiled(np.frombuffer(encode_tiles(img), np.uint8), Member(), 700, 900)
    wanted = t.touched(300, 200, 256, 256)
    assert len(wanted) == 4 < len(t.modes)
    got = gpu_decode([img], [wanted])[0]
    assert np.array_equal(got[300:556, 200:456], img[300:556, 200:456])


def png_pairs(root: Path, n: int = 10) -> Path:
    for i in range(n):
        high = image(10 + i, 150, 300, 3, np.uint8)
        for side, pixels in (("high", high), ("low", high // 6 + (i % 3))):
            (root / side).mkdir(parents=True, exist_ok=True)
            assert cv2.imwrite(str(root / side / f"{i:03d}.png"), pixels[..., ::-1])
    return root


def epochs_of(loader, epochs: int) -> list[list[tuple]]:
    """Epochs 0, 1, ... of `loader`, each its batches as (low, high) copies."""
    out = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        out.append([(b.low.clone(), b.high.clone()) for b in loader])
    return out


@pytest.fixture
def lossless(tmp_path: Path) -> Path:
    pack(png_pairs(tmp_path / "raw"), tmp_path / "shards", PackOptions(workers=1, store="encoded"))
    return tmp_path / "shards"


@pytest.mark.skipif(not nvcomp_ready(), reason="needs nvCOMP's library (nvidia-libnvcomp)")
@pytest.mark.parametrize("kind", ["ram", "wds"])
def test_the_loaders_deliver_the_cpus_batches_bit_for_bit(lossless, kind):
    epochs_alike(lossless, kind, lambda a, b: torch.equal(a, b.cpu()))
    whole = make_loader("ram", lossless, batch_size=2, crop=None, shuffle=False, device="cuda")
    plain = make_loader("ram", lossless, batch_size=2, crop=None, shuffle=False)
    for a, b in zip(plain, whole, strict=True):
        assert torch.equal(a.high, b.high.cpu())


@pytest.mark.skipif(not nvcomp_ready(), reason="needs nvCOMP's library (nvidia-libnvcomp)")
def test_a_damaged_member_is_refused_by_key(lossless):
    tar = sorted(lossless.glob("*.tar"))[0]
    data = bytearray(tar.read_bytes())
    member = data.rfind(b".high.tiles") // 512 * 512 + 512  # the last target's bytes (not sample 0's: the self-test's)
    assert bytes(data[member:member + 4]) == b"PLT1"
    header = read_tiled(np.frombuffer(bytes(data[member:]), np.uint8), Member(), 150, 300, check_crc=False)
    for offset in header.offsets:  # a byte of every frame: whichever tiles a window reads, its tile's CRC-32 fails
        data[member + int(offset) + 3] ^= 0xFF
    tar.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=r"key \d+: its high member is damaged: the CRC-32 of its bytes differs .* "
                                         r"\(tile \d+\)"):
        for _ in make_loader("ram", lossless, batch_size=10, crop=32, seed=0, device="cuda", shuffle=False):
            pass


@pytest.mark.skipif(not nvcomp_ready(), reason="needs nvCOMP's library (nvidia-libnvcomp)")
def test_a_split_bigger_than_the_page_cache_is_decoded_in_small_calls_with_the_same_batches(lossless, monkeypatch):
    # a split that outgrows the memory that could cache it: its calls stage fewer bytes in pinned memory (which
    # nothing reclaims), and each call's pages are dropped once decoded; the batches are the very same
    from pairload.cut.memory import decoded

    opts = dict(batch_size=1, crop=32, seed=4, device="cuda")
    before = make_loader("ram", lossless, **opts)
    assert before.cutter.memory.call == decoded.AHEAD_TILES and not before.cutter.memory.evict
    want = [(b.low.clone(), b.high.clone()) for b in before]
    monkeypatch.setattr(decoded, "outgrows_cache", lambda nbytes: True)
    tight = make_loader("ram", lossless, **opts)
    memory = tight.cutter.memory
    assert memory.call == decoded.AHEAD_TILES_TIGHT < decoded.AHEAD_TILES and memory.evict
    got = [(b.low.clone(), b.high.clone()) for b in tight]
    assert len(got) == len(want) == 10 and memory.calls_ahead + memory.calls_inline >= 10 // memory.call - 1
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(want, got))


@pytest.mark.skipif(not nvcomp_ready(), reason="needs nvCOMP's library (nvidia-libnvcomp)")
def test_a_by_shard_run_of_a_split_bigger_than_the_page_cache_reads_whole_shards_with_the_same_batches(
        tmp_path, monkeypatch):
    # wds over a split that outgrows the memory that could cache it: its shards are read whole, a few at a time, and
    # dropped whole after their last batch (`read.streamed`), the next epoch's read on in the same stream; the batches
    # are the very same
    from pairload.cut.memory import decoded
    from pairload.read.streamed import ShardStream

    shards = tmp_path / "shards"
    pack(png_pairs(tmp_path / "raw"), shards, PackOptions(workers=1, store="encoded", shard_size=256 << 10))
    assert len(open_shards(shards).files) >= 3
    opts = dict(batch_size=1, crop=32, seed=4, device="cuda", shuffle_buffer=2)
    want = epochs_of(make_loader("wds", shards, **opts), 2)
    monkeypatch.setattr(decoded, "outgrows_cache", lambda nbytes: True)
    tight = make_loader("wds", shards, **opts)
    readers = []
    for epoch in range(2):  # every run of such a split reads it again: the second epoch in the first's stream
        tight.set_epoch(epoch)
        got = [(b.low.clone(), b.high.clone()) for b in tight]
        reader = tight.cutter.memory.reader
        readers.append(reader)
        assert isinstance(reader, ShardStream) and reader.failed is None
        assert reader.read >= sum(open_shards(shards).shard_bytes) * 0.5 * (epoch + 1)
        assert len(got) == len(want[epoch]) == 10
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(want[epoch], got))
    assert readers[0] is readers[1] and reader.base == 10
    tight.close()
    assert not reader.alive


@pytest.mark.skipif(not nvcomp_ready(), reason="needs nvCOMP's library (nvidia-libnvcomp)")
def test_bench_loaders_reports_the_gpus_tiles_decode_rate(lossless):
    from pairload.bench.bounds import stored_bound

    ds = open_shards(lossless)
    whole = stored_bound(ds, torch.device("cuda"), seconds=0.2)
    crops = stored_bound(ds, torch.device("cuda"), seconds=0.2, crop=32)  # one tile of each 150x300 image, not 2
    assert whole["tiles_gpu_images_per_s"] > 0 and crops["tiles_gpu_images_per_s"] > 0
    assert whole["gpu_images_per_s"] is None  # no JPEG members


@pytest.mark.skipif(not nvcomp_ready(), reason="needs nvCOMP's library (nvidia-libnvcomp)")
def test_a_strided_run_beyond_the_page_cache_reads_ahead_only_the_tiles_its_crops_touch(tmp_path, monkeypatch):
    # ram over a split that outgrows the memory that could cache it: read member by member ahead of the decode, a
    # member whose tables were read in an epoch before only for the tiles the crops touch; the batches are the same
    from pairload.cut.memory import decoded
    from pairload.read.ahead import ReadAhead

    shards = tmp_path / "shards"
    pack(png_pairs(tmp_path / "raw"), shards, PackOptions(workers=1, store="encoded", shard_size=256 << 10))
    opts = dict(batch_size=2, crop=32, seed=4, device="cuda")
    want = epochs_of(make_loader("ram", shards, **opts), 2)
    monkeypatch.setattr(decoded, "outgrows_cache", lambda nbytes: True)
    monkeypatch.setattr(decoded, "MOST", 1)  # no room for whole shards (a tiny split's would fit): member by member
    tight = make_loader("ram", shards, **opts)
    for epoch in range(2):
        tight.set_epoch(epoch)
        got = [(b.low.clone(), b.high.clone()) for b in tight]
        reader = tight.cutter.memory.reader
        assert isinstance(reader, ReadAhead) and reader.failed is None and reader.asked > 0
        assert len(got) == len(want[epoch])
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(want[epoch], got))
    tight.close()
    assert not reader.alive
