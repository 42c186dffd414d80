"""Miniature replicas of the public low-light datasets, with the folder and file names their repositories use.

Every low image encodes its pair (channel 0: the pair index, 1: the row, 2: the column; for one-to-many sets the
exposure number is added to channel 2), and every high is 255 - low on channels 0 and 1, so any mispairing
shows. Each replica is packed with no options (LOL-Blur with its documented --low-dir/--high-dir).
"""

from pathlib import Path

import cv2
import numpy as np
import pytest

from indexes import shard_index
from pairload import open_shards
from pairload.errors import ImageError, PairingError
from pairload.pack.writer import PackOptions, pack
from pairload.read.shards import verify

from conftest import pair_pixels, write_rgb

H, W = 24, 32


class Replica:
    def __init__(self, root: Path):
        self.root = root
        self.next = 0

    def pair(self, low: str, high: str, ext: str = ".png") -> None:
        lo, hi = pair_pixels(self.next, H, W)
        self.next += 1
        self._write(self.root / (low + ext), lo)
        self._write(self.root / (high + ext), hi)

    def group(self, lows: list[str], high: str, ext: str = ".png") -> None:
        """Several exposures of one scene, one target."""
        lo, hi = pair_pixels(self.next, H, W)
        self.next += 1
        for k, name in enumerate(lows):
            variant = lo.copy()
            variant[..., 2] = (variant[..., 2].astype(int) + 37 * (k + 1)) % 256
            self._write(self.root / (name + ext), variant)
        self._write(self.root / (high + ext), hi)

    @staticmethod
    def _write(path: Path, rgb: np.ndarray) -> None:
        if path.suffix.lower() in (".jpg", ".jpeg"):
            path.parent.mkdir(parents=True, exist_ok=True)
            assert cv2.imwrite(str(path), np.ascontiguousarray(rgb[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, 100])
        else:
            write_rgb(path, rgb)


def check_every_pair(shards: Path, split: str, n: int, lossy: bool = False) -> set[bytes]:
    """Every low/high of the split belong together; returns the distinct targets' bytes."""
    ds = open_shards(shards, split)
    assert len(ds) == n
    targets = set()
    for i in range(len(ds)):
        key, low, high = ds[i]
        diff = np.abs(high[..., :2].astype(int) - (255 - low[..., :2].astype(int)))
        assert (diff.mean() < 2 if lossy else diff.max() == 0), key
        targets.add(high.tobytes())
    return targets


def packed(tmp_path, raw, **opts) -> Path:
    out = tmp_path / "shards"
    report = pack(raw, out, PackOptions(workers=1, **opts))
    verify(out)
    return out, report


def splits_of(out: Path) -> dict[str, int]:
    from pairload.read.shards import info

    return {k: v["samples"] for k, v in info(out).items()}


def test_lol_v1(tmp_path):
    r = Replica(tmp_path / "LOLdataset")
    for i in range(4):
        r.pair(f"our485/low/{i + 1}", f"our485/high/{i + 1}")
    for i in range(2):
        r.pair(f"eval15/low/{i + 100}", f"eval15/high/{i + 100}")
    out, report = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 4, "test": 2}
    check_every_pair(out, "train", 4)
    check_every_pair(out, "test", 2)
    assert report.layout["train"]["folders"] == ["our485/low", "our485/high"]
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["splits"]["test"]["folders"] == ["eval15/low", "eval15/high"]


def test_lol_retinexformer_copy(tmp_path):
    r = Replica(tmp_path / "LOLv1")
    for i in range(3):
        r.pair(f"Train/input/{i}", f"Train/target/{i}")
    r.pair("Test/input/9", "Test/target/9")
    out, _ = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 3, "test": 1}


def test_lol_v2_real_pairs_low_and_normal_names(tmp_path):
    r = Replica(tmp_path / "LOL-v2" / "Real_captured")
    for i in range(1, 4):
        r.pair(f"Train/Low/low{i:05d}", f"Train/Normal/normal{i:05d}")
    r.pair("Test/Low/low00690", "Test/Normal/normal00690")
    out, report = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 3, "test": 1}
    check_every_pair(out, "train", 3)
    assert report.layout["train"]["rules"] == ["side word swapped"]
    assert open_shards(out, "train").keys == ("low00001", "low00002", "low00003")


