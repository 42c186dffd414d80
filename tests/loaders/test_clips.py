"""Clips of frames (`clips=T`) from a split packed with --sequences, through every loader kind: each clip's frames are
consecutive frames of one sequence with one window and one orientation on every frame of both sides, bit for bit
what an independent numpy reference cuts from the original files; every kind delivers the same clips; resuming on
another world size delivers every clip exactly once; the refusals name what is wrong."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest

from clipdata import make_video_raw, orient, pack_video, read_clip
from conftest import has_module
from pairload import make_loader
from pairload.errors import ConfigError

COUNTS = [7, 5, 9, 3]  # frames per sequence: the last is shorter than a clip of 4


@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("video")
    make_video_raw(root / "raw", COUNTS)
    return pack_video(root / "raw", root / "shards", shard_size=64 * 1024)  # about 4 frames a shard: they span shards


def _frame(raw: Path, key: str) -> np.ndarray:
    path = raw / "train" / "low" / (key.replace("+", "/") + ".png")
    return cv2.imread(str(path), cv2.IMREAD_UNCHANGED)[..., ::-1]


def _clips(loader) -> Counter:
    """Every clip of one epoch, (its frames' keys, its input's bytes), after the reference checks."""
    out = Counter()
    for batch in loader:
        assert batch.low.dim() == 5 and batch.low.shape[:2] == (len(batch), loader.cfg.frames)
        for i in range(len(batch)):
            low, high = batch.low[i].cpu().numpy(), batch.high[i].cpu().numpy()
            read_clip(low, high)
            out[tuple(batch.keys[i]), low.tobytes()] += 1
    return out


def test_every_clip_is_the_reference_cut_of_its_frames(video: Path):
    """The planner's window and code of each clip, cut by numpy from the PNG files, equal what `ram` delivers."""
    raw = video.parent / "raw"
    loader = make_loader("ram", video, batch_size=2, crop=(16, 24), clips="4,short=pad", seed=3)
    plans = loader.plan()
    batches = list(loader)
    assert len(batches) == len(plans) == (4 + 2 + 6 + 1) // 2
    for bp, batch in zip(plans, batches):
        t = bp.frames
        assert t == 4 and len(bp) == 4 * len(batch)
        for i in range(len(batch)):
            rows = slice(i * t, (i + 1) * t)
            assert len(set(bp.y[rows])) == len(set(bp.x[rows])) == len(set(bp.code[rows])) == 1
            y, x, code = int(bp.y[i * t]), int(bp.x[i * t]), int(bp.code[i * t])
            want = np.stack([orient(_frame(raw, k)[y:y + 16, x:x + 24], code) for k in batch.keys[i]])
            got = batch.low[i].numpy().transpose(0, 2, 3, 1)
            assert np.array_equal(got, want)
            assert np.array_equal(batch.high[i].numpy().transpose(0, 2, 3, 1), 255 - want)


KINDS = ["ram", "wds"] + (["dali-external"] if has_module("nvidia.dali") else [])


@pytest.mark.parametrize("workers", [0, 2])
def test_every_kind_delivers_the_same_clips(video: Path, workers: int):
    opts = dict(batch_size=3, crop=16, clips="4,short=pad", seed=5, last_batch="partial")
    want = _clips(make_loader("ram", video, **opts))
    assert sum(want.values()) == 4 + 2 + 6 + 1
    for kind in KINDS:
        assert _clips(make_loader(kind, video, num_workers=workers, **opts)) == want, kind


def test_grid_clips_and_short_sequences(video: Path):
    grid = make_loader("ram", video, batch_size=1, crop=16, clips="3,stride=2,start=grid", augment=False,
                       last_batch="partial", shuffle=False)
    keys = [tuple(b.keys[0]) for b in grid]
    # (7-3)//2+1 = 3, (5-3)//2+1 = 2, (9-3)//2+1 = 4 and 1 clips, starting on every second frame
    assert len(keys) == 3 + 2 + 4 + 1
    assert keys[:2] == [("scene00+0000", "scene00+0001", "scene00+0002"),
                        ("scene00+0002", "scene00+0003", "scene00+0004")]
    assert keys == [tuple(b.keys[0]) for b in grid]  # the grid is the same every epoch
    with pytest.raises(ConfigError, match="sequence 'scene03' has 3 frames, fewer than a clip's 4"):
        make_loader("ram", video, batch_size=1, crop=16, clips=4)
    with pytest.warns(UserWarning, match="left out .*scene03"):
        dropped = make_loader("ram", video, batch_size=1, crop=16, clips="4,short=drop", last_batch="partial")
    assert len(dropped) == 4 + 2 + 6
    padded = make_loader("ram", video, batch_size=1, crop=16, clips="4,short=pad", last_batch="partial",
                         shuffle=False, augment=False)
    last = [tuple(b.keys[0]) for b in padded][-1]
    assert last == ("scene03+0000", "scene03+0001", "scene03+0002", "scene03+0002")  # its last frame repeats


