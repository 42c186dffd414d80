"""Degraded inputs on the CPU: each model's output has the statistics its model says, a sample's degraded bytes
depend on nothing but (seed, epoch, key) whatever loader, batch, rank, worker count or resume delivers it, raw windows
keep their CFA sites, and bad options are refused by name."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pairload import ConfigError, make_loader
from pairload.degrade import Degradation
from pairload.degrade.models import models
from degrade_cases import RAW_LEVELS, keys, levels


def _decode(v: np.ndarray, full: float) -> np.ndarray:
    s = v.astype(np.float64) / full
    return np.where(s <= 0.04045, s / 12.92, ((s + 0.055) / 1.055) ** 2.4)


def _flat(values, h: int, w: int, c: int, dtype) -> np.ndarray:
    return np.stack([np.full((h, w, c), v, dtype=dtype) for v in values])


def test_lowlight_noise_variance_is_shot_times_signal_plus_read():
    shot, read = 0.004, 4e-4
    levels_ = np.array([0.05, 0.1, 0.2, 0.3, 0.4, 0.5])
    stored = np.round(65535 * np.where(levels_ <= 0.0031308, levels_ * 12.92, 1.055 * levels_ ** (1 / 2.4) - 0.055))
    high = _flat(stored, 128, 128, 3, np.uint16)
    n = len(high)
    table = np.tile(np.array([1, 1, 1, 1, 1, shot, read], dtype=np.float32), (n, 1))
    low = models()["lowlight"].numpy(high, table, keys(n), np.zeros(n, dtype=np.int64))
    lin = _decode(low, 65535.0)
    signal = _decode(stored, 65535.0)
    for c in range(3):
        var = lin[..., c].reshape(n, -1).var(axis=1)
        slope, intercept = np.polyfit(signal, var, 1)
        assert slope == pytest.approx(shot, rel=0.04), (c, slope)
        assert intercept == pytest.approx(read, rel=0.1), (c, intercept)
        assert np.allclose(lin[..., c].reshape(n, -1).mean(axis=1), signal, atol=0.002)


def test_lowlight_darkens_each_sample_by_its_drawn_law(packed):
    loader = make_loader("ram", packed, batch_size=4, crop=32, degrade="lowlight,shot=1e-9")
    for batch in loader:
        d = {k: v.numpy().astype(np.float64) for k, v in batch.degradation.items()}
        assert ((0.9 <= d["alpha"]) & (d["alpha"] <= 1) & (0.5 <= d["beta"]) & (d["beta"] <= 1)).all()
        assert ((1.5 <= d["gamma"]) & (d["gamma"] <= 5)).all()
        lin = _decode(batch.high.permute(0, 2, 3, 1).numpy(), 255.0)
        a, b, g = (d[k][:, None, None, None] for k in ("alpha", "beta", "gamma"))
        want = b * (a * lin) ** g
        got = _decode(batch.low.permute(0, 2, 3, 1).numpy(), 255.0)
        assert np.abs(got - want).max() < 0.004  # one 8-bit step of sRGB near black is about 0.0003 in linear light


def _tukey_variance(lam: float) -> float:
    return 2 / lam ** 2 * (1 / (1 + 2 * lam) - math.exp(2 * math.lgamma(lam + 1) - math.lgamma(2 * lam + 2)))


def test_raw_physics_mean_and_variance_follow_poisson_gain_and_tukey_read_noise():
    black, white = RAW_LEVELS
    ratio, k, read, lam = 20.0, 2.0, 3.0, 0.1
    above = np.array([0.0, 40.0, 200.0, 800.0, 3000.0, 9000.0])  # 0 to 225 electrons: inversion and the normal
    high = _flat(black + above, 96, 96, 4, np.uint16)
    n = len(high)
    table = np.tile(np.array([ratio, k, read, 0.0, lam, 0, 0, 0, 0], dtype=np.float32), (n, 1))
    low = models()["raw-physics"].numpy(high, table, keys(n), np.zeros(n, dtype=np.int64), levels(n))
    x = low.astype(np.float64).reshape(n, -1, 4) - black
    signal = above / ratio
    var_read = read ** 2 * _tukey_variance(lam) + 1 / 12  # the ADC's rounding
    want = k * signal + var_read
    for c in range(4):
        assert np.all(np.abs(x[:, :, c].mean(axis=1) - signal) < 4 * np.sqrt(want / x.shape[1])), c
        assert np.allclose(x[:, :, c].var(axis=1), want, rtol=0.06), (c, x[:, :, c].var(axis=1))


def test_raw_row_noise_is_shared_by_the_two_channels_of_a_sensor_row():
    black, _ = RAW_LEVELS
    n = 4
    high = _flat([black + 100.0] * n, 64, 64, 4, np.uint16)
    table = np.tile(np.array([10.0, 1.0, 0.5, 6.0, 0.14, 0, 0, 0, 0], dtype=np.float32), (n, 1))
    low = models()["raw-physics"].numpy(high, table, keys(n), np.zeros(n, dtype=np.int64), levels(n))
    rows = low.astype(np.float64).mean(axis=2)  # (n, rows, 4): each packed row's mean per channel
    for s in range(n):
        corr = np.corrcoef(rows[s].T)
        assert corr[0, 1] > 0.9 and corr[2, 3] > 0.9  # R and its row's G; B and its row's G
        assert abs(corr[0, 2]) < 0.4 and abs(corr[1, 3]) < 0.4  # the two sensor rows of a packed row differ
        assert rows[s].std(axis=0).min() > 4  # the row offsets are there (σ 6)


def test_raw_windows_keep_their_cfa_sites():
    black, _ = RAW_LEVELS
    n = 8
    sites = black + 1000.0 * np.arange(1, 5)  # channel c (R, G, B, G) holds black + 1000·(c+1)
    high = np.broadcast_to(sites, (n, 32, 32, 4)).astype(np.uint16).copy()
    table = np.tile(np.array([10.0, 0.5, 1.0, 0.0, 0.14, 0, 0, 0, 0], dtype=np.float32), (n, 1))
    spec = Degradation("raw-physics")
    codes = np.array(spec.codes)[np.arange(n) % len(spec.codes)]
    low = models()["raw-physics"].numpy(high, table, keys(n), codes, levels(n))
    means = low.astype(np.float64).mean(axis=(1, 2)) - black
    assert np.allclose(means, 100.0 * np.arange(1, 5), atol=1.0)
    assert set(spec.codes) == {0, 1, 2, 3}  # no transpose: row noise stays along rows


def test_raw_physics_plans_no_transposes(packed):
    from pairload.plan import PlanConfig, plan_epoch

    cfg = PlanConfig(batch_size=4, crop=16, degrade="raw-physics")
    hw = np.full((64, 2), 64)
    codes = np.concatenate([bp.code for bp in plan_epoch(cfg, np.arange(64, dtype=np.uint64), hw, 0)])
    assert set(codes.tolist()) <= {0, 1, 2, 3} and len(set(codes.tolist())) == 4


def _inputs(loader, epochs=(0,)) -> dict:
    got = {}
    for e in epochs:
        loader.set_epoch(e)
        for batch in loader:
            for key, low in zip(batch.keys, batch.low):
                got[(e, key)] = low.clone()
    loader.close()
    return got


def _same(ref: dict, got: dict) -> None:
    assert got and all(torch.equal(ref[k], v) for k, v in got.items())


@pytest.mark.parametrize("model", ["lowlight", "unprocess"])
def test_a_samples_input_depends_on_its_key_alone(packed, model):
    common = dict(crop=24, degrade=model, last_batch="partial")
    ref = _inputs(make_loader("ram", packed, batch_size=4, **common), (0, 1))
    assert len(ref) == 16 and len({v.sum().item() for v in ref.values()}) > 8
    _same(ref, _inputs(make_loader("ram", packed, batch_size=3, **common), (0, 1)))
    _same(ref, _inputs(make_loader("wds", packed, batch_size=2, **common), (0, 1)))
    workers = make_loader("ram", packed, batch_size=2, num_workers=2, **common)
    assert workers.cutter.degrades  # on a CPU device the worker processes make the inputs
    _same(ref, _inputs(workers, (1,)))
    ranks = {}
    for r in range(3):
        ranks.update(_inputs(make_loader("ram", packed, batch_size=1, rank=r, world_size=3, **common), (1,)))
    _same(ref, ranks)


def test_resume_mid_epoch_and_on_another_world_size_degrades_alike(packed):
    common = dict(crop=24, degrade="lowlight", batch_size=2)
    ref = _inputs(make_loader("ram", packed, **common))
    first = make_loader("ram", packed, **common)
    it = iter(first)
    next(it)
    state = first.state_dict()
    first.close()
    again = make_loader("ram", packed, **common)
    again.load_state_dict(state)
    _same(ref, _inputs(again))
    elastic = {}
    for r in range(2):
        other = make_loader("ram", packed, rank=r, world_size=2, **common)
        other.load_state_dict(state)
        elastic.update(_inputs(other))
    assert len(elastic) >= 4
    _same(ref, elastic)


def test_a_loader_state_is_bound_to_its_degradation(packed):
    state = make_loader("ram", packed, batch_size=2, crop=24, degrade="lowlight").state_dict()
    other = make_loader("ram", packed, batch_size=2, crop=24, degrade="lowlight,gamma=2..3")
    with pytest.raises(ConfigError, match="degrade was .*lowlight"):
        other.load_state_dict(state)


@pytest.mark.parametrize("spec,match", [
    ("lowlight,gamma=0..50", r"gamma=0\.\.50: outside gamma's bounds; expected a range low <= high within "
                             r"\[0\.1, 20\]"),
    ("lowlight,gama=2", "no parameter 'gama'; its parameters are alpha, beta, gamma"),
    ("lowlight,gamma", "option 'gamma' has no '='; expected name=value"),
    ("darkness", "degradation 'darkness': expected one of lowlight, unprocess, raw-physics"),
    ("lowlight,profile=SonyA7S2", "profile='SonyA7S2' is raw-physics' option"),
    ("raw-physics,profile=NoSuchCamera", "NoSuchCamera"),
    ({"gamma": 2}, 'expected a "model" key'),
])
def test_bad_degradations_are_refused_by_name(spec, match):
    with pytest.raises(ConfigError, match=match):
        Degradation.of(spec)


def test_a_model_refuses_targets_it_cannot_take(packed):
    with pytest.raises(ConfigError, match="degradation 'raw-physics' cannot make inputs from this split: it takes "
                                          "camera raw targets kept as packed Bayer mosaics"):
        make_loader("ram", packed, batch_size=2, crop=24, degrade="raw-physics")


def test_degrade_sources_must_name_mixed_sources(packed):
    with pytest.raises(ConfigError, match="degrade_sources names made, and the sources are one unnamed folder"):
        make_loader("ram", packed, batch_size=2, crop=24, degrade="lowlight", degrade_sources=("made",))
    with pytest.raises(ConfigError, match="there is no degradation to apply"):
        make_loader("ram", packed, batch_size=2, crop=24, degrade_sources=("made",))


def test_mixing_degrades_only_the_named_source(packed):
    loader = make_loader("ram", {"real": packed, "made": packed}, batch_size=4, crop=24, degrade="lowlight",
                         degrade_sources=("made",))
    seen = set()
    for batch in loader:
        for src, a, low, high in zip(batch.source, batch.degradation["alpha"], batch.low, batch.high):
            seen.add(src)
            stored = torch.equal(low, 255 - high)  # the fixture's stored input is 255 - its target
            assert (src == "real") == stored and (src == "made") == bool(torch.isfinite(a))
    assert seen == {"real", "made"}


@pytest.fixture
def targets(raw, tmp_path):
    """A targets-only pack of the fixture's 8 training targets."""
    from pairload.pack.writer import PackOptions, pack

    pack(raw / "train" / "high", tmp_path / "targets", PackOptions(workers=1, targets_only=True))
    return tmp_path / "targets"