def test_lol_v2_root_with_two_datasets_is_refused_with_how_to_pack_one(tmp_path):
    root = tmp_path / "LOL-v2"
    r = Replica(root)
    r.pair("Real_captured/Train/Low/low00001", "Real_captured/Train/Normal/normal00001")
    r.pair("Synthetic/Train/Low/r0001", "Synthetic/Train/Normal/r0001")
    r.pair("Synthetic/Test/Low/r0002", "Synthetic/Test/Normal/r0002")
    with pytest.raises(PairingError, match=r"holds several datasets, each with its own splits \(Real_captured, "
                                           r"Synthetic\); pack one at a time, e.g. `pairload pack .*LOL-v2/Synthetic"):
        pack(root, tmp_path / "out", PackOptions(workers=1))
    out, _ = packed(tmp_path, root / "Synthetic")
    assert splits_of(out) == {"train": 1, "test": 1}


def test_ve_lol_side_folders_named_with_their_split(tmp_path):
    r = Replica(tmp_path / "VE-LOL-L-Cap-Full")
    for i in range(1, 4):
        r.pair(f"VE-LOL-L-Cap-Low_train/low{i:05d}", f"VE-LOL-L-Cap-Normal_train/normal{i:05d}")
    for i in range(1, 3):
        r.pair(f"VE-LOL-L-Cap-Low_test/low{i:05d}", f"VE-LOL-L-Cap-Normal_test/normal{i:05d}")
    out, _ = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 3, "test": 2}
    check_every_pair(out, "test", 2)


def test_lsrw_nested_cameras_with_spaces_and_jpeg(tmp_path):
    r = Replica(tmp_path / "LSRW")
    for cam in ("Huawei", "Nikon"):
        for i in range(2):
            r.pair(f"Training data/{cam}/low/{i}", f"Training data/{cam}/high/{i}", ext=".jpg")
        r.pair(f"Eval/{cam}/low/7", f"Eval/{cam}/high/7", ext=".jpg")
    out, _ = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 4, "test": 2}
    check_every_pair(out, "train", 4, lossy=True)
    assert open_shards(out, "test").keys == ("Huawei+7", "Nikon+7")


def test_sice_sequences_and_labels_target_stored_once(tmp_path):
    r = Replica(tmp_path / "SICE")
    for part, seqs in (("Dataset_Part1", (1, 2)), ("Dataset_Part2", (3,))):
        for seq in seqs:
            r.group([f"{part}/{seq}/{k}" for k in range(1, 4)], f"{part}/Label/{seq}", ext=".JPG")
    out, report = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 6, "test": 3}
    assert len(check_every_pair(out, "train", 6, lossy=True)) == 2  # 6 inputs, 2 targets
    assert report.layout["train"]["rules"] == ["sequence to label"]
    import tarfile

    names = [m.name for sh in sorted(out.glob("train-*.tar")) for m in tarfile.open(sh)]
    assert sum(n.endswith(".high.npy") for n in names) == 2  # each target once: 6 lows + 2 highs, not 6 + 6


def test_sid_srgb_every_short_exposure_of_a_scene_to_its_one_long(tmp_path):
    r = Replica(tmp_path / "SID")
    for split, scenes in (("train", ("00001", "00002")), ("test", ("10003",)), ("eval", ("20004",))):
        for scene in scenes:
            r.group([f"{split}/short/{scene}/{scene}_0{k}_0.1s" for k in range(3)],
                    f"{split}/long/{scene}/{scene}_00_10s")
    out, report = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 6, "test": 3, "eval": 3}
    assert len(check_every_pair(out, "train", 6)) == 2
    assert report.layout["train"]["rules"] == ["one target per folder"]
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["version"] == 5 and any(-1 < k for k in shard_index(out)["shares_high"])
    # the tar stays a plain tar: each target once, the other samples name it in their .json
    import tarfile

    names = [m.name for sh in sorted(out.glob("train-*.tar")) for m in tarfile.open(sh)]
    assert sum(n.endswith(".high.npy") for n in names) == 2 and sum(n.endswith(".low.npy") for n in names) == 6


