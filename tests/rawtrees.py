"""Tiny replicas of the real on-disk layouts of SID, ELD, SMID and SDSD, built in tmp_path, each returned with a
description of the pairs a correct pack must find (paths, split, ratio, Bayer pattern) and of every file's pixels,
so that tests check a pack against the dataset's own conventions, not against pairload's reading of them.

Layout facts (what the datasets' own repositories and loaders expect; read in the stored GitHub snapshots):

SID, cchen156/Learning-to-See-in-the-Dark
  - README.md, train_Sony.py, test_Sony.py: `dataset/Sony/short/*.ARW` (inputs) and `dataset/Sony/long/*.ARW`
    (references), `dataset/Fuji/{short,long}/*.RAF`. Name `SSSSS_BB_<seconds>s.<ext>`: scene id (first digit: 0
    train, 1 test, 2 val), burst index, exposure. A scene has ONE long file, always burst `_00_`, 10 s or 30 s;
    shorts are 0.1 s, 0.04 s or 0.033 s (Sony lists: 0.1/10, 0.04/10, 0.033/10, 0.1/30).
  - dataset/Sony_{train,val,test}_list.txt (1865/234/598 lines), Fuji_*_list.txt: one pair a line,
    `./Sony/short/00001_00_0.04s.ARW ./Sony/long/00001_00_10s.ARW ISO200 F8`: low, high (relative to `dataset/`,
    `./` prefixed), ISO and F number; single spaces, LF, a final newline. Many shorts share one long.
  - train_Sony.py: ratio = min(long_s / short_s, 300) (so 100, 250, 300, and 300 for 0.033 s and for 0.1 s vs
    30 s); black 512 and white 16383 hard-coded; packing R,G,B,G = sites (0,0),(0,1),(1,1),(1,0) (right for the
    Sony's RGGB only); the target is `postprocess(use_camera_wb=True, half_size=False, no_auto_bright=True,
    output_bps=16)`, cropped at 2x the input's crop. Surprise: its glob `%05d_00*.ARW` trains and tests on burst
    `_00_` shorts only (280 of the 1865 train lines), while the lists name every burst.
  - Fuji is X-Trans (6x6 CFA): pairload refuses it (read_mosaic: "Fuji X-Trans ... not supported yet").
ELD, Vandermode/ELD
  - test_ELD.py: `<root>/<camera>/scene-<k>/IMG_<NNNN><ext>`, scenes 1..10; cameras SonyA7S2 `.ARW`, NikonD850
    `.nef` (lower case), CanonEOS70D and CanonEOS700D `.CR2` (CanonEOS5D4 `.CR2` only with --include).
    issue #6 (Vandermode/ELD): 16 raw files a scene. README.md + imgs/dataset.png (capture protocol): per noisy ISO
    (800, 1600, 3200) a reference at (ISO 100, t), then noisy shots at (ISO g, t*/f) with g·t* = 100·t, for
    f = 1, 10, 100, 200, then another reference: references are IMG 1, 6, 11, 16.
  - dataset/sid_dataset.py ELDEvalDataset: the target of input id i is the reference id nearest to i
    (argmin |i - [1, 6, 11, 16]|, first on ties); ratio = (ISO·exposure of target) / (ISO·exposure of input), from
    EXIF (`metainfo`), which is the factor f; test_ELD.py evaluates ids [4, 9, 14] (x100) and [5, 10, 15] (x200),
    all against references 6, 11, 16. ELD is an evaluation set: its pairs are all `test`.
  - ELD ships no pairs list; a user writes one: `--pairs-file test=ELD_pairs.txt`, lines
    `SonyA7S2/scene-1/IMG_0004.ARW SonyA7S2/scene-1/IMG_0006.ARW` relative to RAW (pairload/folders/pairsfile.py:
    whitespace-separated, extra columns ignored, `./` allowed; tab-separated lines may carry a split column).
SMID, cchen156/Seeing-Motion-in-the-Dark (DRV) + Retinexformer / SNR-Aware-Low-Light-Enhance
  - Retinexformer README.md, Options/RetinexFormer_SMID.yml, basicsr/data/SMID_image_dataset.py; SNR-Aware
    data/dataset_SMID_{train,test}.py: `SMID/SMID_LQ_np/<scene 4 digits>/<frame 4 digits>.npy` and
    `SMID/SMID_Long_np/<scene>/...`; every LQ frame of a scene pairs with the FIRST sorted file of its Long folder
    (files named `*.ARW` or `*half*` skipped there). Arrays are uint8 H×W×3 BGR (`read_img2` divides by 255 and
    the loader swaps [2,1,0]; some have 4 channels, cut to 3).
  - Test scenes: the 49 ids of SNR-Aware's test_list.txt, identical to DRV/test_list.txt (0013 0009 0020 ...);
    DRV also has train_list (129) and val_list (24), which SNR-Aware and Retinexformer fold into training. Where the
    list lives disagrees: Retinexformer's README says `SMID_Long_np/text_list.txt`, its code opens
    `SMID/test_list.txt` (dirname of dataroot_gt).
SDSD, dvlab-research/SDSD (static version) as SNR-Aware / Retinexformer load it
  - `indoor_static_np/{input,GT}/pair<k>/<NNNN>.npy`, `outdoor_static_np/{input,GT}/MVI_<NNNN>/<NNNN>.npy`;
    data/dataset_SDSD_{train,test}.py pair input and GT by position in each folder's sorted listing (same count
    asserted; the names are equal). Test folders (options/train/SDSD_{indoor,outdoor}.yml `testing_dir`):
    indoor pair11,pair21,pair1,pair19,pair4,pair9; outdoor MVI_0898,MVI_0928,MVI_0906,MVI_0975,MVI_1001,MVI_0997,
    MVI_1003,MVI_1026,MVI_1030,MVI_1032 (a folder `X_2…` counts as X). uint8 BGR like SMID.

How a user packs each tree (`Tree.pack_argv(out)` gives the line):
  SID   pairload pack dataset SHARDS --pairs-file train=dataset/Sony_train_list.txt
          --pairs-file val=dataset/Sony_val_list.txt --pairs-file test=dataset/Sony_test_list.txt
  ELD   pairload pack ELD SHARDS --pairs-file test=ELD_pairs.txt
  SMID  pairload pack SMID SHARDS --pairs-file SMID_pairs.tsv  (tab-separated low, high, split; without it,
          --low-dir SMID_LQ_np --high-dir SMID_Long_np packs every scene into train)
  SDSD  pairload pack SDSD/indoor_static_np SHARDS --pairs-file SDSD_indoor_pairs.tsv  (likewise outdoor)

Camera raw files are DNGs (tests/dng.py) under the datasets' own names and extensions: LibRaw decides by content,
so a DNG named `.ARW`, `.nef`, `.CR2` or `.RAF` reads bit-exactly (checked with LibRaw 0.22). LibRaw reads no ISO
from a DNG's main directory (only from an EXIF directory, which write_dng does not write), so ELD's ISO lives in
the description only: `ExpectedPair.ratio` is ELD's ISO·exposure ratio (f), `exposure_ratio` what the files'
exposures alone give (g·f/100, 8 to 32 times more). Each scene cycles through the four Bayer offsets (the real
cameras are all RGGB) so that every packing offset is exercised; non-Sony cameras get other black levels (Nikon
600, Canon 2048) so that SID's hard-coded 512 shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import numpy as np
import pytest

SPLITS = ("train", "val", "test")
PATTERNS = ("RGGB", "BGGR", "GRBG", "GBRG")
XTRANS = "GGRGGB" "GGBGGR" "BRGRBG" "GGBGGR" "GGRGGB" "RBGBRG"  # 6×6, Fuji-like
BLACK, WHITE = 512, 16383  # Sony's 14-bit levels, as SID hard-codes them
SID_RATIO_CAP = 300
ELD_REFERENCES = (1, 6, 11, 16)
ELD_ISOS = (800, 1600, 3200)
ELD_FACTORS = (1, 10, 100, 200)


# ------------------------------------------------------------------ what each file holds


def coded_mosaic(tag: int, shape: tuple[int, int], black: int = BLACK, white: int = WHITE) -> np.ndarray:
    """A sensor mosaic whose every sample says which file (tag), row, column and 2×2 site it is: black + the index
    ((tag·H + row)·W + col)·4 + site, modulo white - black; 15871 = 59·269 is prime to H·W·4 for the sizes used
    here, so two files never hold the same mosaic and a shifted crop never lands on the same values."""
    height, width = shape
    row, col = np.mgrid[:height, :width]
    site = (row % 2) * 2 + col % 2
    index = ((tag * height + row) * width + col) * 4 + site
    return (black + index % (white - black)).astype(np.uint16)


def coded_array(tag: int, shape: tuple[int, int], channels: int = 3) -> np.ndarray:
    """A uint8 H×W×C array (SMID/SDSD `.npy`) whose pixels mix file, row, column and channel; 37 is odd, so files
    with tags under 256 apart never hold the same array, and channel c is 85·c off channel 0 (a swap shows)."""
    row, col, chan = np.mgrid[:shape[0], :shape[1], :channels]
    return ((37 * tag + 11 * row + 3 * col + 85 * chan) % 256).astype(np.uint8)


def pack_rgbg(mosaic: np.ndarray, pattern: str) -> np.ndarray:
    """The mosaic packed SID-style, H/2×W/2×4 in R, G of R's row, B, G of B's row, whatever the 2×2 offset
    (`pattern`: the colours of the top-left cell, row by row); an odd last row or column is dropped."""
    cells = {(r, c): pattern[2 * r + c] for r in (0, 1) for c in (0, 1)}
    (r_row, r_col), = [site for site, letter in cells.items() if letter == "R"]
    sites = [(r_row, r_col), (r_row, 1 - r_col), (1 - r_row, 1 - r_col), (1 - r_row, r_col)]
    assert [cells[s] for s in sites] == list("RGBG"), f"{pattern!r} is not a Bayer pattern"
    h, w = mosaic.shape[0] // 2 * 2, mosaic.shape[1] // 2 * 2
    return np.stack([mosaic[r:h:2, c:w:2] for r, c in sites], axis=-1)


@dataclass(frozen=True)
class RawFile:
    """A camera raw file of a tree: where it is (relative to the tree's root), what was written into it."""

    rel: str
    tag: int
    shape: tuple[int, int]
    pattern: str  # 4 letters (Bayer) or 36 (X-Trans)
    exposure: float  # seconds, in the DNG's ExposureTime
    iso: int | None  # the shot's ISO (ELD, SID's list column); not in the file: LibRaw would not read it
    black: int = BLACK
    white: int = WHITE
    camera: str = "SONY ILCE-7SM2"

    def __post_init__(self):
        if len(self.pattern) not in (4, 36) or set(self.pattern) != set("RGB"):
            raise ValueError(f"RawFile {self.rel}: pattern {self.pattern!r} is neither 2×2 nor 6×6 RGB")
        if not (0 <= self.black < self.white and self.exposure > 0 and min(self.shape) >= 22):
            raise ValueError(f"RawFile {self.rel}: inconsistent levels, exposure or shape (LibRaw needs 22 px)")

    @property
    def bayer(self) -> bool:
        return len(self.pattern) == 4

    def mosaic(self) -> np.ndarray:
        """The H×W uint16 sensor counts written into the file."""
        return coded_mosaic(self.tag, self.shape, self.black, self.white)

    def packed(self) -> np.ndarray:
        """What a correct packer stores as the input: the mosaic packed R, G, B, G at half resolution."""
        if not self.bayer:
            raise ValueError(f"{self.rel}: X-Trans has no 2×2 packing; a packer must refuse it")
        return pack_rgbg(self.mosaic(), self.pattern)


@dataclass(frozen=True)
class NpyFile:
    """An `.npy` array of a tree (SMID/SDSD): uint8 H×W×C, stored as it is (BGR order, as the loaders expect)."""

    rel: str
    tag: int
    shape: tuple[int, int]
    channels: int = 3

    def array(self) -> np.ndarray:
        return coded_array(self.tag, self.shape, self.channels)


@dataclass(frozen=True)
class ExpectedPair:
    """A pair the dataset's own loader forms: low and high paths relative to the tree's root (posix), the split,
    the amplification ratio that loader applies (None: none), the 2×2 CFA of both files (None for `.npy`)."""

    low: str
    high: str
    split: str
    ratio: float | None = None
    pattern: str | None = None
    exposure_ratio: float | None = None  # high exposure / low exposure as the files' metadata alone give it

    def __post_init__(self):
        if self.split not in SPLITS or self.low == self.high or (self.ratio is not None and not self.ratio > 0):
            raise ValueError(f"ExpectedPair {self.low} -> {self.high}: bad split {self.split!r} or ratio {self.ratio}")


@dataclass(frozen=True)
class Tree:
    """A dataset replica: its root (RAW of `pairload pack RAW SHARDS`), the pairs a correct pack holds, every file
    written (path relative to root -> RawFile or NpyFile), and the extra `pack` arguments a user gives."""

    name: str
    root: Path
    pairs: tuple[ExpectedPair, ...]
    files: Mapping[str, RawFile | NpyFile]
    pack_args: tuple[str, ...] = ()
    refused: bool = False  # every pair must be refused (X-Trans)
    notes: str = field(default="", compare=False)

    def __post_init__(self):
        missing = [p for pair in self.pairs for p in (pair.low, pair.high) if p not in self.files]
        if missing:
            raise ValueError(f"Tree {self.name}: pairs name files never written: {missing[:3]}")

    def split(self, name: str) -> tuple[ExpectedPair, ...]:
        return tuple(p for p in self.pairs if p.split == name)

    @property
    def splits(self) -> dict[str, int]:
        """Pairs per split, as a manifest would count them."""
        out: dict[str, int] = {}
        for p in self.pairs:
            out[p.split] = out.get(p.split, 0) + 1
        return out

    def pack_argv(self, out: str | Path) -> list[str]:
        """`pairload.cli.main` arguments that pack the tree the way a user would."""
        return ["pack", str(self.root), str(out), *self.pack_args]


def _write_raw(root: Path, spec: RawFile) -> None:
    from dng import write_dng

    path = root / spec.rel
    path.parent.mkdir(parents=True, exist_ok=True)
    make, _, model = spec.camera.partition(" ")
    if spec.camera.startswith("NIKON CORPORATION"):
        make, model = "NIKON CORPORATION", spec.camera[len("NIKON CORPORATION "):]
    elif spec.camera.startswith("Canon "):
        make, model = "Canon", spec.camera  # Canon's Model repeats the make, as real CR2 files do
    write_dng(path, spec.mosaic(), spec.pattern, black=spec.black, white=spec.white, exposure=spec.exposure,
              make=make, model=model)


def _write_npy(root: Path, spec: NpyFile) -> None:
    path = root / spec.rel
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, spec.array())