def test_a_targets_only_pack_trains_with_a_degradation_and_not_without(targets, packed):
    with pytest.raises(ConfigError, match="split 'train' holds targets only .* degrade='lowlight'"):
        make_loader("ram", targets, batch_size=4, crop=24)
    got = _inputs(make_loader("ram", targets, batch_size=4, crop=24, degrade="lowlight"))
    # the same targets through a pair pack read as targets only: the same degraded inputs, key for key
    ref = _inputs(make_loader("wds", packed, batch_size=4, crop=24, degrade="lowlight"))
    assert len(got) == 8 and {k for _, k in got} == {k for _, k in ref}
    assert all(torch.equal(got[k], ref[k]) for k in got)


def test_stored_pairs_mix_with_degraded_ones_by_weight(targets, packed):
    with pytest.raises(ConfigError, match="source 'made' holds targets only .*degrade_sources=\\('made',\\)"):
        make_loader("ram", {"real": packed, "made": targets}, batch_size=4, crop=24, degrade="lowlight",
                    degrade_sources=("real",))
    loader = make_loader("ram", {"real": packed, "made": targets}, batch_size=4, crop=24, degrade="lowlight",
                         degrade_sources=("made",), weights={"real": 1, "made": 3}, epoch_size=16)
    count = {"real": 0, "made": 0}
    for batch in loader:
        for src, low, high in zip(batch.source, batch.low, batch.high):
            count[src] += 1
            assert torch.equal(low, 255 - high) == (src == "real")
    assert count == {"real": 4, "made": 12}