@pytest.mark.parametrize("kind", ["ram", "wds", pytest.param("dali-external", marks=pytest.mark.dali),
                                  pytest.param("dali-file", marks=pytest.mark.dali)])
def test_loaders_yield_one_pair_per_input_when_targets_are_shared(tmp_path, kind):
    from pairload import make_loader

    r = Replica(tmp_path / "SID")
    for scene in range(6):
        r.group([f"train/short/{scene:05d}/{k}" for k in range(3)], f"train/long/{scene:05d}/gt")
    out, _ = packed(tmp_path, r.root, shard_size=64 * 1024)
    loader = make_loader(kind, r.root if kind == "dali-file" else out, batch_size=3, crop=16, last_batch="drop",
                         num_workers=0)
    seen = []
    for batch in loader:
        low, high = batch.low.numpy().astype(int), batch.high.numpy().astype(int)
        np.testing.assert_array_equal(high[:, :2], 255 - low[:, :2])  # same crop and flip on both, right target
        seen.extend(batch.keys)
    assert sorted(seen) == sorted(open_shards(out).keys)


def test_fivek_srgb_expert_c(tmp_path):
    r = Replica(tmp_path / "FiveK")
    for i in range(3):
        r.pair(f"train/input/a{i:04d}", f"train/expertC/a{i:04d}")
    r.pair("test/input/a4999", "test/expertC/a4999")
    out, _ = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 3, "test": 1}


def test_loli_street_train_val_test(tmp_path):
    r = Replica(tmp_path / "LoLI-Street")
    for split, n in (("Train", 3), ("Val", 1), ("Test", 2)):
        for i in range(n):
            r.pair(f"{split}/low/{split}_{i}", f"{split}/high/{split}_{i}")
    out, _ = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 3, "test": 2, "val": 1}


def test_sdsd_png_packs_and_the_numpy_copy_beside_it_is_named_not_dropped(tmp_path):
    root = tmp_path / "SDSD"
    r = Replica(root / "indoor_png")
    for pair in ("pair1", "pair2"):
        for f in range(2):
            r.pair(f"input/{pair}/{f:04d}", f"GT/{pair}/{f:04d}")
    for value, side in enumerate(("input", "GT")):
        (root / "indoor_np" / side / "pair1").mkdir(parents=True)
        np.save(root / "indoor_np" / side / "pair1" / "0000.npy", np.full((2, 2), value, np.float64))
    with pytest.raises(ImageError, match=r"indoor_np/input/pair1/0000\.npy: a \.npy of float64 \(2, 2\); pack stores "
                                         r"\.npy images as they are and reads uint8 or uint16 only: convert it"):
        pack(root, tmp_path / "x", PackOptions(workers=1))
    out, _ = packed(tmp_path, root / "indoor_png")
    assert splits_of(out) == {"train": 4}
    assert open_shards(out).keys[0] == "pair1+0000"


def test_lol_blur_with_its_documented_folder_options(tmp_path):
    r = Replica(tmp_path / "LOL-Blur")
    for split, n in (("train", 2), ("test", 1)):
        for i in range(n):
            r.pair(f"{split}/low_blur_noise/{i:04d}/0000", f"{split}/high_sharp_scaled/{i:04d}/0000")
            lo, _ = pair_pixels(99, H, W)
            write_rgb(r.root / split / "low_blur" / f"{i:04d}" / "0000.png", lo)  # the other inputs stay out
    out, _ = packed(tmp_path, r.root, low_dir="low_blur_noise", high_dir="high_sharp_scaled")
    assert splits_of(out) == {"train": 2, "test": 1}
    check_every_pair(out, "train", 2)


def test_sid_camera_raw_files_that_libraw_cannot_read_are_named(tmp_path):
    pytest.importorskip("rawpy")
    root = tmp_path / "Sony"
    for side, name in (("short", "00001_00_0.1s.ARW"), ("long", "00001_00_10s.ARW")):
        (root / side).mkdir(parents=True)
        (root / side / name).write_bytes(side.encode())  # SID's names, not raw files
    with pytest.raises(ImageError, match=r"short/00001_00_0\.1s\.ARW: truncated or unreadable: LibRaw says "
                                         r"'.+'; re-copy the file"):
        pack(root, tmp_path / "out", PackOptions(workers=1))