@pytest.mark.parametrize("kind", ["ram", "wds"])
def test_resume_on_another_world_size_delivers_every_clip_once(video: Path, kind: str):
    opts = dict(batch_size=2, crop=16, clips="3,short=pad", seed=7, last_batch="partial")
    if kind == "wds":
        opts["shuffle_buffer"] = 8
    whole = Counter()
    for r in range(2):
        for b in make_loader(kind, video, rank=r, world_size=2, **opts):
            whole.update(tuple(k) for k in b.keys)
    first = [make_loader(kind, video, rank=r, world_size=2, **opts) for r in range(2)]
    seen = Counter()
    for ld in first:
        it = iter(ld)
        for _ in range(2):
            seen.update(tuple(k) for k in next(it).keys)
    state = first[0].state_dict()
    assert state["clips"] == "3,stride=1,start=random,short=pad"
    for r in range(3):
        ld = make_loader(kind, video, rank=r, world_size=3, **opts)
        ld.load_state_dict(state)
        for b in ld:
            seen.update(tuple(k) for k in b.keys)
    assert seen == whole and sum(whole.values()) == 5 + 3 + 7 + 1
    other = make_loader(kind, video, **{**opts, "clips": "4,short=pad"})
    with pytest.raises(ConfigError, match="clips was"):
        other.load_state_dict(state)


def test_a_degradation_draws_one_parameter_set_per_clip(video: Path):
    ld = make_loader("ram", video, batch_size=2, crop=16, clips="3,short=pad", degrade="lowlight", seed=2)
    bp = ld.plan()[0]
    assert np.array_equal(bp.params[0::3], bp.params[1::3]) and np.array_equal(bp.params[0::3], bp.params[2::3])
    assert len(set(bp.noise.tolist())) == len(bp.noise)  # a noise stream per frame
    batch = next(iter(ld))
    assert batch.low.shape == batch.high.shape and all(v.shape == (2,) for v in batch.degradation.values())


def test_refusals(video: Path, packed: Path):
    with pytest.raises(ConfigError, match="has no sequences: clips=3 .*--sequences"):
        make_loader("ram", packed, batch_size=2, crop=16, clips=3)
    for spec, match in ((0.5, "clips frames=0.5"), ("3,start=middle", "clips start=middle"),
                        ("3,stride=0", "clips stride=0"), ({"frames": 3, "gap": 1}, "unknown field")):
        with pytest.raises(ConfigError, match=match):
            make_loader("ram", video, batch_size=2, crop=16, clips=spec)


@pytest.mark.dali
def test_paired_data_nodes_carry_clips(video: Path):
    """A user's own DALI pipeline on `paired_inputs`: its outputs come out N×T×…, each clip one window and flip."""
    from nvidia.dali import pipeline_def
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types

    from pairload.dali import PairedIterator, paired_inputs, paired_source

    src = paired_source(video, batch_size=2, crop=16, clips="3,short=pad", seed=4, last_batch="partial", num_workers=2)

    @pipeline_def(batch_size=2 * 3, num_threads=2, device_id=None, seed=1)
    def pipe():
        low, high = paired_inputs(src)
        return low, high, fn.cast(low, dtype=types.FLOAT)

    it = PairedIterator(pipe(), ("low", "high", "low_float"))
    seen = Counter()
    for out in it:
        n = len(out["keys"])
        assert out["low"].shape == (n, 3, 16, 16, 3) and out["padded"].shape == (n,)
        for i in range(n):
            read_clip(out["low"][i].numpy().transpose(0, 3, 1, 2), out["high"][i].numpy().transpose(0, 3, 1, 2))
            seen[tuple(out["keys"][i])] += 1
        assert np.array_equal(out["low_float"].numpy(), out["low"].numpy().astype(np.float32))
    it.close()
    assert sum(seen.values()) == 5 + 3 + 7 + 1