# ------------------------------------------------------------------ SID


# (scene, split digit decides the split, long seconds, [(burst, short seconds)], "ISO F" columns)
SID_SCENES = (
    ("00001", 10, ((0, 0.04), (0, 0.1), (1, 0.04), (1, 0.1)), "ISO200 F8"),
    ("00072", 30, ((0, 0.1), (1, 0.1)), "ISO1000 F4"),
    ("10003", 10, ((0, 0.04), (0, 0.1)), "ISO200 F9"),
    ("20005", 10, ((0, 0.033), (0, 0.1)), "ISO200 F13"),
)
SID_SPLIT_OF_DIGIT = {"0": "train", "1": "test", "2": "val"}
SONY_SHAPES = ((24, 32), (28, 36))


def sid_ratio(short_s: float, long_s: float) -> float:
    """train_Sony.py's ratio: long exposure over short, capped at 300."""
    return min(long_s / short_s, SID_RATIO_CAP)


def build_sid(tmp_path: Path, *, scenes=SID_SCENES, shapes=SONY_SHAPES) -> Tree:
    """`dataset/Sony/{short,long}/SSSSS_BB_<t>s.ARW` (DNG content) and `dataset/Sony_{train,val,test}_list.txt` in
    SID's exact format. Scene k has pattern PATTERNS[k % 4] and shape shapes[k % len]; input tags are the pair
    indexes (list order: train, val, test), the long files' tags follow."""
    root = tmp_path / "dataset"
    files: dict[str, RawFile] = {}
    pairs: list[ExpectedPair] = []
    lines: dict[str, list[str]] = {s: [] for s in SPLITS}
    order = sorted(range(len(scenes)), key=lambda k: SPLITS.index(SID_SPLIT_OF_DIGIT[scenes[k][0][0]]))
    n_inputs = sum(len(scenes[k][2]) for k in order)
    for long_tag, k in enumerate(order, start=n_inputs):
        scene, long_s, shots, columns = scenes[k]
        split = SID_SPLIT_OF_DIGIT[scene[0]]
        pattern, shape = PATTERNS[k % 4], shapes[k % len(shapes)]
        iso = int(columns.split()[0][3:])
        high = f"Sony/long/{scene}_00_{long_s:g}s.ARW"
        files[high] = RawFile(high, long_tag, shape, pattern, float(long_s), iso)
        for burst, short_s in shots:
            low = f"Sony/short/{scene}_{burst:02d}_{short_s:g}s.ARW"
            files[low] = RawFile(low, len(pairs), shape, pattern, short_s, iso)
            pairs.append(ExpectedPair(low, high, split, sid_ratio(short_s, long_s), pattern, long_s / short_s))
            lines[split].append(f"./{low} ./{high} {columns}\n")
    for spec in files.values():
        _write_raw(root, spec)
    lists = []
    for split in SPLITS:
        path = root / f"Sony_{split}_list.txt"
        path.write_text("".join(lines[split]), newline="\n")
        lists += ["--pairs-file", f"{split}={path}"]
    return Tree("SID", root, tuple(pairs), MappingProxyType(files), tuple(lists),
                notes="list files from the GitHub repo's dataset/ folder, beside Sony/")