def test_unmatched_error_lists_every_split_and_skip_reports_per_split(tmp_path):
    r = Replica(tmp_path / "LOL")
    for split in ("our485", "eval15"):
        for i in range(3):
            r.pair(f"{split}/low/{i}", f"{split}/high/{i}")
        (r.root / split / "low" / "2.png").rename(r.root / split / "low" / "extra.png")
    with pytest.raises(PairingError, match=r"split 'test': 1 in eval15/low .*extra.png.* \| split 'train': 1 in "
                                           r"our485/low"):
        pack(r.root, tmp_path / "out", PackOptions(workers=1))
    out, report = packed(tmp_path, r.root, skip_unmatched=True)
    assert report.skipped_per_split == {"test": 2, "train": 2} and splits_of(out) == {"train": 2, "test": 2}


def test_a_name_template_pairs_basicsr_style_names(tmp_path):
    r = Replica(tmp_path / "SR")
    for i in range(3):
        r.pair(f"lq/{i:04d}x4", f"gt/{i:04d}")
    with pytest.raises(PairingError, match="no naming rule pairs them one to one"):
        pack(r.root, tmp_path / "x", PackOptions(workers=1))
    out, report = packed(tmp_path, r.root, name_template="{}x4")
    assert report.layout["train"]["rules"] == ["name template"]
    check_every_pair(out, "train", 3)


def test_split_name_override_and_pairs_files_as_datasets_ship_them(tmp_path):
    r = Replica(tmp_path / "raw")
    for i in range(4):
        r.pair(f"Sony/short/{i:05d}_00_0.1s", f"Sony/long/{i:05d}_00_10s")
    (tmp_path / "train.txt").write_text("".join(f"./Sony/short/{i:05d}_00_0.1s.png ./Sony/long/{i:05d}_00_10s.png "
                                                f"ISO200 F8\n" for i in range(3)))
    (tmp_path / "test.txt").write_text("./Sony/short/00003_00_0.1s.png ./Sony/long/00003_00_10s.png ISO200 F8\n")
    out, _ = packed(tmp_path, r.root, pairs_file=(f"train={tmp_path / 'train.txt'}", f"test={tmp_path / 'test.txt'}"))
    assert splits_of(out) == {"train": 3, "test": 1}
    check_every_pair(out, "train", 3)
    r2 = Replica(tmp_path / "LOL")
    r2.pair("our485/low/1", "our485/high/1")
    out2 = tmp_path / "s2"
    pack(r2.root, out2, PackOptions(workers=1, split_names=(("our485", "lol_train"),)))
    assert splits_of(out2) == {"lol_train": 1}


def test_train_runs_on_packed_lol_v1_with_no_split_option(tmp_path):
    from pairload.recipes.train import main

    r = Replica(tmp_path / "LOLdataset")
    for i in range(8):
        r.pair(f"our485/low/{i + 1}", f"our485/high/{i + 1}")
    for i in range(2):
        r.pair(f"eval15/low/{i + 100}", f"eval15/high/{i + 100}")
    out, _ = packed(tmp_path, r.root)
    assert main(["--shards", str(out), "--device", "cpu", "--crop", "16", "--batch-size", "4", "--width", "8",
                 "--depth", "2", "--workers", "0", "--epochs", "1", "--out", str(tmp_path / "run")]) == 0


def test_lcdp_train_valid_test_and_a_gif_beside_them_are_reported(tmp_path):
    r = Replica(tmp_path / "LCDP")
    for split, n in (("train", 3), ("valid", 1), ("test", 2)):
        for i in range(n):
            r.pair(f"{split}/input/{split}{i}", f"{split}/gt/{split}{i}")
    (r.root / "test" / "input" / "preview.gif").write_bytes(b"GIF89a")
    out, report = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 3, "val": 1, "test": 2}
    check_every_pair(out, "val", 1)
    assert report.split_folders["valid"] == {"split": "val", "how": "alias of val"}
    assert [(u["folder"], u["reason"], u["names"]) for u in report.unused] == [
        ("test/input", "unsupported extension", ["preview.gif"])]


