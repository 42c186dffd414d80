"""What pack measures of every image and pair (`pairload.audit.measures`), on real photographs: fingerprints that
agree for the same scene renamed, re-encoded, resized, cropped, brightened or darkened into a low-light input, and
that tell distinct scenes apart once compared finely (`audit.similar`); shifts of a darkened, noisy input found within
half a pixel."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from pairload.audit.measures import (FP_BITS, exact_hash, facts_of, hamming, luminance, pair_facts, perceptual_hash,
                                     scan_pair, shift_between)
from pairload.audit.packing import CONFIDENT
from pairload.audit.run import RADIUS, MIN_SIMILARITY
from pairload.audit.search import near_pairs
from pairload.format.crc import crc32
from pairload.audit.similar import look, similarity

from audit_photos import CHANGES, darken, photos, resized, tiles


def same_scene(a: np.ndarray, b: np.ndarray) -> tuple[int, float]:
    return int(hamming(perceptual_hash(a), perceptual_hash(b))), similarity(look(a), look(b))


@pytest.mark.parametrize("name, change", CHANGES + (("darkened", darken), ("half size", lambda i: resized(i, 0.5))))
def test_the_same_scene_changed_as_datasets_change_it_is_found(name, change):
    for scene in tiles(200, 300)[:12]:
        bits, alike = same_scene(scene, change(scene))
        assert bits <= RADIUS and alike >= MIN_SIMILARITY, (name, bits, alike)


def test_distinct_real_scenes_are_never_taken_for_one():
    scenes = tiles(96, 96)  # 260 scenes, 33,670 pairs
    fps = np.array([perceptual_hash(s) for s in scenes], dtype=np.uint64)
    near = near_pairs(fps, None, RADIUS)
    assert len(near) < len(scenes)  # few candidates for the fine comparison
    looks = [look(s) for s in scenes]
    false = [(i, j) for i, j in zip(near.i, near.j) if similarity(looks[i], looks[j]) >= MIN_SIMILARITY]
    assert false == []


def clipped_bright(img: np.ndarray) -> np.ndarray:
    """The scene brightened until most of its highlights clip (x1.8 + 20, at 255)."""
    return np.clip(img.astype(np.float32) * 1.8 + 20, 0, 255).astype(np.uint8)


def test_a_scene_brightened_until_it_clips_is_found_and_distinct_ones_are_not_taken_for_it():
    scene = tiles(200, 300)[17]  # 80% of its pixels clip: its layout, compared as it was, correlates by 0.82
    bits, alike = same_scene(scene, clipped_bright(scene))
    assert bits <= RADIUS and alike >= MIN_SIMILARITY, (bits, alike)
    scenes = tiles(96, 96)
    bright = [clipped_bright(s) for s in scenes]
    near = near_pairs(np.array([perceptual_hash(s) for s in bright], dtype=np.uint64),
                      np.array([perceptual_hash(s) for s in scenes], dtype=np.uint64), RADIUS)
    looks, bright_looks = [look(s) for s in scenes], [look(s) for s in bright]
    false = [(i, j) for i, j in zip(near.i, near.j)
             if i != j and similarity(bright_looks[i], looks[j]) >= MIN_SIMILARITY]
    assert false == []


def test_fingerprints_and_hashes_of_edge_cases():
    flat = np.full((30, 40, 3), 90, np.uint8)
    assert perceptual_hash(flat) == 0 and look(flat) is None  # nothing to tell scenes apart by
    img = np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    other = img.copy()
    other[3, 4, 1] ^= 1
    assert exact_hash(img) == exact_hash(img.copy()) != exact_hash(other)
    assert exact_hash(img) != exact_hash(img.reshape(40, 30, 3))  # the shape counts
    photo = photos()[0]
    assert exact_hash(photo) & 0xFFFFFFFF == crc32(photo)  # the member's CRC-32 a pack stores: measured once
    assert exact_hash(photo) != exact_hash(photo[::-1].copy())  # each strip of rows counts in its place
    assert 0 <= perceptual_hash(img.astype(np.uint16) * 257) < 2 ** FP_BITS
    for many in (img[..., :1], np.concatenate([img, img], axis=2)):  # other channel counts
        assert perceptual_hash(many) >= 0
    x = img.astype(np.float64) / 255
    assert luminance(img) == pytest.approx((0.299 * x[..., 0] + 0.587 * x[..., 1] + 0.114 * x[..., 2]).mean())
    assert luminance(img.astype(np.uint16) * 257) == pytest.approx(luminance(img))


def shifted_pair(photo: np.ndarray, dy: int, dx: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A darkened, noisy input and its target, the target's window `(dy, dx)` pixels from the input's (the scene
    moves by (dy, dx) from input to target)."""
    h, w = 240, 360
    y, x = 30, 30
    target = photo[y - dy:y - dy + h, x - dx:x - dx + w]
    return darken(photo[y:y + h, x:x + w], seed), np.ascontiguousarray(target)


@pytest.mark.parametrize("shift", [1, 2, 4])
def test_shifts_of_a_dark_noisy_input_are_found_within_half_a_pixel(shift):
    for k, photo in enumerate(photos()[:5]):
        for dy, dx in ((shift, 0), (0, -shift), (shift, shift)):
            low, high = shifted_pair(photo, dy, dx, seed=k)
            ey, ex, confidence = shift_between(low, high)
            assert confidence >= CONFIDENT
            assert abs(ey - dy) <= 0.5 and abs(ex - dx) <= 0.5, (k, dy, dx, ey, ex)


