"""Camera raw packs: a SID-style tree of real DNG files (LibRaw reads them) packs with one command, its list files
giving the splits; the input is stored as SID packs it (R, G, B, G at half resolution, in every Bayer offset), the
target developed by LibRaw at twice the input's size, each pair's ratio and levels in the manifest; every loader
over shards yields the crops an independent numpy packing and LibRaw's own development give at the planned place;
`RawNormalize` applies SID's levels and ratio; bad raw input is refused naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rawpy")
pytest.importorskip("tifffile")

from dng import write_dng  # noqa: E402
from test_camera import BLACKS, WHITE, coded_mosaic, sid_pack  # noqa: E402

from indexes import shard_index
from pairload import make_loader, open_shards  # noqa: E402
from pairload.dihedral import orient  # noqa: E402
from pairload.errors import ConfigError, ImageError  # noqa: E402
from pairload.format.members import Member, Members  # noqa: E402
from pairload.pack.writer import PackOptions, pack  # noqa: E402
from pairload.plan import key_hashes, sample_params  # noqa: E402
from pairload.camera.files import develop  # noqa: E402
from pairload.read.shards import verify  # noqa: E402

SENSOR = (24, 40)  # LibRaw opens sides of 22 pixels and more
PATTERNS = ("RGGB", "BGGR", "GRBG", "GBRG")  # one scene in each Bayer offset
SHOTS = ((0, 0.04), (1, 0.1))  # (shot, seconds) of each scene's short exposures; the long one is 10 s
CROP = 8


def sid_tree(root: Path, scenes=range(4), sensor=SENSOR) -> dict[str, dict]:
    """Sony/short and Sony/long DNGs named as SID names them, with SID-style list files (scenes 0-1 train, 2-3 test).
    Returns per short file stem: its mosaic, pattern, long file and ratio."""
    facts = {}
    for d in ("short", "long"):
        (root / "Sony" / d).mkdir(parents=True, exist_ok=True)
    lists = {"train": [], "test": []}
    for s in scenes:
        pattern = PATTERNS[s % 4]
        long_name = f"{s:05d}_00_10s.dng"
        write_dng(root / "Sony" / "long" / long_name, coded_mosaic(50 + s, *sensor), pattern, black=BLACKS,
                  white=WHITE, exposure=10.0, make="Sony", model="ILCE-7S")
        for shot, seconds in SHOTS:
            stem = f"{s:05d}_{shot:02d}_{seconds}s"
            mosaic = coded_mosaic(2 * s + shot, *sensor)
            write_dng(root / "Sony" / "short" / f"{stem}.dng", mosaic, pattern, black=BLACKS, white=WHITE,
                      exposure=seconds, make="Sony", model="ILCE-7S")
            facts[stem] = {"mosaic": mosaic, "pattern": pattern, "long": root / "Sony" / "long" / long_name,
                           "ratio": min(10.0 / seconds, 300.0), "seconds": seconds}
            lists["train" if s < 2 else "test"].append(f"./Sony/short/{stem}.dng ./Sony/long/{long_name} ISO200 F8")
    for split, lines in lists.items():
        (root / f"Sony_{split}_list.txt").write_text("\n".join(lines) + "\n")
    return facts


@pytest.fixture(scope="module")
def sid(tmp_path_factory):
    """The SID tree packed with its list files, in one CLI command; expected arrays per sample key."""
    from pairload.cli import main

    root = tmp_path_factory.mktemp("sid")
    facts = sid_tree(root / "SID")
    out = root / "shards"
    main(["pack", str(root / "SID"), str(out), "--workers", "2", "--shard-size", "64KB",
          "--pairs-file", f"train={root / 'SID' / 'Sony_train_list.txt'}",
          "--pairs-file", f"test={root / 'SID' / 'Sony_test_list.txt'}"])
    expected = {}
    developed = {}
    for stem, f in facts.items():
        packed, sites = sid_pack(f["mosaic"], f["pattern"])
        if f["long"] not in developed:
            developed[f["long"]] = develop(f["long"])
        expected[stem] = {"low": packed, "high": developed[f["long"]], "black": [BLACKS[s] for s in sites],
                         "ratio": f["ratio"], "seconds": f["seconds"], "pattern": f["pattern"]}
    return out, expected


def stem(key: str) -> str:
    """The file stem of a sample key (`Sony+short+00001_00_0~2E1s` → `00001_00_0.1s`)."""
    return key.rsplit("+", 1)[-1].replace("~2E", ".")


def test_the_manifest_records_members_levels_pattern_camera_and_ratios(sid):
    import rawpy

    out, expected = sid
    verify(out)
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["version"] == 5
    for split, scenes in (("train", (0, 1)), ("test", (2, 3))):
        entry = doc["splits"][split]
        assert entry["members"] == {"low": {"dtype": "uint16", "channels": 4},
                                    "high": {"dtype": "uint16", "channels": 3}, "scale": 2}
        sensor = entry["sensor"]
        assert sensor["low"]["kind"] == "bayer-rgbg" and sensor["high"]["kind"] == "developed"
        assert sensor["low"]["cameras"] == ["Sony ILCE-7S"]
        assert sensor["low"]["patterns"] == sorted(PATTERNS[s] for s in scenes)
        assert sensor["high"]["develop"]["no_auto_bright"] is True and sensor["high"]["develop"]["output_bps"] == 16
        assert sensor["libraw"] == ".".join(map(str, rawpy.libraw_version)) and sensor["ratio_cap"] == 300
        assert sensor["exposure_from"] == ["name"]
        for number in range(len(entry["shards"])):
            idx = shard_index(out, split, number)
            for k, key in enumerate(idx["key"]):
                want = expected[stem(key)]
                assert idx["hw"][k] == [SENSOR[0] // 2, SENSOR[1] // 2]
                assert idx["ratio"][k] == pytest.approx(want["ratio"])
                assert idx["exposure"][k] == [want["seconds"], 10.0]
                assert idx["levels"][k] == want["black"] + [WHITE]
    from pairload.read.shards import info

    assert info(out)["train"]["sensor"] == ("camera raw from Sony ILCE-7S (BGGR/RGGB), target developed, ratio 100 "
                                            "to 250")
    ds = open_shards(out, "train")
    assert ds.members == Members(Member("uint16", 4), Member("uint16", 3), 2)
    assert sorted(ds.sensor.ratio.tolist()) == sorted(expected[stem(k)]["ratio"] for k in ds.keys)
    for i, key in enumerate(ds.keys):  # the stored arrays are the independent packing and LibRaw's development
        low, high = ds.arrays(i)
        np.testing.assert_array_equal(low, expected[stem(key)]["low"])
        np.testing.assert_array_equal(high, expected[stem(key)]["high"][:SENSOR[0], :SENSOR[1]])


LOADERS = [("ram", {"num_workers": 0}), ("ram", {"num_workers": 2}), ("ram", {"resident": True}),
           ("wds", {"num_workers": 1}), pytest.param("dali-external", {}, marks=pytest.mark.dali)]


def check_loader(out: Path, expected: dict, kind: str, options: dict, device: str = "cpu") -> None:
    """Two epochs of the test split: each row is the independent packing and LibRaw's development at the planned
    window and orientation, with its ratio and levels; RawNormalize on the device agrees with it on the CPU."""
    import torch

    from pairload import RawNormalize

    if kind.startswith("dali"):
        pytest.importorskip("nvidia.dali")
    seen = 0
    with make_loader(kind, out, split="test", batch_size=2, crop=CROP, seed=5, device=device, **options) as loader:
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            for batch in loader:
                assert batch.low.device.type == device and batch.sensor.values.device.type == device
                assert batch.low.dtype == torch.uint16 and batch.low.shape[1:] == (4, CROP, CROP)
                assert batch.high.shape[1:] == (3, 2 * CROP, 2 * CROP)
                for j, key in enumerate(batch.keys):
                    want = expected[stem(key)]
                    y, x, code = (int(v[0]) for v in sample_params(key_hashes([key]), np.array([want["low"].shape[:2]]),
                                                                   seed=5, epoch=epoch, crop=CROP, augment=True))
                    lo = orient(want["low"][y:y + CROP, x:x + CROP], code)
                    hi = orient(want["high"][2 * y:2 * (y + CROP), 2 * x:2 * (x + CROP)], code)
                    np.testing.assert_array_equal(batch.low[j].cpu().permute(1, 2, 0).numpy(), lo)
                    np.testing.assert_array_equal(batch.high[j].cpu().permute(1, 2, 0).numpy(), hi)
                    assert batch.sensor.ratio[j].item() == pytest.approx(want["ratio"])
                    assert batch.sensor.black[j].tolist() == want["black"] and batch.sensor.white[j].item() == WHITE
                    seen += 1
                x_dev, y_dev = RawNormalize()(batch)
                cpu = type(batch)(batch.low.cpu(), batch.high.cpu(), batch.keys, batch.padded.cpu(),
                                  sensor=type(batch.sensor)(batch.sensor.values.cpu()))
                x_cpu, y_cpu = RawNormalize()(cpu)
                torch.testing.assert_close(x_dev.cpu(), x_cpu, rtol=1e-6, atol=1e-6)
                torch.testing.assert_close(y_dev.cpu(), y_cpu, rtol=1e-6, atol=1e-6)
    assert seen == 8


@pytest.mark.parametrize("kind,options", LOADERS)
def test_every_loader_yields_the_packed_input_and_its_developed_target_at_the_planned_place(sid, kind, options):
    check_loader(*sid, kind, options)


@pytest.mark.gpu
@pytest.mark.parametrize("kind,options", [("ram", {"zero_copy": True}), ("ram", {"resident": True}),
                                          ("ram", {"zero_copy": False, "num_workers": 2}), ("wds", {"num_workers": 2}),
                                          pytest.param("dali-external", {"zero_copy": True}, marks=pytest.mark.dali)])
def test_every_loader_on_the_gpu_yields_the_same_camera_raw_crops(sid, kind, options):
    """The zero-copy kernel (4×uint16 input, 3×uint16 target at 2×), the resident gather, the workers with the
    device's orientation step, wds and DALI fed by the kernel."""
    check_loader(*sid, kind, options, device="cuda")