def build_sid_fuji(tmp_path: Path) -> Tree:
    """`dataset/Fuji/{short,long}/*.RAF` (X-Trans DNG content) with `Fuji_{train,test}_list.txt`: every pair must
    be refused, naming X-Trans."""
    root = tmp_path / "dataset"
    files: dict[str, RawFile] = {}
    pairs: list[ExpectedPair] = []
    args: list[str] = []
    for split, scene, columns in (("train", "00001", "ISO1000 F3.6"), ("test", "10019", "ISO640 F7.1")):
        high = f"Fuji/long/{scene}_00_10s.RAF"
        low = f"Fuji/short/{scene}_00_0.1s.RAF"
        files[high] = RawFile(high, 2 * len(pairs) + 1, (36, 36), XTRANS, 10.0, None, camera="FUJIFILM X-T2")
        files[low] = RawFile(low, 2 * len(pairs), (36, 36), XTRANS, 0.1, None, camera="FUJIFILM X-T2")
        pairs.append(ExpectedPair(low, high, split, 100.0, None, 100.0))
        path = root / f"Fuji_{split}_list.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"./{low} ./{high} {columns}\n", newline="\n")
        args += ["--pairs-file", f"{split}={path}"]
    for spec in files.values():
        _write_raw(root, spec)
    return Tree("SID-Fuji", root, tuple(pairs), MappingProxyType(files), tuple(args), refused=True)


