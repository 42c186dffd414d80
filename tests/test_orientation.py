"""Every executor of the orientation codes against their one definition (`pairload.dihedral.orient`): the gather form
(`source_index`), torch's `apply_codes`, the degradations' counters (`rng.window_counter`), DALI's matrices and, on a
CUDA device, the cut kernel and the degradation kernels' counters. Each gets the same windows, square and not, 8- and
16-bit, under every code their shape allows; a pixel's value encodes its row, column and channel, so a wrong gather
shows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pairload.cut.convert import apply_codes
from pairload.dihedral import CODES, TRANSPOSE, matrices, orient, source_index
from pairload.degrade.rng import window_counter

CASES = [(5, 5, "uint8"), (4, 7, "uint8"), (6, 6, "uint16"), (5, 9, "uint16")]


def _window(h: int, w: int, dtype: str) -> np.ndarray:
    """h×w×3: pixel (r, c) of channel k holds base + k·step + r·w + c (16-bit: above 255, so a byte taken for a
    pixel shows)."""
    base, step = (0, 64) if dtype == "uint8" else (600, 1000)
    r, c, k = np.indices((h, w, 3))
    return (base + k * step + r * w + c).astype(dtype)


def _cases():
    """(window, the codes its shape allows, the reference window of each code)."""
    for h, w, dtype in CASES:
        window = _window(h, w, dtype)
        codes = [code for code in CODES if h == w or not code & TRANSPOSE]
        yield window, codes, [orient(window, code) for code in codes]


def _warp(window: np.ndarray, m: np.ndarray) -> np.ndarray:
    """DALI's nearest-pixel inverse warp (`warp_affine(inverse_map=True, interp_type=INTERP_NN)`) of `window` into
    a window of its own shape: each output pixel's centre mapped by `m` (2×3) into the input, the pixel it lands in
    copied."""
    i, j = np.indices(window.shape[:2])
    x, y = np.einsum("ab,bhw->ahw", m, np.stack([j + 0.5, i + 0.5, np.ones(i.shape)]))
    return window[np.floor(y).astype(int), np.floor(x).astype(int)]


def _wrong(where: str, got: dict[str, np.ndarray], want: np.ndarray) -> list[str]:
    return [f"{name} ({where})" for name, out in got.items() if not np.array_equal(out, want)]


def test_every_host_executor_orients_a_window_as_the_reference():
    wrong = []
    for window, codes, want in _cases():
        h, w = window.shape[:2]
        batch = np.stack([window] * len(codes))
        work = torch.from_numpy(batch.view(np.int16) if batch.dtype == np.uint16 else batch)  # as the loaders flip it
        flipped = apply_codes(work, torch.tensor(codes)).numpy().view(window.dtype)
        warps = matrices(np.array(codes), np.array([out.shape[:2] for out in want]))
        plain_counter, plain_row = window_counter(0, h, w)
        counter, row = window_counter(codes, h, w)
        for k, code in enumerate(codes):
            where = f"{window.dtype} {h}×{w}, code {code}"
            i, j = np.indices(want[k].shape[:2])
            wrong += _wrong(where, {"source_index": window[source_index(code, h, w, i, j)],
                                    "apply_codes": flipped[k], "DALI's matrix": _warp(window, warps[k])}, want[k])
            # a pixel's noise follows it: its counter and row are those of its place in the unoriented window
            wrong += _wrong(where, {"window_counter": counter[k]}, orient(plain_counter[0], code))
            wrong += _wrong(where, {"window_counter's row": row[k]}, orient(plain_row[0], code))
    assert wrong == []


@pytest.mark.dali
def test_dalis_own_warp_orients_a_window_as_the_reference():
    """The loaders' DALI operator (`augment`) with the matrices they feed it, on DALI's CPU backend (which warps
    8-bit images only: the 16-bit windows are left to the numpy warp above), every window and code in one batch."""
    from nvidia.dali import fn, pipeline_def

    from pairload.loaders.dali.graph import augment, dihedral_matrices

    samples = [(window, code, ref) for window, codes, want in _cases() if window.dtype == np.uint8
               for code, ref in zip(codes, want)]
    images = [window for window, _, _ in samples]
    warps = list(dihedral_matrices(np.array([code for _, code, _ in samples]),
                                   np.array([ref.shape[:2] for _, _, ref in samples])))

    @pipeline_def(batch_size=len(samples), num_threads=1, device_id=None)
    def pipe():
        return augment(fn.external_source(source=lambda: images, batch=True, layout="HWC"),
                       fn.external_source(source=lambda: warps, batch=True))

    built = pipe()
    built.build()
    out, = built.run()
    wrong = [f"DALI's warp_affine (uint8 {window.shape[0]}×{window.shape[1]}, code {code})"
             for k, (window, code, ref) in enumerate(samples) if not np.array_equal(np.array(out.at(k)), ref)]
    assert wrong == []


@pytest.mark.gpu
def test_the_cut_kernel_and_the_degradation_counters_orient_a_window_as_the_reference():
    import orientation_cuda

    wrong = []
    for window, codes, want in _cases():
        h, w = window.shape[:2]
        cut = orientation_cuda.cut(window, codes)
        counter, row = orientation_cuda.counters(codes, h, w)
        plain_counter, plain_row = window_counter(0, h, w)
        for k, code in enumerate(codes):
            where = f"{window.dtype} {h}×{w}, code {code}"
            wrong += _wrong(where, {"the cut kernel": cut[k]}, want[k])
            wrong += _wrong(where, {"the kernels' counter": counter[k]}, orient(plain_counter[0], code))
            wrong += _wrong(where, {"the kernels' row": row[k]}, orient(plain_row[0], code))
    assert wrong == []