def test_raw_normalize_applies_sids_levels_ratio_and_clipping(sid):
    import torch

    from pairload import RawNormalize

    out, expected = sid
    with make_loader("ram", out, split="train", batch_size=4, crop=None, augment=False) as loader:
        batch = next(iter(loader))
    x, y = RawNormalize()(batch)
    for j, key in enumerate(batch.keys):
        want = expected[stem(key)]
        counts = want["low"].astype(np.float64)
        sid_input = np.minimum(np.maximum(counts - want["black"], 0) / (WHITE - np.array(want["black"])) *
                               want["ratio"], 1.0)  # SID's preprocessing, written out
        np.testing.assert_allclose(x[j].permute(1, 2, 0).numpy(), sid_input, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(y[j].permute(1, 2, 0).numpy(), want["high"][:SENSOR[0], :SENSOR[1]] / 65535.0,
                                   rtol=1e-6)
    assert x.dtype == torch.float32 and float(x.max()) == 1.0  # ratios of 100 and 250 saturate: clipped
    unclipped, _ = RawNormalize(clip=False, amplify=False)(batch)
    assert float(unclipped.max()) < 1.0


def test_raw_to_raw_keeps_the_target_packed_with_its_own_levels(tmp_path):
    from pairload import RawNormalize

    facts = sid_tree(tmp_path / "SID", scenes=[1])
    pack(tmp_path / "SID" / "Sony", tmp_path / "out", PackOptions(workers=1, raw_target="packed"))
    entry = json.loads((tmp_path / "out" / "manifest.json").read_text())["splits"]["train"]
    assert entry["members"] == {"low": {"dtype": "uint16", "channels": 4}, "high": {"dtype": "uint16", "channels": 4},
                                "scale": 1}
    assert entry["sensor"]["high"]["kind"] == "bayer-rgbg"
    ds = open_shards(tmp_path / "out")
    long_packed, _ = sid_pack(coded_mosaic(51, *SENSOR), PATTERNS[1])
    for i, key in enumerate(ds.keys):
        low, high = ds.arrays(i)
        np.testing.assert_array_equal(low, sid_pack(facts[stem(key)]["mosaic"], PATTERNS[1])[0])
        np.testing.assert_array_equal(high, long_packed)
    assert ds.sensor.levels_high is not None and (ds.sensor.levels_high[:, 4] == WHITE).all()
    with make_loader("ram", tmp_path / "out", batch_size=2, crop=None, augment=False) as loader:
        batch = next(iter(loader))
    _, y = RawNormalize()(batch)
    black = np.array(batch.sensor.black_high[0].tolist())
    np.testing.assert_allclose(y[0].permute(1, 2, 0).numpy(),
                               np.clip((long_packed - black) / (WHITE - black), 0, 1), rtol=1e-6)


# ------------------------------------------------------------------------------------------ bad raw input, by name

def _pair(root: Path, low_name: str, high_name: str, *, low_kw=None, high_kw=None, size=SENSOR, high_size=None):
    for d in ("short", "long"):
        (root / d).mkdir(parents=True, exist_ok=True)
    write_dng(root / "short" / low_name, coded_mosaic(0, *size), **(low_kw or {}))
    write_dng(root / "long" / high_name, coded_mosaic(1, *(high_size or size)), **(high_kw or {}))


def test_a_file_libraw_cannot_open_is_named(tmp_path):
    _pair(tmp_path / "r", "00001_00_0.1s.dng", "00001_00_10s.dng")
    (tmp_path / "r" / "short" / "00001_01_0.1s.ARW").write_bytes(b"II*\x00" + bytes(200))
    with pytest.raises(ImageError, match=r"short/00001_01_0\.1s\.ARW: LibRaw cannot read it as a camera raw file"):
        pack(tmp_path / "r", tmp_path / "out", PackOptions(workers=1))


def test_x_trans_is_refused_by_name(tmp_path):
    _pair(tmp_path / "r", "00001_00_0.1s.dng", "00001_00_10s.dng", low_kw={"pattern": "GGRGGB" "GGBGGR" "BRGRBG"
                                                                          "GGBGGR" "GGRGGB" "RBGBRG"})
    with pytest.raises(ImageError, match=r"00001_00_0\.1s\.dng: not a Bayer mosaic .*: Fuji X-Trans .* not supported"):
        pack(tmp_path / "r", tmp_path / "out", PackOptions(workers=1))


def test_a_pair_from_two_cameras_is_refused(tmp_path):
    _pair(tmp_path / "r", "00001_00_0.1s.dng", "00001_00_10s.dng", high_kw={"make": "Nikon", "model": "D850"})
    with pytest.raises(ImageError, match=r"short/00001_00_0\.1s\.dng was taken with a Pairload Synthetic CFA but "
                                         r"long/00001_00_10s\.dng with a Nikon D850"):
        pack(tmp_path / "r", tmp_path / "out", PackOptions(workers=1))


def test_a_pair_of_two_sensor_sizes_is_refused(tmp_path):
    _pair(tmp_path / "r", "00001_00_0.1s.dng", "00001_00_10s.dng", high_size=(24, 44))
    with pytest.raises(ImageError, match=r"short/00001_00_0\.1s\.dng has 40x24 sensor pixels but long/00001_00_10s\.dng"
                                         r" has 44x24"):
        pack(tmp_path / "r", tmp_path / "out", PackOptions(workers=1))


def test_an_exposure_missing_from_the_name_and_the_metadata_is_refused(tmp_path):
    _pair(tmp_path / "r", "scene1.dng", "scene1.dng", high_kw={"exposure": 10.0})
    with pytest.raises(ImageError, match=r"short/scene1\.dng: no exposure time in its name or its metadata"):
        pack(tmp_path / "r", tmp_path / "out", PackOptions(workers=1))
    shutil.rmtree(tmp_path / "r")
    _pair(tmp_path / "r", "scene1.dng", "scene1.dng", low_kw={"exposure": 0.1}, high_kw={"exposure": 10.0})
    pack(tmp_path / "r", tmp_path / "out", PackOptions(workers=1))  # the metadata's exposures are enough
    entry = json.loads((tmp_path / "out" / "manifest.json").read_text())["splits"]["train"]
    assert entry["sensor"]["exposure_from"] == ["metadata"]
    assert shard_index(tmp_path / "out")["ratio"] == [pytest.approx(100.0)]


def test_a_side_mixing_raw_files_and_images_and_options_that_change_counts_are_refused(tmp_path):
    import cv2

    _pair(tmp_path / "r", "00001_00_0.1s.dng", "00001_00_10s.dng")
    with pytest.raises(ConfigError, match=r"--to-8bit: split 'train' holds camera raw files"):
        pack(tmp_path / "r", tmp_path / "out", PackOptions(workers=1, to_8bit=True))
    with pytest.raises(ConfigError, match=r"--resize/--max-side: split 'train' holds camera raw files"):
        pack(tmp_path / "r", tmp_path / "out", PackOptions(workers=1, max_side=16))
    cv2.imwrite(str(tmp_path / "r" / "short" / "00002_00_0.1s.png"), np.zeros((24, 40, 3), np.uint16))
    cv2.imwrite(str(tmp_path / "r" / "long" / "00002_00_10s.png"), np.ones((24, 40, 3), np.uint16))
    with pytest.raises(ImageError, match=r"the inputs mix camera raw files and images: short/0000[12].*; a side of a "
                                         r"split is stored as one type"):
        pack(tmp_path / "r", tmp_path / "out", PackOptions(workers=1))


def test_dali_file_refuses_camera_raw_folders_naming_pack(tmp_path):
    pytest.importorskip("nvidia.dali")
    _pair(tmp_path / "r", "00001_00_0.1s.dng", "00001_00_10s.dng")
    with pytest.raises(ConfigError, match=r"short/00001_00_0\.1s\.dng: a camera raw file: dali-file decodes 8-bit "
                                          r"images only; pack the folder with `pairload pack`"):
        make_loader("dali-file", tmp_path / "r", batch_size=1, crop=8)


@pytest.mark.dali
def test_paired_inputs_in_a_users_pipeline_give_the_camera_raw_crops_and_their_sensor_facts(sid):
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import pipeline_def

    from pairload.dali import PairedIterator, paired_inputs, paired_source

    out, expected = sid
    src = paired_source(out, kind="external", split="test", batch_size=2, crop=CROP, seed=5, num_workers=1)

    @pipeline_def(batch_size=2, num_threads=1, device_id=None)
    def pipe():
        low, high = paired_inputs(src)
        return low, high

    it = PairedIterator(pipe(), ("low", "high"))
    seen = 0
    for batch in it:
        assert batch["low"].dtype == batch["high"].dtype  # uint16 (torch's) on both sides
        for j, key in enumerate(batch["keys"]):
            want = expected[stem(key)]
            y, x, code = (int(v[0]) for v in sample_params(key_hashes([key]), np.array([want["low"].shape[:2]]),
                                                           seed=5, epoch=0, crop=CROP, augment=True))
            np.testing.assert_array_equal(batch["low"][j].cpu().numpy(),
                                          orient(want["low"][y:y + CROP, x:x + CROP], code))
            np.testing.assert_array_equal(batch["high"][j].cpu().numpy(),
                                          orient(want["high"][2 * y:2 * (y + CROP), 2 * x:2 * (x + CROP)], code))
            assert batch["sensor"].ratio[j].item() == pytest.approx(want["ratio"])
            seen += 1
    assert seen == 4


def test_a_pack_in_a_process_whose_openmp_pool_is_running_does_not_hang(tmp_path):
    """LibRaw develops with OpenMP: workers forked from a process whose OpenMP threads run (torch started them)
    would wait forever on the copied pool's barrier; the pack sees the threads and spawns its workers instead."""
    import subprocess
    import sys

    sid_tree(tmp_path / "SID", scenes=[0])
    code = ("import torch, sys; torch.set_num_threads(2); torch.ones(512, 512) @ torch.ones(512, 512); "
            "from pairload.pack.writer import PackOptions, pack; "
            f"r = pack({str(tmp_path / 'SID' / 'Sony')!r}, {str(tmp_path / 'out')!r}, PackOptions(workers=2)); "
            "print(r.pairs)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "2", res.stderr[-2000:]


def test_a_raw_input_beside_a_16_bit_image_target_at_the_sensors_size(tmp_path):
    """A release that ships its targets already developed (a 16-bit PNG of the sensor's size): the input is packed,
    the target stored as it is at twice the packed size; a target of another size is refused by name."""
    import cv2

    root = tmp_path / "r"
    for d in ("short", "long"):
        (root / d).mkdir(parents=True)
    write_dng(root / "short" / "00001_00_0.1s.dng", coded_mosaic(3, *SENSOR), "BGGR", black=BLACKS, white=WHITE)
    target = (np.arange(SENSOR[0] * SENSOR[1] * 3).reshape(*SENSOR, 3) * 7 % 65536).astype(np.uint16)
    cv2.imwrite(str(root / "long" / "00001_00_10s.png"), target[..., ::-1])
    pack(root, tmp_path / "out", PackOptions(workers=1))
    ds = open_shards(tmp_path / "out")
    assert ds.members == Members(Member("uint16", 4), Member("uint16", 3), 2)
    assert ds.sensor.ratio.tolist() == [100.0]
    low, high = ds.arrays(0)
    np.testing.assert_array_equal(low, sid_pack(coded_mosaic(3, *SENSOR), "BGGR")[0])
    np.testing.assert_array_equal(high, target)
    cv2.imwrite(str(root / "long" / "00001_00_10s.png"), target[:20, :, ::-1])
    with pytest.raises(ImageError, match=r"long/00001_00_10s\.png is 40x20 but its camera raw input "
                                         r"short/00001_00_0\.1s\.dng packs into 20x12 cells .* must be 40x24"):
        pack(root, tmp_path / "out2", PackOptions(workers=1))