# ------------------------------------------------------------------ ELD

# camera folder -> (extension as ELD's test_ELD.py names it, "make model", black level)
ELD_CAMERAS = {
    "SonyA7S2": (".ARW", "SONY ILCE-7SM2", 512),
    "NikonD850": (".nef", "NIKON CORPORATION NIKON D850", 600),
    "CanonEOS70D": (".CR2", "Canon EOS 70D", 2048),
    "CanonEOS700D": (".CR2", "Canon EOS 700D", 2048),
}


def eld_shot(img_id: int) -> tuple[int, int]:
    """(ISO, low-light factor) of ELD image id 1..16; factor 0 for a reference (ISO 100, the metered time)."""
    if img_id in ELD_REFERENCES:
        return 100, 0
    block = (img_id - 2) // 5  # ids 2-5, 7-10, 12-15
    return ELD_ISOS[block], ELD_FACTORS[(img_id - 2) % 5]


def eld_reference(img_id: int) -> int:
    """ELDEvalDataset's target: the reference id nearest to img_id, the first one on a tie."""
    return min(ELD_REFERENCES, key=lambda r: abs(img_id - r))


def build_eld(tmp_path: Path, *, cameras=tuple(ELD_CAMERAS), scenes=(1, 2), factors=(100, 200),
              shape=(24, 32)) -> Tree:
    """`ELD/<camera>/scene-<k>/IMG_00NN<ext>`, all 16 shots of each scene (DNG content, exposures per ELD's
    protocol: references 1 s at ISO 100, noisy (100 / (ISO·f)) s), and `ELD_pairs.txt` (beside ELD/) listing the
    shots of low-light `factors` against their nearest reference, all `test`. Scene k of camera c has pattern
    PATTERNS[(c + k) % 4]; shots outside `factors` are written but in no pair, as in the real release."""
    root = tmp_path / "ELD"
    wanted = [i for i in range(1, 17) if eld_shot(i)[1] in factors]
    files: dict[str, RawFile] = {}
    pairs: list[ExpectedPair] = []
    lines = ["# ELD evaluation pairs (noisy, nearest long-exposure reference; ISO and factor for people)\n"]
    unpaired: list[tuple[str, int, str, int, str]] = []
    for c, camera in enumerate(cameras):
        ext, model, black = ELD_CAMERAS[camera]
        for k in scenes:
            pattern = PATTERNS[(c + k) % 4]
            folder = f"{camera}/scene-{k}"
            for i in range(1, 17):
                rel = f"{folder}/IMG_{i:04d}{ext}"
                if i not in wanted:
                    unpaired.append((rel, i, pattern, black, model))
                    continue
                iso, f = eld_shot(i)
                high = f"{folder}/IMG_{eld_reference(i):04d}{ext}"
                files[rel] = RawFile(rel, len(pairs), shape, pattern, 100 / (iso * f), iso, black, WHITE, model)
                pairs.append(ExpectedPair(rel, high, "test", float(f), pattern, iso * f / 100))
                lines.append(f"{rel} {high} ISO{iso} x{f}\n")
    for tag, (rel, i, pattern, black, model) in enumerate(unpaired, start=len(pairs)):
        iso, f = eld_shot(i)
        seconds = 1.0 if f == 0 else 100 / (iso * f)  # references: 1 s at ISO 100; noisy: ISO·t* = 100·1 s, t = t*/f
        files[rel] = RawFile(rel, tag, shape, pattern, seconds, iso, black, WHITE, model)
    for spec in files.values():
        _write_raw(root, spec)
    listing = tmp_path / "ELD_pairs.txt"
    listing.write_text("".join(lines), newline="\n")
    return Tree("ELD", root, tuple(pairs), MappingProxyType(files), ("--pairs-file", f"test={listing}"))