def test_an_interrupted_copy_of_targets_is_refused_not_packed_by_elimination(tmp_path):
    r = Replica(tmp_path / "LOL")
    for i in range(10):
        r.pair(f"our485/low/{i}", f"our485/high/{i}")
    for i in range(1, 10):
        (r.root / "our485" / "high" / f"{i}.png").unlink()
    with pytest.raises(PairingError, match=r"split 'train': 9 in our485/low without a partner in our485/high: "
                                           r"our485/low/1.png, .* pairload never pairs by elimination: restore the "
                                           r"missing files"):
        pack(r.root, tmp_path / "out", PackOptions(workers=1))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_basicsr_meta_info_lists_with_names_relative_to_the_side_folders(tmp_path):
    # FiveK as BasicSR-style repositories ship it: names with spaces, lines `low name  high name` per split
    r = Replica(tmp_path / "FiveK")
    for split, names in (("train", ("a0001-jmac_DSC1459", "a3102-JI2E4053")), ("test", ("a4501-Duggan_090428",))):
        for name in names:
            r.pair(f"{split}/input/{name} 2", f"{split}/expertC/{name}")
    meta = {split: tmp_path / f"meta_info_{split}.txt" for split in ("train", "test")}
    meta["train"].write_text("a0001-jmac_DSC1459 2.png a0001-jmac_DSC1459.png\n"
                             "a3102-JI2E4053 2.png a3102-JI2E4053.png\n")
    meta["test"].write_text("a4501-Duggan_090428 2.png a4501-Duggan_090428.png\n")
    out, report = packed(tmp_path, r.root, pairs_file=tuple(f"{s}={f}" for s, f in meta.items()))
    assert splits_of(out) == {"train": 2, "test": 1}
    check_every_pair(out, "train", 2)
    assert report.layout["test"]["rules"] == ["pairs file (names relative to test/input/ and test/expertC/)"]
    assert list(open_shards(out, "test").keys) == ["test+input+a4501-Duggan_090428~202"]  # key: path below RAW
    (tmp_path / "rel.txt").write_text("test/input/a4501-Duggan_090428 2.png test/expertC/a4501-Duggan_090428.png\n")
    report = pack(r.root, tmp_path / "s2", PackOptions(workers=1, pairs_file=f"test={tmp_path / 'rel.txt'}"))
    assert report.layout["test"]["rules"] == ["pairs file (paths relative to RAW)"]
    (tmp_path / "bad.txt").write_text("a4501-Duggan_090428 2.png missing.png\n")
    with pytest.raises(PairingError, match=r"bad.txt:1: a4501-Duggan_090428 does not exist under .*FiveK, and the line "
                                           r"is not a pair of names in the side folders either \(test/input/"):
        pack(r.root, tmp_path / "s3", PackOptions(workers=1, pairs_file=f"test={tmp_path / 'bad.txt'}"))


def test_a_pairs_list_lying_in_raw_is_named_with_the_option_that_uses_it(tmp_path):
    r = Replica(tmp_path / "LOL")
    for i in range(3):
        r.pair(f"low/{i}", f"high/{i}")
    (r.root / "meta_info.txt").write_text("2.png 2.png\n")  # marks no split: only reported
    (r.root / "notes.txt").write_text("captured with a Nikon D750.\nsee paper.png for details\n")
    out, report = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 3}
    assert [(u["folder"], u["reason"], u["names"]) for u in report.unused] == [
        (".", "a pairs list not given with --pairs-file", ["meta_info.txt"])]
    assert f"pack by it with --pairs-file {r.root / 'meta_info.txt'}" in report.unused[0]["hint"]
    (r.root / "meta_info.txt").rename(r.root / "meta_info_test.txt")  # marks its pair as test: never packed as train
    with pytest.raises(PairingError, match=r"meta_info_test.txt: lists 1 pair\(s\) as 'test' \(low/2.png\) that "
                                           r"folder discovery would pack into 'train'.*--pairs-file test="):
        packed(tmp_path / "a", r.root)
    out2, report2 = packed(tmp_path / "b", r.root, pairs_file=str(r.root / "meta_info_test.txt"))
    assert report2.layout["test"]["rules"] == ["pairs file (names relative to low/ and high/)"]  # its name's split
    assert [u["reason"] for u in report2.unused] == ["not in the pairs file", "not in the pairs file"]


