"""The registry of loader kinds: adding a kind is one `Kind` here (the class that
executes it and its preset options); `make_loader`, `bench-loaders`, the reference loop and the CLI's help all read
this table. Torch-free on purpose: the CLI lists the kinds without importing torch (`pairload pack --help` stays
fast); classes are named by import path and imported when a loader is made."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from .errors import ConfigError

# what a kind reads (`Kind.reads`): a folder or URL written by `pairload pack`, or a dataset's image folders as they are
SHARDS, RAW = "shards", "raw"
READS = (SHARDS, RAW)


@dataclass(frozen=True)
class Kind:
    """A loader kind: `cls` ("module:Class") executes the plan with the `preset` options; `options`: what users may
    add; `summary` is the one line the help shows.

    `reads`: its source. SHARDS: a shard folder or URL (shards at a URL go through the node cache, which the
    remote options configure; the training data's digest is the train split's shard sha256s). RAW: the raw image
    folders (no cache; the digest is the pairs' paths). `mixes`: it plans over several shard folders at once
    (`make_loader`'s dict source with weights, the reference loop's --mix). `requires`: a module imported before a
    run uses the kind, which raises the backend's install advice when it is missing ("" for none)."""

    name: str
    cls: str
    summary: str
    preset: dict = field(default_factory=dict)
    options: tuple[str, ...] | None = None  # the options users may give (None: every keyword of `cls`)
    reads: str = SHARDS
    mixes: bool = True
    requires: str = ""

    def __post_init__(self) -> None:
        if self.reads not in READS:
            raise ValueError(f"kind {self.name}: reads={self.reads!r}, expected one of {', '.join(READS)}")
        if self.mixes and self.reads != SHARDS:
            raise ValueError(f"kind {self.name}: only a kind that reads shards mixes shard folders (mixes=False)")

    def load(self):
        module, name = self.cls.split(":")
        return getattr(importlib.import_module(module), name)

    def require(self) -> None:
        """Import the module the kind requires (its MissingDependencyError names what to install)."""
        if self.requires:
            importlib.import_module(self.requires)


def lookup(name: str) -> Kind:
    """The entry of kind `name`; a ConfigError listing the kinds for any other name."""
    if name not in KINDS:
        raise ConfigError(f"loader kind {name!r}: expected one of {', '.join(KINDS)}")
    return KINDS[name]


def kinds_that(**facts) -> tuple[str, ...]:
    """The names of the kinds whose entries have these values: `kinds_that(reads=RAW)`, `kinds_that(mixes=True)`."""
    return tuple(k.name for k in KIND_LIST if all(getattr(k, f) == v for f, v in facts.items()))


def one_of(names) -> str:
    """'a, b or c' (for messages)."""
    names = list(names)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


_REMOTE = ("cache_dir", "cache_limit", "storage_options")
KIND_LIST = (
    Kind("ram", "pairload.loaders.shards:ShardLoader",
         "packed shards, the whole split in the page cache (strided deal); on a GPU the kernel cuts from it",
         {"deal": "strided"}, ("resident", "zero_copy", "pin_budget", "prefetch", "timeout", *_REMOTE)),
    Kind("wds", "pairload.loaders.shards:ShardLoader",
         "packed shards streamed a shuffle buffer of shards at a time (by-shard deal): splits larger than memory; on a "
         "GPU the kernel cuts from the buffer's pages", {"deal": "by_shard"},
         ("shuffle_buffer", "zero_copy", "pin_budget", "prefetch", "timeout", *_REMOTE)),
    Kind("dali-external", "pairload.loaders.dali:DaliExternalLoader",
         "packed shards fed to a DALI pipeline (external_source)", requires="pairload.dali"),
    Kind("dali-file", "pairload.loaders.dali:DaliFileLoader",
         "the dataset's image folders read and decoded by DALI (readers.file)", reads=RAW, mixes=False,
         requires="pairload.dali"),
)
KINDS = {k.name: k for k in KIND_LIST}
LOADER_KINDS = tuple(KINDS)


def kind_help() -> str:
    """One line per kind, for option help texts."""
    return "; ".join(f"{k.name}: {k.summary}" for k in KIND_LIST)