def test_mixed_sources_and_repeats(video: Path):
    """Two packs of sequences mixed by weight: each clip from one source, its frames keyed "source/…"; repeats give
    every clip unit a second draw (its own start, window and code)."""
    mixed = make_loader("ram", {"a": video, "b": video}, batch_size=2, crop=16, clips="3,short=pad",
                        weights={"a": 1, "b": 3}, epoch_size=16, seed=1)
    sources = Counter()
    for batch in mixed:
        assert len(batch.source) == len(batch)
        for name, keys, low, high in zip(batch.source, batch.keys, batch.low.numpy(), batch.high.numpy()):
            assert all(k.startswith(f"{name}/") for k in keys)
            read_clip(low, high)
            sources[name] += 1
    assert sources["b"] > sources["a"] > 0 and sum(sources.values()) == 16
    once = make_loader("ram", video, batch_size=2, crop=16, clips="3,short=pad", seed=1, last_batch="partial")
    twice = make_loader("ram", video, batch_size=2, crop=16, clips="3,short=pad", seed=1, last_batch="partial",
                        repeats=2)
    assert len(twice) == 2 * len(once) == 16
    assert sum(len(b) for b in twice) == 2 * (5 + 3 + 7 + 1)


GRAMMAR = r"expected T\[,stride=S\]\[,start=random\|grid\]\[,short=refuse\|drop\|pad\], e\.g\. clips='5'"


@pytest.mark.parametrize("spec, problem", [
    ("stride=2", "no frame count"),
    ("5,stride=2,stride=3", "stride is given twice"),
    ("5,frames=6", "frames is given twice"),
    ("5,gap=1", "unknown option 'gap'"),
    ("5,Stride=2", "unknown option 'Stride'"),
    ("", "empty"),
    ("   ", "empty"),
    ("5,,stride=2", "an empty item between commas"),
    ("5,", "an empty item between commas"),
    ("5,2", "'2' is not name=value"),
])
def test_a_clip_spec_that_does_not_parse_names_clips_the_value_and_the_grammar(spec, problem):
    from pairload.plan.clips import Clips

    with pytest.raises(ConfigError, match=rf"^clips '{spec}': {problem}.*; {GRAMMAR}"):
        Clips.of(spec)


@pytest.mark.parametrize("spec, match", [
    ("0", "clips frames=0: expected a whole number, at least 1 and at most 65536"),
    ("-2", "clips frames=-2: expected a whole number"),
    ("99999999999999999999", "clips frames=99999999999999999999: expected a whole number, at least 1 and at most "
                             "65536"),
    ({"frames": 2 ** 62, "short": "pad"}, "clips frames=4611686018427387904: expected"),
    ("3,start=grid,stride=99999999999999999999", "clips stride=99999999999999999999: expected"),
    ("5.0", "clips frames=5.0: expected"), ("5,stride=0", "clips stride=0: expected"),
    ("5,stride=-1", "clips stride=-1: expected"), ("5,stride=1.5", "clips stride=1.5: expected"),
    ("5,start=Grid", "clips start=Grid: expected one of random, grid"), ("5,short=", "clips short=: expected one of"),
    ({"stride": 2}, r"clips \{'stride': 2\}: no frame count; expected the fields frames, stride, start, short"),
    ([5], r"clips frames=\[5\]: expected a whole number"),
])
def test_clip_values_are_refused_by_name(spec, match):
    from pairload.plan.clips import Clips

    with pytest.raises(ConfigError, match=f"^{match}"):
        Clips.of(spec)


def test_spaces_around_items_are_ignored_and_every_option_spelled_once_reads():
    from pairload.plan.clips import Clips

    assert Clips.of(" 5 , stride = 2 ,start=grid, short=pad ") == Clips(5, 2, "grid", "pad")
    assert Clips.of("frames=4") == Clips(4) and Clips.of(0) is None and Clips.of(None) is None


def test_a_clip_spec_without_frames_is_one_line_on_the_command_line(tmp_path, capsys):
    from pairload.cli import main

    assert main(["preview", str(tmp_path), "--clips", "stride=2", "--out", str(tmp_path / "g.png")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --clips stride=2: clips 'stride=2': no frame count (T, the first item); expected T")
    assert err.count("\n") == 1 and "Traceback" not in err
