"""A pack spread over processes or machines (`pack --part I/N`): every part plans the whole pack alike (pairs, keys,
shard boundaries, offsets) and writes only its own shards, then a record of them; the last part to finish (or
`pack --finish`) writes the index and the manifest from all the records. The shards and the manifest are the bytes
a one-machine pack writes. This module owns the `Part`, which shards each part writes, the plan's fingerprint and the
records."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, OutputError
from ..format.columns import ColumnFile, Keys, Pieces, write_columns
from .rows import ShardRows
from .spill import column_spec
from .shardplan import ShardPlan

_RECORD = re.compile(r"^\.pairload-part-(\d{4})-of-(\d{4})\.record$")


@dataclass(frozen=True)
class Part:
    """Part `index` (0-based) of `count`."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not (1 <= self.count <= 9999 and 0 <= self.index < self.count):
            raise ConfigError(f"--part {self.index}/{self.count}: expected I/N with 0 <= I < N <= 9999, e.g. 0/4 "
                              "for the first of four parts")

    @staticmethod
    def parse(text: str) -> "Part":
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if m is None:
            raise ConfigError(f"--part {text!r}: expected I/N (part I of N, counted from 0), e.g. 0/4")
        return Part(int(m.group(1)), int(m.group(2)))

    @staticmethod
    def from_scheduler(env: dict[str, str]) -> "Part | None":
        """The part a scheduler gives this process: a SLURM array task (SLURM_ARRAY_TASK_ID of
        SLURM_ARRAY_TASK_COUNT, counted from SLURM_ARRAY_TASK_MIN) or torchrun's RANK of WORLD_SIZE; None outside
        both. `env`: the process's environment, read by the CLI (library code never reads it)."""
        if "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
            low = int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
            return Part(int(env["SLURM_ARRAY_TASK_ID"]) - low, int(env["SLURM_ARRAY_TASK_COUNT"]))
        if "RANK" in env and "WORLD_SIZE" in env:
            return Part(int(env["RANK"]), int(env["WORLD_SIZE"]))
        return None

    @staticmethod
    def from_cli(text: str | None, env: dict[str, str]) -> "Part | None":
        """`--part I/N`, or `--part auto`: the part the scheduler's variables in `env` give (the CLI's environment;
        library code never reads it); None without --part."""
        if text is None:
            return None
        if text.strip() == "auto":
            found = Part.from_scheduler(env)
            if found is None:
                raise ConfigError("--part auto: neither SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT (a SLURM array "
                                  "job) nor RANK/WORLD_SIZE (torchrun) is set; give --part I/N")
            return found
        return Part.parse(text)

    @property
    def record(self) -> str:
        return f".pairload-part-{self.index:04d}-of-{self.count:04d}.record"

    @property
    def journal(self) -> str:
        return f".pairload-part-{self.index:04d}-of-{self.count:04d}.journal"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def owners(plans: list[ShardPlan], count: int) -> list[int]:
    """The part that writes each shard: consecutive shards, about the same bytes per part."""
    sizes = np.array([p.size for p in plans], dtype=np.float64)
    if not len(sizes):
        return []
    middle = np.cumsum(sizes) - sizes / 2
    return np.minimum((middle * count // sizes.sum()).astype(np.int64), count - 1).tolist()


def fingerprint(skeleton: dict, inputs, plans: list[ShardPlan]) -> str:
    """What must be equal for two parts to belong to one pack: the manifest's fixed fields (RAW, options, splits),
    every pair with its files and sizes, and the shard boundaries."""
    h = hashlib.sha256(json.dumps({k: v for k, v in skeleton.items() if k != "created_by"}, sort_keys=True).encode())
    for k, pair in enumerate(inputs.pairs):
        h.update(f"{pair.split}\0{pair.key}\0{pair.low_rel}\0{pair.high_rel}\0{inputs.sizes[k]}\0"
                 f"{inputs.out_sizes[k]}\n".encode("utf-8", "surrogateescape"))
    h.update(json.dumps([[p.split, p.number, p.first, p.count, p.end] for p in plans]).encode())
    return h.hexdigest()


def write_record(out: Path, part: Part, print_: str, skeleton: dict, rows: list[ShardRows]) -> None:
    """The record of a finished part: its shards' rows, the plan's fingerprint and the manifest's skeleton."""
    columns: dict[str, np.ndarray] = {}
    shards = []
    for j, r in enumerate(rows):
        columns[f"{j}/key_bytes"], columns[f"{j}/key_end"] = r.keys.blob, r.keys.ends
        for name in r.columns:  # (a spilled column is read as it is written)
            dtype, shape = column_spec(r.columns, name)
            columns[f"{j}/{name}"] = Pieces(dtype, shape, lambda c=r.columns, name=name: [c[name]])
        shards.append({"split": r.split, "name": r.name, "samples": r.samples, "bytes": r.bytes, "sha256": r.sha256,
                       "columns": list(r.columns), "notes": r.notes})
    meta = {"fingerprint": print_, "part": part.index, "parts": part.count, "skeleton": skeleton, "shards": shards}
    write_columns(out / part.record, columns, meta)


@dataclass
class Record:
    part: Part
    fingerprint: str
    skeleton: dict
    rows: list[ShardRows]


def read_record(path: Path) -> Record:
    f = ColumnFile(path)
    meta = f.meta
    rows = []
    for j, sh in enumerate(meta["shards"]):
        keys = Keys(f.columns[f"{j}/key_bytes"], f.columns[f"{j}/key_end"])  # (mapped: read when the index is)
        cols = {name: f.columns[f"{j}/{name}"] for name in sh["columns"]}
        rows.append(ShardRows(sh["split"], sh["name"], sh["samples"], sh["bytes"], sh["sha256"], keys, cols,
                              [tuple(n) for n in sh["notes"]]))
    return Record(Part(meta["part"], meta["parts"]), meta["fingerprint"], meta["skeleton"], rows)


def records_in(out: Path) -> dict[Part, Path]:
    """The part records lying in `out`."""
    found = {}
    for name in os.listdir(out):
        m = _RECORD.match(name)
        if m:
            found[Part(int(m.group(1)), int(m.group(2)))] = out / name
    return found


def check_records(out: Path, part: Part, print_: str) -> None:
    """Refuse to add a part to a folder holding parts of another pack (other RAW, options, files or part count)."""
    for other, path in sorted(records_in(out).items(), key=lambda kv: (kv[0].count, kv[0].index)):
        if other.count != part.count:
            raise OutputError(f"{path}: {out} holds part {other} of a pack in {other.count} parts, and this is part "
                              f"{part}; run every part with the same N, or delete the .pairload-part-* files of the "
                              "other pack (or pack into another folder)")
        theirs = read_record(path).fingerprint
        if theirs != print_:
            raise OutputError(f"{path}: {out} holds part {other} of another pack (other dataset files, options or "
                              f"pairload version); the parts of one pack must be run with the same FOLDER and options: "
                              f"delete the .pairload-part-* files of the other pack, or pack into another folder")


def missing(out: Path, count: int) -> list[int]:
    have = {p.index for p in records_in(out) if p.count == count}
    return [i for i in range(count) if i not in have]


# Finishing, wherever the records lie (a folder, or a URL: `bucketparts`); `where` names the place in messages.

def choose_count(found: set[Part], count: int | None, where: str) -> int:
    """The number of parts to finish: `count`, or the one the parts found say."""
    if count is not None:
        return count
    counts = sorted({p.count for p in found})
    if not counts:
        raise OutputError(f"{where}: no part of a pack made with --part I/N is here (no .pairload-part-*.record "
                          "file); run `pairload pack FOLDER OUT --part I/N` for every part first")
    if len(counts) > 1:
        raise OutputError(f"{where}: holds parts of packs in {' and '.join(map(str, counts))} parts; delete the "
                          ".pairload-part-* files of the pack you do not want, then finish again")
    return counts[0]


def missing_message(where: str, gone: list[int], count: int) -> str:
    shown = ", ".join(f"{i}/{count}" for i in gone[:10]) + (" …" if len(gone) > 10 else "")
    return (f"{where}: part {shown} of {count} has not finished (no {Part(gone[0], count).record}); run `pairload "
            f"pack FOLDER {where} --part {gone[0]}/{count}` (the same FOLDER and options), then finish again")


def one_pack(recs: list[Record], where_of) -> list[ShardRows]:
    """Every part's rows in shard order, once all records are of one pack (else an error naming the odd one,
    `where_of(record)`)."""
    for rec in recs[1:]:
        if rec.fingerprint != recs[0].fingerprint:
            raise OutputError(f"{where_of(rec)}: part {rec.part} belongs to another pack than part {recs[0].part} "
                              "(other dataset files or options); run it again with the same FOLDER and options as the "
                              "others")
    return [r for rec in recs for r in rec.rows]


def check_shard(where: str, size: int | None, expected: int) -> None:
    """A shard a record lists must be there, at its size, before the manifest names it."""
    if size != expected:
        raise OutputError(f"{where}: {'missing' if size is None else f'{size} bytes'}, part records say {expected} "
                          "bytes; run its part again, then finish again")