def test_raw_physics_through_a_loader_from_real_dng_long_exposures(tmp_path):
    pytest.importorskip("rawpy")
    pytest.importorskip("tifffile")
    from dng import write_dng
    from test_camera import BLACKS, WHITE, coded_mosaic

    from pairload import RawNormalize
    from pairload.pack.writer import PackOptions, pack

    raw = tmp_path / "raw"
    raw.mkdir()
    for n, pattern in enumerate(("RGGB", "GBRG", "BGGR", "GRBG")):
        write_dng(raw / f"long_{n}.dng", coded_mosaic(n, 48, 64), pattern, black=BLACKS, white=WHITE, exposure=10.0,
                  make="Sony", model="ILCE-7S")
    pack(raw, tmp_path / "clean", PackOptions(workers=1, targets_only=True, raw_target="packed"))
    with pytest.raises(ConfigError, match="'lowlight' cannot make inputs from this split: it takes 8- or 16-bit RGB"):
        make_loader("ram", tmp_path / "clean", batch_size=2, crop=8, degrade="lowlight")
    loader = make_loader("ram", tmp_path / "clean", batch_size=2, crop=8, degrade="raw-physics,ratio=50..60")
    batches = list(loader)
    assert len(batches) == 2
    for batch in batches:
        ratio = batch.degradation["ratio"]
        assert batch.low.dtype == torch.uint16 and batch.low.shape[1] == 4
        assert ((50 <= ratio) & (ratio <= 60)).all() and torch.equal(batch.sensor.ratio, ratio)
        assert torch.allclose(batch.sensor.exposure[:, 0] * ratio, batch.sensor.exposure[:, 1])
        x, y = RawNormalize()(batch)  # the degraded input amplified back by its ratio is near its target
        assert (x - y).abs().mean() < 0.1 and not torch.equal(batch.low, batch.high)
        assert set(batch.degradation) >= {"K", "read", "row", "lam"}