def camera_dark(img: np.ndarray, seed: int) -> np.ndarray:
    """A low-light input as a camera gives it: a tone curve, vignetting, a colour cast, shot and read noise."""
    rng = np.random.default_rng(seed)
    h, w = img.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    shade = 1 - 2 * (((yy - h / 2) / h) ** 2 + ((xx - w / 2) / w) ** 2)
    x = (img / 255.0) ** 2.2 * 0.15 * shade[..., None] * np.array([1.0, 0.8, 1.3])
    x = rng.poisson(x * 255 * 4) / 4 + rng.normal(0, 2, x.shape)
    return np.clip(x, 0, 255).astype(np.uint8)


def test_shifts_survive_a_cameras_tone_curve_shading_and_cast():
    found = 0
    for k, photo in enumerate(photos()[:6]):
        _, high = shifted_pair(photo, 2, -3, seed=k)
        low = camera_dark(shifted_pair(photo, 0, 0, seed=k)[1], seed=k)  # the same window as the target's input
        dy, dx, confidence = shift_between(low, high)
        if confidence >= CONFIDENT:  # an estimate that counts is right; most count
            assert abs(dy - 2) <= 0.5 and abs(dx + 3) <= 0.5, (k, dy, dx, confidence)
            found += 1
    assert found >= 5


def test_a_pair_of_two_scenes_has_no_confident_shift():
    scenes = photos()
    for k in range(len(scenes)):
        low = darken(np.ascontiguousarray(scenes[k][:240, :360]), seed=k)
        other = np.ascontiguousarray(scenes[(k + 1) % len(scenes)][:240, :360])
        assert shift_between(low, other)[2] < CONFIDENT


def test_aligned_pairs_measure_no_shift_and_flat_ones_no_confidence():
    for k, photo in enumerate(photos()[:5]):
        low, high = shifted_pair(photo, 0, 0, seed=k)
        dy, dx, _ = shift_between(low, high)
        assert np.hypot(dy, dx) < 0.5
    flat = np.full((200, 300, 3), 120, np.uint8)
    assert shift_between(darken(flat), flat)[2] < CONFIDENT
    assert shift_between(flat * 0, flat * 0) == (0.0, 0.0, 0.0)  # no estimate: no shift either


def test_a_target_at_twice_the_size_is_compared_at_the_inputs():
    photo = photos()[0]
    low, high = shifted_pair(photo, 2, 0, seed=1)
    big = cv2.resize(high, None, fx=2, fy=2, interpolation=cv2.INTER_CUBIC)
    dy, dx, confidence = shift_between(low, big)
    assert confidence >= CONFIDENT and abs(dy - 2) <= 0.5 and abs(dx) <= 0.5


def test_pair_facts_of_a_low_light_pair():
    photo = photos()[1]
    low, high = darken(photo[:240, :360]), np.ascontiguousarray(photo[:240, :360])
    f = pair_facts(low, high)
    assert f.low_luma < 0.2 * f.high_luma
    assert f.low_luma == pytest.approx(luminance(low))  # from the column sums the shift adds up anyway
    assert f.high_luma == pytest.approx(luminance(high))
    many = np.concatenate([high, high], axis=2)  # six channels: averaged as float, its brightness still in [0, 1]
    assert pair_facts(None, many).high_luma == pytest.approx(luminance(many), abs=0.5 / 255)
    assert hamming(f.low_fp, f.high_fp) <= RADIUS  # a low-light input and its target agree
    t = pair_facts(None, high)  # targets only: its input is its target
    assert (t.low_exact, t.low_fp, t.shift_confidence) == (t.high_exact, t.high_fp, 0.0)


def test_pairs_measured_together_measure_as_each_alone():
    """Pack measures a task's pairs in one batch (`facts_of`): each pair's facts must not depend on the others
    (pack's bytes do not depend on how its pairs fall into tasks)."""
    scenes = photos()
    pairs = []
    for k, photo in enumerate(scenes[:6]):
        h, w = (240, 360) if k % 2 else (130, 150)  # two sizes: one brought down by 2, the other by 4 (from 256)
        high = np.ascontiguousarray(cv2.resize(photo, (2 * w, 2 * h)) if k % 3 == 0 else photo[:h, :w])
        pairs.append((darken(high, seed=k), high))
    pairs.append((None, pairs[0][1]))  # targets only
    pairs.append((pairs[1][0][:100, :120].copy(), pairs[1][1]))  # sizes that differ
    pairs.append((pairs[2][0][..., 1].copy(), pairs[2][1][..., 1].copy()))  # one channel
    pairs.append((pairs[3][0].astype(np.uint16) * 257, pairs[3][1].astype(np.uint16) * 257))
    pairs.append((np.zeros_like(pairs[4][1]), pairs[4][1]))  # a black input
    pairs.append((pairs[5][0][:6, :6].copy(), pairs[5][1][:6, :6].copy()))  # too small for a shift
    alone = [pair_facts(low, high) for low, high in pairs]
    for order in (range(len(pairs)), range(len(pairs) - 1, -1, -1)):
        together = facts_of([scan_pair(*pairs[i]) for i in order])
        assert together == [alone[i] for i in order]
    assert len({f.high_fp for f in alone[:6]}) == 6 and any(f.shift_confidence > 0 for f in alone)
