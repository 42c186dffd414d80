"""`pairload preview`: the tiles of a sheet are the stored pixels (through the stated display transform; of a
targets-only split, its targets alone) or the loader's crops of the same seed (the same window and orientation on
input and target); errors are one line; `info --sizes` counts every size of the pack."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import make_raw
from pairload import make_loader, open_shards
from pairload.cli import main
from pairload.dihedral import orient
from pairload.errors import ConfigError
from pairload.format.members import Member, Members
from pairload.pack.writer import PackOptions, pack
from pairload.preview import PreviewOptions, preview
from test_degrade import targets  # noqa: F401 - shared fixture: a targets-only pack of `raw`'s train targets
from typed_split import write_typed_split


def read_png(path: Path) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    assert image is not None and image.dtype == np.uint8
    return image[..., ::-1]


def test_the_cli_sheet_shows_the_stored_pixels_of_seeded_pairs(packed, tmp_path, capsys):
    out = tmp_path / "grid.png"
    assert main(["preview", str(packed), "-n", "5", "--seed", "3", "--tile-height", "0", "--out", str(out)]) == 0
    assert f"wrote {out}: 5 pairs of split train" in capsys.readouterr().out
    picture = read_png(out)
    sheet = preview(packed, PreviewOptions(n=5, seed=3, tile_height=0))
    np.testing.assert_array_equal(picture, sheet.image)  # the PNG is the sheet the library lays out
    assert "input shown: uint8 as stored" in sheet.header and "target shown: uint8 as stored" in sheet.header
    ds = open_shards(packed)
    keys = [t.key for t in sheet.tiles[::2]]
    assert sheet.labels == tuple((key, "56x40", "train/low | train/high") for key in keys)
    assert len(set(keys)) == 5 and keys == sorted(keys)  # distinct pairs, in index order
    assert keys != list(ds.keys[:5]) or len(ds) == 5  # chosen at random, not the first five
    for t in sheet.tiles:
        low, high = ds.arrays(list(ds.keys).index(t.key))
        np.testing.assert_array_equal(t.region(picture), low if t.side == "input" else high)
    # scaled tiles: a 40-row image at 80 rows is each pixel repeated (nearest), as the sheet states
    sheet = preview(packed, PreviewOptions(n=2, seed=3, tile_height=80))
    assert any("nearest neighbour when enlarging" in line for line in sheet.header)
    low, high = ds.arrays(list(ds.keys).index(sheet.tiles[0].key))
    np.testing.assert_array_equal(sheet.tile(0, "input"), low.repeat(2, axis=0).repeat(2, axis=1))
    np.testing.assert_array_equal(sheet.tile(0, "target"), high.repeat(2, axis=0).repeat(2, axis=1))


def test_a_batch_sheet_shows_the_loaders_crops_of_the_same_seed(packed):
    crop = (16, 24)
    sheet = preview(packed, PreviewOptions(batch=True, n=6, crop=crop, seed=7, tile_height=0))
    with make_loader("ram", packed, batch_size=6, crop=crop, seed=7) as loader:
        plan = loader.plan()[0]
        batch = next(iter(loader))
    ds = open_shards(packed)
    assert [t.key for t in sheet.tiles[::2]] == batch.keys
    codes = set()
    for k, key in enumerate(batch.keys):
        low, high = sheet.tile(k, "input"), sheet.tile(k, "target")
        np.testing.assert_array_equal(low, batch.low[k].permute(1, 2, 0).numpy())
        np.testing.assert_array_equal(high, batch.high[k].permute(1, 2, 0).numpy())
        stored = ds.arrays(int(plan.index[k]))[0]
        y, x, code = int(plan.y[k]), int(plan.x[k]), int(plan.code[k])
        np.testing.assert_array_equal(low, orient(stored[y:y + crop[0], x:x + crop[1]], code))
        np.testing.assert_array_equal(high, 255 - low)  # the target cut and oriented as its input
        assert (low[..., 0] == int(key)).all()
        orientation = "+".join(n for bit, n in ((4, "t"), (2, "v"), (1, "h")) if code & bit) or "as stored"
        assert sheet.labels[k] == (key, f"window at x {x}, y {y} of 56x40", f"orientation {orientation}",
                                   "train/low | train/high")
        codes.add(code)
    assert len(codes) > 1  # the batch is augmented: the sheet shows flips


def test_the_cli_crop_is_width_by_height_and_implies_the_batch(packed, tmp_path):
    out = tmp_path / "batch.png"
    assert main(["preview", str(packed), "--crop", "24x16", "-n", "3", "--tile-height", "0", "--out", str(out)]) == 0
    sheet = preview(packed, PreviewOptions(batch=True, n=3, crop=(16, 24), tile_height=0))
    np.testing.assert_array_equal(read_png(out), sheet.image)
    assert {t.region(sheet.image).shape for t in sheet.tiles} == {(16, 24, 3)}


def test_degraded_pairs_are_shown_with_the_parameters_they_drew(packed, tmp_path, capsys):
    out = tmp_path / "degraded.png"
    assert main(["preview", str(packed), "--degrade", "lowlight,gamma=2..3", "-n", "4", "--crop", "16", "--seed", "2",
                 "--tile-height", "0", "--out", str(out)]) == 0
    assert (f"wrote {out}: 4 pairs of split train as the loader cut them, inputs degraded from the targets "
            "(lowlight,gamma=2..3)") in capsys.readouterr().out
    sheet = preview(packed, PreviewOptions(n=4, crop=16, seed=2, tile_height=0, degrade="lowlight, gamma=2..3"))
    np.testing.assert_array_equal(read_png(out), sheet.image)
    assert any("degrade='lowlight,gamma=2..3'" in line for line in sheet.header)
    with make_loader("ram", packed, batch_size=4, crop=16, seed=2, degrade="lowlight,gamma=2..3") as loader:
        batch = next(iter(loader))
    assert [t.key for t in sheet.tiles[::2]] == batch.keys
    for k, labels in enumerate(sheet.labels):
        p = {name: float(v[k]) for name, v in batch.degradation.items()}
        assert labels[4:] == (f"alpha={p['alpha']:.3g} beta={p['beta']:.3g} gamma={p['gamma']:.3g}",
                              f"gain_r={p['gain_r']:.3g} gain_b={p['gain_b']:.3g} shot={p['shot']:.3g}",
                              f"read={p['read']:.3g}")
        assert 2 <= p["gamma"] <= 3
        np.testing.assert_array_equal(sheet.tile(k, "input"), batch.low[k].permute(1, 2, 0).numpy())
        assert not np.array_equal(sheet.tile(k, "input"), 255 - sheet.tile(k, "target"))  # not the stored input
    assert main(["preview", str(packed), "--degrade", "lowlight,gama=2", "--out", str(out)]) == 1
    assert capsys.readouterr().err.strip() == ("error: --degrade lowlight,gama=2: degradation 'lowlight': no "
                                               "parameter 'gama'; its parameters are alpha, beta, gamma, gain_r, "
                                               "gain_b, shot, e.g. lowlight,alpha=0.9..1")


def test_16_bit_and_packed_bayer_splits_are_shown_through_the_stated_transforms(tmp_path):
    members = Members(low=Member("uint16", 4), high=Member("uint16", 3), scale=2)
    arrays = write_typed_split(tmp_path / "typed", members, [(6, 10), (8, 6), (6, 10)], per_shard=2)
    sheet = preview(tmp_path / "typed", PreviewOptions(n=3, tile_height=0))
    assert any("uint16 v x 255/65535 (the type's range), no gamma" in line for line in sheet.header)
    assert any("packed Bayer R,G,B,G planes as RGB" in line and "gamma 1/2.2" in line for line in sheet.header)
    for k, t in enumerate(sheet.tiles[::2]):
        low, high = arrays[t.key]
        want = (high.astype(np.uint32) * 255 + 32767) // 65535  # rounding v * 255/65535 in integers
        np.testing.assert_array_equal(sheet.tile(k, "target"), want)
        planes = low / 65535.0
        rgb = np.stack([planes[..., 0], (planes[..., 1] + planes[..., 3]) / 2, planes[..., 2]], axis=-1)
        np.testing.assert_array_equal(sheet.tile(k, "input"), np.rint(255 * rgb ** (1 / 2.2)).astype(np.uint8))
        assert sheet.tile(k, "input").shape[:2] == low.shape[:2]  # at the planes' size: half the target's


def test_camera_raw_inputs_are_shown_by_their_levels_and_ratio(tmp_path):
    pytest.importorskip("rawpy")
    pytest.importorskip("tifffile")
    from test_pack_camera import sid_tree

    sid_tree(tmp_path / "SID", scenes=[1])
    pack(tmp_path / "SID" / "Sony", tmp_path / "out", PackOptions(workers=1, raw_target="packed"))
    ds = open_shards(tmp_path / "out")
    sheet = preview(tmp_path / "out", PreviewOptions(n=4, tile_height=0))
    assert any("(v - black)/(white - black) with the recorded levels x the pair's ratio" in line
               for line in sheet.header)
    for k, t in enumerate(sheet.tiles[::2]):
        i = list(ds.keys).index(t.key)
        low, high = ds.arrays(i)
        for side, pixels, levels, ratio in (("input", low, ds.sensor.levels[i], float(ds.sensor.ratio[i])),
                                            ("target", high, ds.sensor.levels_high[i], 1.0)):
            planes = (pixels - levels[:4]) / (levels[4] - levels[:4])
            rgb = np.stack([planes[..., 0], (planes[..., 1] + planes[..., 3]) / 2, planes[..., 2]], axis=-1)
            want = np.rint(255 * np.clip(rgb * ratio, 0, 1) ** (1 / 2.2)).astype(np.uint8)
            np.testing.assert_array_equal(sheet.tile(k, side), want)


def test_a_url_is_previewed_through_the_cache_as_the_local_folder_is(packed, tmp_path):
    from pairload.bench.httpserver import StaticServer

    with StaticServer(packed) as srv:
        for batch in (False, True):
            out = tmp_path / f"{batch}.png"
            argv = ["preview", srv.url, "-n", "3", "--cache-dir", str(tmp_path / "c"), "--out", str(out)]
            assert main(argv + (["--crop", "16"] if batch else [])) == 0
            local = preview(packed, PreviewOptions(n=3, batch=batch, crop=16))
            tiles = [(t.key, t.side, t.top, t.left, t.height, t.width) for t in local.tiles]
            remote = preview(srv.url, PreviewOptions(n=3, batch=batch, crop=16), cache_dir=tmp_path / "c")
            assert [(t.key, t.side, t.top, t.left, t.height, t.width) for t in remote.tiles] == tiles
            picture = read_png(out)
            for t in local.tiles:  # the pixels are the same; the header names the URL instead of the folder
                np.testing.assert_array_equal(t.region(picture), t.region(local.image))
            assert remote.header[0].startswith(srv.url) and remote.labels == local.labels  # folders via the cache
            assert local.labels[0][-1] == "train/low | train/high"


def test_a_clip_sheet_shows_each_clip_as_its_input_frames_over_its_target_frames(tmp_path, capsys):
    from clipdata import make_video_raw, pack_video, read_clip
    from pairload.preview.render import GAP

    video = pack_video(make_video_raw(tmp_path / "raw", [5, 4], size=(24, 32)), tmp_path / "shards")
    out = tmp_path / "clips.png"
    assert main(["preview", str(video), "--clips", "3", "-n", "2", "--crop", "16", "--seed", "1", "--tile-height",
                 "0", "--out", str(out)]) == 0
    assert f"wrote {out}: 2 clips of 3 frames of split train as the loader cut them" in capsys.readouterr().out
    sheet = preview(video, PreviewOptions(clips=3, n=2, crop=16, seed=1, tile_height=0))
    np.testing.assert_array_equal(read_png(out), sheet.image)
    with make_loader("ram", video, batch_size=2, crop=16, seed=1, clips=3, last_batch="partial") as loader:
        batch = next(iter(loader))
    assert len(sheet.tiles) == 2 * 2 * 3 and sheet.count() == "2 clips of 3 frames"
    for k in range(2):
        tiles = [t for t in sheet.tiles if t.pair == k]
        assert [t.key for t in tiles] == batch.keys[k] * 2 and [t.frame for t in tiles] == [0, 1, 2] * 2
        inputs, highs = tiles[:3], tiles[3:]
        assert {t.side for t in inputs} == {"input"} and {t.side for t in highs} == {"target"}
        # a row of input frames over a row of target frames, in frame order
        assert [t.left for t in inputs] == [t.left for t in highs] == [inputs[0].left + f * (16 + GAP)
                                                                       for f in range(3)]
        assert {t.top for t in inputs} == {inputs[0].top} and {t.top for t in highs} == {inputs[0].top + 16 + GAP}
        low = np.stack([t.region(sheet.image) for t in inputs])
        high = np.stack([t.region(sheet.image) for t in highs])
        np.testing.assert_array_equal(low, batch.low[k].permute(0, 2, 3, 1).numpy())
        np.testing.assert_array_equal(high, batch.high[k].permute(0, 2, 3, 1).numpy())
        seq, first, *_ = read_clip(low.transpose(0, 3, 1, 2), high.transpose(0, 3, 1, 2))
        assert sheet.labels[k][:2] == (f"scene{seq:02d}: frames {first} {first + 1} {first + 2} of {[5, 4][seq]}",
                                       " ".join(batch.keys[k]))
    assert any("2 clips of 3 frames" not in line and "5 clips of 2 sequences (9 frames)" in line
               for line in sheet.header)
    # -n beyond the split's clips: all of them, in the one batch
    assert preview(video, PreviewOptions(clips=3, n=9, crop=16, tile_height=0)).count() == "5 clips of 3 frames"


def test_a_targets_only_split_is_shown_as_its_targets_alone(targets, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "targets.png"
    assert main(["preview", str(targets), "-n", "3", "--tile-height", "0", "--out", str(out)]) == 0
    assert f"wrote {out}: 3 targets of split train" in capsys.readouterr().out
    sheet = preview(targets, PreviewOptions(n=3, tile_height=0))
    np.testing.assert_array_equal(read_png(out), sheet.image)
    ds = open_shards(targets)
    assert [t.side for t in sheet.tiles] == ["target"] * 3 and sheet.count() == "3 targets"
    for t in sheet.tiles:  # each tile is the stored target (the fixture's 255 - (i, y, x))
        np.testing.assert_array_equal(t.region(sheet.image), ds.arrays(list(ds.keys).index(t.key))[1])
        assert (t.region(sheet.image)[..., 0] == 255 - int(t.key)).all()
    assert sheet.labels == tuple((t.key, "56x40", ".") for t in sheet.tiles)  # one folder: the photos'
    assert "3 of 8 targets chosen at random (seed 0), in index order; the split holds targets only" in sheet.header[0]
    assert sheet.header[1] == ("to see inputs degraded from these targets, add --degrade lowlight (PreviewOptions("
                               "degrade='lowlight'); the models that take them: lowlight, unprocess; "
                               "docs/degrade.md)")
    assert not any(line.startswith("input shown") for line in sheet.header)
    # with a degradation: degraded input | target, as the loader delivers them
    degraded = preview(targets, PreviewOptions(n=2, crop=16, tile_height=0, degrade="lowlight"))
    assert [t.side for t in degraded.tiles] == ["input", "target"] * 2
    assert any("degrade='lowlight' (the split holds targets only)" in line for line in degraded.header)
    assert not np.array_equal(degraded.tile(0, "input"), degraded.tile(0, "target"))
    # a loader's batch without one has no inputs to show
    assert main(["preview", str(targets), "--crop", "16", "--out", str(out)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: {targets}: split 'train' holds targets only (packed with --targets-only), and a loader's batch needs "
        "inputs degraded from them; add --degrade lowlight, or leave --batch, --crop and --clips out to see the "
        "stored targets")


@pytest.mark.parametrize("args, message", [
    (["-n", "0"], "error: -n 0: expected at least 1 pair to show"),
    (["--split", "val"], "error: {shards}/manifest.json: no split 'val'; this folder has ['test', 'train']"),
    (["--crop", "41"], "error: crop 41 is larger than sample"),
    (["--display", "log"], "error: --display log: expected range or stretch"),
    (["--out", "{tmp}/grid.jpg"], "error: --out {tmp}/grid.jpg: expected a file name ending in .png"),
    (["--clips", "3,start=middle"], "error: --clips 3,start=middle: clips start=middle: expected one of random, grid"),
    (["--clips", "3"], "error: split 'train' has no sequences: clips=3 takes frames of videos or bursts"),
    (["--degrade", "lowlight,gamma=2,gamma=3"], "error: --degrade lowlight,gamma=2,gamma=3: degradation 'lowlight': "
                                                "gamma is given twice (gamma=2, then gamma=3); give it once, as one "
                                                "value or one range, e.g. lowlight,gamma=1.5..5"),
    (["--seed", "-1"], "error: --seed -1: expected a whole number, 0 or more"),  # was a crash in numpy
    (["--crop", "0"], "error: --crop 0: expected N (square) or WxH of at least 1 pixel, or 'whole'"),
    (["--crop", "16x0"], "error: --crop 16x0: expected N (square) or WxH of at least 1 pixel, or 'whole'"),
])
def test_bad_options_exit_1_with_one_line(packed, tmp_path, capsys, args, message):
    args = [a.format(tmp=tmp_path) for a in args]
    argv = ["preview", str(packed), *args] + ([] if "--out" in args else ["--out", str(tmp_path / "g.png")])
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message.format(shards=packed, tmp=tmp_path))
    assert not list(tmp_path.glob("*.png")) and not list(tmp_path.glob(".*partial"))


@pytest.mark.parametrize("index", ["binary", "json"])
def test_info_sizes_counts_every_size_of_the_pack(tmp_path, capsys, index):
    sizes = [(40, 56), (32, 48), (40, 56), (64, 30), (40, 56), (32, 48)]
    make_raw(tmp_path / "raw", len(sizes), split="train", sizes=sizes)
    make_raw(tmp_path / "raw", 2, split="test", start=100, size=(24, 24))
    pack(tmp_path / "raw", tmp_path / "s", PackOptions(workers=1, index=index))
    assert main(["info", str(tmp_path / "s"), "--sizes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    seen: dict[str, Counter] = {}
    for line in lines:
        if not line.startswith(" "):
            split = line.split(":")[0]
            seen[split] = Counter()
            continue
        size, *_, count = line.split()
        seen[split][size] = int(count)
    assert seen == {"train": Counter({f"{w}x{h}": c for (h, w), c in Counter(sizes).items()}),
                    "test": Counter({"24x24": 2})}
    assert "train: 6 pairs, 3 sizes (WxH of the inputs: pairs)" in lines
    assert lines.index("  56x40  " + "#" * 40 + "  3") == lines.index("train: 6 pairs, 3 sizes (WxH of the inputs: "
                                                                          "pairs)") + 1  # most pairs first


@pytest.mark.parametrize("options, message", [
    ({"seed": 1.5}, r"^seed=1\.5: expected a whole number, 0 or more$"),
    ({"seed": True}, r"^seed=True: expected a whole number, 0 or more$"),
    ({"columns": True}, r"^columns=True: expected 0 \(about square\) or pairs per row$"),
    ({"crop": (0, 16), "batch": True}, r"^crop=\(0, 16\): expected a positive \(height, width\) in pixels$"),
    ({"degrade": 5}, r"^degrade=5: expected a model name such as 'lowlight'"),  # the value said once
])
def test_bad_preview_options_are_refused_in_api_terms(options, message):
    with pytest.raises(ConfigError, match=message):
        PreviewOptions(**options)
