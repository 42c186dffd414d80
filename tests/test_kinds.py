"""The registry of loader kinds: every kind loads its class, `make_loader` reads it (presets included), and the
benchmark rows and the CLI's kinds come from it."""

from __future__ import annotations

import pytest

from pairload import ConfigError, make_loader
from pairload.bench.rows import BASELINES, BENCH_ENTRIES
from pairload.kinds import KINDS, kind_help

from conftest import raw_and_shards


def test_every_kind_names_a_class_and_the_bench_has_a_row_for_each():
    from pairload.bench.entries import ENTRIES

    for kind in KINDS.values():
        assert callable(kind.load()) and kind.name in BENCH_ENTRIES and kind.name in kind_help()
        assert set(kind.preset) <= set(__import__("inspect").signature(kind.load().__init__).parameters)
    assert set(BENCH_ENTRIES) == set(ENTRIES) and set(BASELINES) <= set(BENCH_ENTRIES)


def test_make_loader_applies_a_kinds_preset(tmp_path):
    shards = raw_and_shards(tmp_path, 12) / "shards"
    ram = make_loader("ram", shards, batch_size=2, crop=16)
    wds = make_loader("wds", shards, batch_size=2, crop=16)
    assert (ram.DEAL, wds.DEAL) == ("strided", "by_shard") and type(ram) is type(wds)
    with pytest.raises(ConfigError, match=r"loader kind 'mmap': expected one of ram, wds, dali-external, dali-file"):
        make_loader("mmap", shards, batch_size=2, crop=16)
