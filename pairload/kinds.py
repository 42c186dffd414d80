"""The registry of loader kinds: adding a kind is one `Kind` here (the class that
executes it and its preset options); `make_loader`, `bench-loaders`, the reference loop and the CLI's help all read
this table. Torch-free on purpose: the CLI lists the kinds without importing torch (`pairload pack --help` stays
fast); classes are named by import path and imported when a loader is made."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Kind:
    """A loader kind: `cls` ("module:Class") executes the plan with the `preset` options; `options`: what users may
    add; `summary` is the one line the help shows."""

    name: str
    cls: str
    summary: str
    preset: dict = field(default_factory=dict)
    options: tuple[str, ...] | None = None  # the options users may give (None: every keyword of `cls`)

    def load(self):
        module, name = self.cls.split(":")
        return getattr(importlib.import_module(module), name)


_REMOTE = ("cache_dir", "cache_limit", "storage_options")
KIND_LIST = (
    Kind("ram", "pairload.loaders.shards:ShardLoader",
         "packed shards, the whole split in the page cache (strided deal); on a GPU the kernel cuts from it",
         {"deal": "strided"}, ("resident", "zero_copy", "pin_budget", "prefetch", "timeout", *_REMOTE)),
    Kind("wds", "pairload.loaders.shards:ShardLoader",
         "packed shards streamed a window of shards at a time (by-shard deal): splits larger than memory; on a GPU "
         "the kernel cuts from the window's pages", {"deal": "by_shard"},
         ("shuffle_buffer", "zero_copy", "pin_budget", "prefetch", "timeout", *_REMOTE)),
    Kind("dali-external", "pairload.loaders.dali:DaliExternalLoader",
         "packed shards fed to a DALI pipeline (external_source)"),
    Kind("dali-file", "pairload.loaders.dali:DaliFileLoader",
         "the raw image folder read and decoded by DALI (readers.file)"),
)
KINDS = {k.name: k for k in KIND_LIST}
LOADER_KINDS = tuple(KINDS)


def kind_help() -> str:
    """One line per kind, for option help texts."""
    return "; ".join(f"{k.name}: {k.summary}" for k in KIND_LIST)