@pytest.mark.dali
def test_dali_external_delivers_the_same_degraded_inputs(packed):
    common = dict(crop=24, degrade="lowlight", batch_size=4)
    ref = _inputs(make_loader("ram", packed, **common), (0, 1))
    _same(ref, _inputs(make_loader("dali-external", packed, **common), (0, 1)))


@pytest.mark.dali
def test_the_paired_dali_nodes_carry_the_degraded_inputs(packed, raw):
    from nvidia.dali import pipeline_def

    from pairload.dali import PairedIterator, paired_inputs, paired_source

    ref = _inputs(make_loader("ram", packed, crop=24, degrade="lowlight", batch_size=4))
    source = paired_source(packed, batch_size=4, crop=24, degrade="lowlight")

    @pipeline_def(batch_size=4, num_threads=1, device_id=None)
    def pipe():
        low, high = paired_inputs(source)
        return low, high

    got = {}
    for out in PairedIterator(pipe(), ("low", "high"), source=source):
        assert set(out["degradation"]) == set(Degradation("lowlight").columns)
        for key, low in zip(out["keys"], out["low"]):
            got[(0, key)] = low.permute(2, 0, 1).clone() if low.shape[-1] == 3 else low.clone()
    source.close()
    _same(ref, got)
    with pytest.raises(ConfigError, match="a degradation makes inputs from packed targets"):
        make_loader("dali-file", raw, crop=24, degrade="lowlight", batch_size=4)
