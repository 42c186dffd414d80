"""What keeps a pack from harming its output folder: the journal of the files a pack owns (and of its partial
shards), the folder lock, the refusals made before anything is written (a manifest that is not this RAW's, a file in
the way, RAW inside the output, too little free space) and write failures turned into one-line OutputErrors."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from pathlib import Path

from ..errors import ConfigError, OutputError, PairloadError
from ..format import binindex, schema
from ..format.atomic import is_temp_of, write_json_atomic
from ..units import human_bytes

JOURNAL = ".pairload-pack.json"  # the shard files a pack is replacing, written before it touches any of them
LOCK = ".pairload-pack.lock"
FINISH_LOCK = ".pairload-finish.lock"  # the parts of a pack in one folder take turns at its journal and manifest


# ------------------------------------------------------------------ write failures

def output_error(path: Path, exc: OSError) -> OutputError:
    """The OutputError for an OSError while writing `path`; a full disk says so."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(f"{path}: the disk is full ({exc.strerror or exc}) while writing this file; free some "
                           "space or pack into a folder on a larger disk, then run the same `pairload pack` again")
    return OutputError(f"{path}: cannot write this file ({exc.strerror or exc}); check the folder's permissions and "
                       "free space, then run the same `pairload pack` again")


@contextlib.contextmanager
def writing(path: Path):
    """An OSError while writing `path` becomes an OutputError naming it (a full disk says so)."""
    try:
        yield
    except OSError as exc:
        raise output_error(path, exc) from None


# ------------------------------------------------------------------ the journal

