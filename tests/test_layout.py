"""The layout's import rules: the write side and the torch-free read side never import torch or DALI, the
library never imports the recipes, the recipes never import the benchmark, and the documented entry points still
work."""

import subprocess
import sys

import pytest

TORCH_FREE = ["pairload.format.schema", "pairload.format.atomic", "pairload.raw", "pairload.raw.discover",
              "pairload.raw.decode", "pairload.pack", "pairload.pack.synth", "pairload.read", "pairload.workers",
              "pairload.workers.serve", "pairload.plan", "pairload.kinds", "pairload.errors"]
LIBRARY = ["pairload.loaders", "pairload.loaders.ram", "pairload.loaders.wds", "pairload.batch", "pairload.devices"]
RECIPES = ["pairload.recipes.train", "pairload.recipes.model", "pairload.recipes.timing", "pairload.recipes.metrics"]


def _loaded_after(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", TORCH_FREE)
def test_the_write_side_and_the_host_read_side_never_import_torch_or_dali(module):
    loaded = _loaded_after(module)
    assert "torch" not in loaded and not any(m.startswith("nvidia") for m in loaded), module


@pytest.mark.parametrize("module", LIBRARY)
def test_the_library_does_not_import_the_recipes_or_the_benchmark(module):
    loaded = _loaded_after(module)
    assert not [m for m in loaded if m.startswith(("pairload.recipes", "pairload.bench"))], module


@pytest.mark.parametrize("module", RECIPES)
def test_the_recipes_do_not_import_the_benchmark(module):
    # one way only: bench uses the recipes' model and timing, the demo (pairload.demo) uses both
    assert not [m for m in _loaded_after(module) if m.startswith("pairload.bench")], module


def test_the_documented_entry_points_still_work():
    out = subprocess.run([sys.executable, "-m", "pairload.train", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--shards" in out.stdout
    from pairload import Normalize, PairBatch, make_loader, open_shards  # noqa: F401
    from pairload.pack import PackOptions, pack  # noqa: F401
    from pairload.raw import decode_rgb, find_pairs, probe_size  # noqa: F401


@pytest.mark.parametrize("module", ["pairload.plan", "pairload.workers.serve"])
def test_the_planner_and_the_workers_never_import_the_loaders(module):
    loaded = _loaded_after(module)
    assert not [m for m in loaded if m.startswith("pairload.loaders")], module
    if module.startswith("pairload.workers"):
        assert not [m for m in loaded if m.startswith("pairload.plan")], "workers execute, they never plan"