# ------------------------------------------------------------------ SMID and SDSD (.npy, as SNR-Aware ships them)

SMID_TEST = ("0013", "0009", "0020", "0007", "0010", "0012", "0154", "0036", "0037", "0039", "0047", "0048", "0049",
             "0050", "0051", "0052", "0065", "0066", "0075", "0076", "0078", "0088", "0092", "0099", "0091", "0103",
             "0104", "0105", "0106", "0107", "0151", "0145", "0147", "0139", "0129", "0083", "0153", "0157", "0180",
             "0175", "0181", "0196", "0170", "0166", "0172", "0177", "0167", "0169", "0191")
SDSD_TEST = {"indoor": ("pair11", "pair21", "pair1", "pair19", "pair4", "pair9"),
             "outdoor": ("MVI_0898", "MVI_0928", "MVI_0906", "MVI_0975", "MVI_1001", "MVI_0997", "MVI_1003",
                         "MVI_1026", "MVI_1030", "MVI_1032")}


def _tsv(path: Path, pairs: list[ExpectedPair]) -> None:
    path.write_text("".join(f"{p.low}\t{p.high}\t{p.split}\n" for p in pairs), newline="\n")


def build_smid(tmp_path: Path, *, frames: Mapping[str, int] = MappingProxyType({"0006": 3, "0013": 2, "0022": 2}),
               shape=(20, 26)) -> Tree:
    """`SMID/SMID_LQ_np/<scene>/<frame>.npy` and `SMID/SMID_Long_np/<scene>/0001.npy` (one target a scene), with
    `SMID/test_list.txt` (where Retinexformer's code opens it) listing the 49 test scenes; the default scenes hold
    a test one (0013) between train ones. `SMID_pairs.tsv` (beside SMID/) lists every pair with its split."""
    root = tmp_path / "SMID"
    files: dict[str, NpyFile] = {}
    pairs: list[ExpectedPair] = []
    n_inputs = sum(frames.values())
    for long_tag, scene in enumerate(sorted(frames), start=n_inputs):
        split = "test" if scene in SMID_TEST else "train"
        high = f"SMID_Long_np/{scene}/0001.npy"
        files[high] = NpyFile(high, long_tag, shape)
        for f in range(1, frames[scene] + 1):
            low = f"SMID_LQ_np/{scene}/{f:04d}.npy"
            files[low] = NpyFile(low, len(pairs), shape)
            pairs.append(ExpectedPair(low, high, split))
    for spec in files.values():
        _write_npy(root, spec)
    (root / "test_list.txt").write_text("".join(f"{s}\n" for s in SMID_TEST), newline="\n")
    _tsv(tmp_path / "SMID_pairs.tsv", pairs)
    return Tree("SMID", root, tuple(pairs), MappingProxyType(files),
                ("--pairs-file", str(tmp_path / "SMID_pairs.tsv")))