def read_journal(folder: Path) -> dict:
    """The journal a killed pack left ({"owned": [...], "partials": [...]}), or {} when there is none."""
    try:
        doc = json.loads((folder / JOURNAL).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def journal_names(journal: dict, key: str) -> set[str]:
    names = journal.get(key)
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def write_journal(folder: Path, owned: set[str], partials: list[str]) -> None:
    """Record the shard files this pack owns and the partial shards it is about to create (or has renamed), before
    it touches any of them: a killed run's successor then knows they are pack's."""
    with writing(folder / JOURNAL):
        write_json_atomic(folder / JOURNAL, {"owned": sorted(owned), "partials": partials})


def forget_partials(folder: Path, journal: dict) -> None:
    """After a failed run removed its partial shards: the journal as it was before the run (or none)."""
    try:
        if journal:
            write_json_atomic(folder / JOURNAL, {"owned": sorted(journal_names(journal, "owned"))})
        else:
            (folder / JOURNAL).unlink(missing_ok=True)
    except OSError:  # a full disk: the partials it lists are gone, and a later run ignores missing ones
        pass


def remove_partials(folder: Path, journal: dict) -> None:
    """Delete what a killed pack left under pack's own temporary names: the partial shards its journal lists (it is
    written before they are created) and the atomic writer's temporary manifest and journal. A `*.tar.partial` the
    journal does not list is not pack's, and stays."""
    listed = journal_names(journal, "partials")
    for p in folder.glob(f"*{schema.PARTIAL_SUFFIX}"):
        if (p.name in listed and schema.is_shard_name(p.name[: -len(schema.PARTIAL_SUFFIX)])) \
                or is_temp_of(p.name, schema.MANIFEST) or is_temp_of(p.name, JOURNAL):
            p.unlink(missing_ok=True)


def owned(folder: Path, journal: dict) -> set[str]:
    """Shard and split index files pack may replace or delete: those the current manifest lists and those a killed
    pack's journal lists (so a split the new pack no longer has leaves no `<split>.index` behind). Any other file,
    even one named like a shard (`imagenet-000000.tar`), is the user's and stays."""
    names: set[str] = set()
    try:
        splits = schema.read_manifest(folder)["splits"].values()
        names.update(sh["file"] for entry in splits for sh in entry["shards"])
        names.update(entry[binindex.FIELD]["file"] for entry in splits if isinstance(entry.get(binindex.FIELD), dict))
    except (PairloadError, KeyError, TypeError):
        pass
    names.update(journal_names(journal, "owned"))
    return {name for name in names if schema.is_shard_name(name) or binindex.is_index_name(name)}


def remove_stale(folder: Path, names) -> None:
    """Delete these shard and index files of an earlier pack (`owned`, less what the new one keeps), and the record
    of each index file found whole (`binindex.VERIFIED`)."""
    for name in sorted(names):
        (folder / name).unlink(missing_ok=True)
        if binindex.is_index_name(name):
            (folder / binindex.record_of(name)).unlink(missing_ok=True)


# ------------------------------------------------------------------ refusals

def manifest_refusal(doc, where: str, raw: Path, elsewhere: str = "another folder") -> str | None:
    """Why pack will not replace the manifest `doc` found at `where` (None: it may): it is not a pairload manifest
    (anything but a JSON object with pairload's "format"), or it records another dataset folder. The local and the
    remote packer share these rules; `elsewhere` is where else to pack ("another folder", "another URL")."""
    if not isinstance(doc, dict) or doc.get("format") != schema.FORMAT:
        return (f"{where}: not a pairload manifest (expected JSON with \"format\": \"{schema.FORMAT}\"), so "
                f"`pairload pack` will not replace it; move it away or pack into {elsewhere}, or pass --overwrite to "
                "replace it")
    theirs = doc.get(schema.RAW_DIR)
    if isinstance(theirs, str) and theirs != str(raw.resolve()):
        return (f"{where}: the manifest of a pack of {theirs}, not of {raw}; pack into {elsewhere}, or pass "
                "--overwrite to replace those shards")
    return None


def parse_manifest_bytes(data: bytes):
    """The JSON document in `data`, or None when it is not JSON (which `manifest_refusal` refuses)."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def check_manifest_replaceable(out: Path, raw: Path) -> None:
    """Refuse to replace a manifest.json that is not a pairload manifest, or that records another dataset folder."""
    path = out / schema.MANIFEST
    if not (path.exists() or path.is_symlink()):
        return
    try:
        doc = parse_manifest_bytes(path.read_bytes())
    except OSError:
        doc = None
    refusal = manifest_refusal(doc, str(path), raw)
    if refusal:
        raise OutputError(refusal)


def check_partials_free(out: Path, names: list[str]) -> None:
    """A file under one of the temporary names this pack is about to create was not written by pack (its own were
    removed above): refuse, naming it, instead of truncating it."""
    taken = [n for n in names if (out / n).exists() or (out / n).is_symlink()]
    if taken:
        raise OutputError(in_the_way(out / taken[0], len(taken) - 1))


def in_the_way(path: Path, more: int = 0) -> str:
    """The refusal for a file under a partial shard's name that no pack's journal lists."""
    also = f" (and {more} more such files)" if more else ""
    return (f"{path}: this pack would write its temporary shard under this name, and the file there was not written "
            f"by `pairload pack` (neither the pack's journal {JOURNAL} nor a part's .pairload-part-*.journal lists "
            f"it){also}; move or delete it, or pack into another "
            "folder")


def create_partial(path: Path):
    """Open the new partial shard `path` for writing; refuse a file that appeared there since the check."""
    try:
        return open(path, "xb")
    except FileExistsError:
        raise OutputError(in_the_way(path)) from None
    except OSError as exc:
        raise output_error(path, exc) from None


def check_free_space(out: Path, need: int, out_sizes: list[tuple[int, int]]) -> None:
    """Refuse a pack whose shards (`need` bytes) cannot fit on the output disk (a mistyped --resize can ask for
    terabytes): the partial shards are sparse, so nothing else would notice before the disk fills."""
    free = shutil.disk_usage(out).free
    if need > free:
        h, w = max(out_sizes, key=lambda hw: hw[0] * hw[1])
        raise OutputError(f"{out}: the shards would take about {human_bytes(need)} ({len(out_sizes)} pairs, images "
                          f"up to {w}x{h}) but the disk holding this folder has {human_bytes(free)} free; free some "
                          "space, pack into a folder on a larger disk, or store smaller images (--max-side N, "
                          "--resize WxH)")


def check_output_outside_raw(raw: Path, out: Path) -> None:
    """The shards may not live in the dataset folder: a later pack of it would walk into them (and its own partial
    files)."""
    raw_real, out_real = raw.resolve(), out.resolve()
    hint = f"e.g. `pairload pack {raw} {raw_real.name}-shards`"
    if out_real == raw_real:
        raise ConfigError(f"{out}: the output folder is the dataset folder; write the shards elsewhere, {hint}")
    if out_real.is_relative_to(raw_real):
        raise ConfigError(f"{out}: the output folder is inside the dataset folder {raw} (a later pack of {raw} would "
                          f"walk into its own shards); write the shards outside it, {hint}")


# ------------------------------------------------------------------ locks

@contextlib.contextmanager
def exclusive(lock: Path, busy: PairloadError):
    """Hold the advisory lock file `lock` (the kernel drops it when the process dies); raise `busy` if another
    process holds it."""
    import fcntl

    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy from None
        yield
    finally:
        os.close(fd)


def folder_lock(folder: Path):
    """One pack at a time per output folder."""
    return exclusive(folder / LOCK, ConfigError(f"{folder}: another `pairload pack` is writing into this folder (it "
                                                f"holds {LOCK}); wait for it to finish, or pack into another folder"))


def part_lock(folder: Path, record: str):
    """One run of a part at a time (`record`: the part's record name)."""
    busy = ConfigError(f"{folder}: this part ({record}) is being packed by another process; wait for it to finish")
    return exclusive(folder / f"{record}.lock", busy)


@contextlib.contextmanager
def finish_lock(folder: Path):
    """The parts of a pack take turns at the folder's shared state (the journal, the manifest): wait for it."""
    import fcntl

    fd = os.open(folder / FINISH_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def remove_listed_partials(folder: Path, journal: Path, record: str) -> None:
    """Delete what a killed run of one part left: the partial shards it listed in its `journal` before creating
    them, and the atomic writer's temporary journal and `record`."""
    for p in folder.glob(f"*{schema.PARTIAL_SUFFIX}"):
        if is_temp_of(p.name, journal.name) or is_temp_of(p.name, record):
            p.unlink(missing_ok=True)
    try:
        names = json.loads(journal.read_text(encoding="utf-8")).get("partials", [])
    except (OSError, ValueError, AttributeError):
        return
    for name in names:
        if isinstance(name, str) and schema.is_shard_name(name[: -len(schema.PARTIAL_SUFFIX)]):
            (folder / name).unlink(missing_ok=True)