# -------------------------------------------------------------- what cannot be paired: what was found, what would work

def test_matlab_arrays_only_are_refused_naming_the_conversion(tmp_path):
    root = tmp_path / "LSRW"
    for side in ("low", "high"):
        (root / side).mkdir(parents=True)
        (root / side / "0001.mat").write_bytes(b"MATLAB 5.0")
    with pytest.raises(PairingError, match=r"LSRW: low holds no usable images \(found 1 \.mat\); \.mat: arrays, one "
                                           r"image each: save each as \.npy, which pack stores as it is"):
        pack(root, tmp_path / "out", PackOptions(workers=1))


def test_smid_numpy_arrays_pack_once_their_side_folders_are_named(tmp_path):
    root = tmp_path / "SMID"
    for value, side in enumerate(("SMID_LQ_np", "SMID_Long_np")):
        (root / side / "0001").mkdir(parents=True)
        np.save(root / side / "0001" / "0000.npy", np.full((2, 2, 3), value, np.uint8))
    match = (r"SMID: no pairs found; .*\(use --low-dir/--high-dir for other folder names, or --pairs-file\); found 2 "
             r"images in 2 folder\(s\) \(SMID_LQ_np/0001, SMID_Long_np/0001\)")
    with pytest.raises(PairingError, match=match):
        pack(root, tmp_path / "out", PackOptions(workers=1))
    out, _ = packed(tmp_path, root, low_dir="SMID_LQ_np", high_dir="SMID_Long_np")
    assert splits_of(out) == {"train": 1}
    np.testing.assert_array_equal(open_shards(out)[0][2], np.full((2, 2, 3), 1, np.uint8))


@pytest.mark.parametrize("name, files, n", [
    ("DICM", ["01.jpg", "02.jpg", "03.jpg"], 3),  # one flat folder (also LIME, MEF, NPE, VV)
    ("LIME", ["low/1.bmp", "low/2.bmp"], 2),  # a low folder with no high side
    ("DarkFace", ["image/1.png", "image/2.png", "label/1.txt"], 2),  # `label` holds no images: not targets
    ("ExDark", ["Bicycle/2015_00001.png", "Boat/2015_00002.png"], 2),  # class folders, no name in two of them
])
def test_unpaired_sets_are_refused_as_images_with_no_targets(tmp_path, name, files, n):
    root = tmp_path / name
    for i, f in enumerate(files):
        if f.endswith(".txt"):
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            (root / f).write_text("1\n10 10 20 20\n")
        else:
            write_rgb(root / f, pair_pixels(i, 8, 8)[0])
    match = (rf"{name}: {n} images and no targets: this looks like an unpaired "
             r"\(test-only\) set; pairload packs pairs\. .*If the targets exist, put them "
             r"in a high/ folder beside a low/ folder")
    with pytest.raises(PairingError, match=match):
        pack(root, tmp_path / "out", PackOptions(workers=1))


def test_msec_five_exposures_share_one_target(tmp_path):
    # MSEC (Afifi et al.): INPUT_IMAGES/<name>_{N1.5,N1,0,P1,P1.5}.JPG, GT_IMAGES/<name>.jpg, per split folder
    r = Replica(tmp_path / "MSEC")
    exposures = ("N1.5", "N1", "0", "P1", "P1.5")
    for split, scenes in (("training", ("a0001-jmac_DSC1459", "a0002-dgw_005")),
                          ("validation", ("a0003-NKIM_MG_8178",))):
        for scene in scenes:
            r.group([f"{split}/INPUT_IMAGES/{scene}_{e}" for e in exposures], f"{split}/GT_IMAGES/{scene}", ext=".JPG")
            (r.root / split / "GT_IMAGES" / f"{scene}.JPG").rename(r.root / split / "GT_IMAGES" / f"{scene}.jpg")
    out, report = packed(tmp_path, r.root)
    assert splits_of(out) == {"train": 10, "test": 5}
    assert len(check_every_pair(out, "train", 10, lossy=True)) == 2
    assert report.layout["train"] == {"folders": ["training/INPUT_IMAGES", "training/GT_IMAGES"],
                                      "rules": ["target name as prefix"]}