def build_sdsd(tmp_path: Path, part: str = "indoor", *, scenes=None, frames: int = 2, shape=(20, 26)) -> Tree:
    """`SDSD/<part>_static_np/{input,GT}/<scene>/<NNNN>.npy`, input and GT of equal names; default scenes: one test
    scene among train ones (indoor pair1, pair2, pair10: `pair1` sorts before `pair10` and is test, `pair10` is
    not). `SDSD_<part>_pairs.tsv` (beside SDSD/) lists every pair with its split; RAW is `<part>_static_np`."""
    if scenes is None:
        scenes = {"indoor": ("pair1", "pair2", "pair10"), "outdoor": ("MVI_0898", "MVI_0899", "MVI_1009")}[part]
    root = tmp_path / "SDSD" / f"{part}_static_np"
    files: dict[str, NpyFile] = {}
    pairs: list[ExpectedPair] = []
    for scene in scenes:
        split = "test" if scene.split("_2")[0] in SDSD_TEST[part] or scene in SDSD_TEST[part] else "train"
        for f in range(1, frames + 1):
            low, high = f"input/{scene}/{f:04d}.npy", f"GT/{scene}/{f:04d}.npy"
            files[low] = NpyFile(low, 2 * len(pairs), shape)
            files[high] = NpyFile(high, 2 * len(pairs) + 1, shape)
            pairs.append(ExpectedPair(low, high, split))
    for spec in files.values():
        _write_npy(root, spec)
    listing = tmp_path / f"SDSD_{part}_pairs.tsv"
    _tsv(listing, pairs)
    return Tree(f"SDSD-{part}", root, tuple(pairs), MappingProxyType(files), ("--pairs-file", str(listing)))


# ------------------------------------------------------------------ pytest fixtures (import them by name)


@pytest.fixture
def sid_tree(tmp_path) -> Tree:
    pytest.importorskip("tifffile")
    return build_sid(tmp_path)


@pytest.fixture
def eld_tree(tmp_path) -> Tree:
    pytest.importorskip("tifffile")
    return build_eld(tmp_path)


@pytest.fixture
def smid_tree(tmp_path) -> Tree:
    return build_smid(tmp_path)


@pytest.fixture(params=["indoor", "outdoor"])
def sdsd_tree(tmp_path, request) -> Tree:
    return build_sdsd(tmp_path, request.param)
