"""The manifest a pack writes last: per split its shards, their sha256s and every sample's index entry (key, size,
offsets, CRC-32s, shared targets, frame lengths), the options that shaped the shards and the pack's notes; the
decode notes and per-split totals go into the `PackReport` on the way."""

from __future__ import annotations

from pathlib import Path

from .. import __version__
from ..format import schema
from ..format import sensor as fmt
from ..format.members import DEFAULT, FIELD, Members
from .jobs import JobResult
from .options import PackOptions, PackReport
from .sensor import CameraPlan
from .shardplan import ShardPlan


def build_manifest(plans: list[ShardPlan], results: list[JobResult], digests: list[str], discovery, raw: Path,
                   options: PackOptions, report: PackReport, members: dict[str, Members] | None = None,
                   camera: CameraPlan | None = None) -> dict:
    """The manifest of the shards `plans` (in the order of the jobs whose `results` they hold); `members`: each
    split's, recorded where not the default; `camera`: the camera raw splits' sensor entries and per-pair
    exposures."""
    members = members or {}
    camera = camera or CameraPlan({}, {}, [])
    splits: dict[str, dict] = {}
    j = 0
    shared = any(lead >= 0 for plan in plans for _, _, lead in plan.samples)
    compressed = options.compress is not None
    for plan, digest in zip(plans, digests):
        entry = splits.setdefault(plan.split, {"samples": 0, "bytes": 0, "min_size": None, "max_size": None,
                                               "folders": discovery.sources.get(plan.split, []),
                                               "pairing": discovery.rules.get(plan.split, []), "shards": []})
        if compressed:
            entry[schema.COMPRESSION] = options.compress
        typed = members.get(plan.split, DEFAULT).to_doc()
        if typed is not None:
            entry[FIELD] = typed
        cam = camera.docs.get(plan.split)
        if cam is not None:
            entry[fmt.FIELD] = cam
        index = {"key": [], "hw": [], "low": [], "high": [], "crc32": []}
        for name in fmt.index_fields(entry):
            index[name] = []
        if compressed:
            index[schema.LOW_BYTES], index[schema.HIGH_BYTES] = [], []
        if shared:
            index[schema.SHARES_HIGH] = []
        for pair, lay, lead in plan.samples:
            res = results[j]
            j += 1
            index["key"].append(lay.key)
            index["hw"].append([lay.height, lay.width])
            index["low"].append(lay.low_data)
            index["high"].append(lay.high_data)
            index["crc32"].append([res.crc_low, res.crc_high if lead < 0 else index["crc32"][lead][1]])
            if compressed:
                index[schema.LOW_BYTES].append(lay.low_bytes)
                index[schema.HIGH_BYTES].append(lay.high_bytes)
            if shared:
                index[schema.SHARES_HIGH].append(lead)
            if cam is not None:
                _sensor_columns(index, camera.exposures[j - 1], res, lead)
            for note in res.notes:
                side, what = note.split(":")
                rel = pair.low_rel if side == "low" else pair.high_rel
                {"gray": report.gray, "alpha": report.alpha, "16bit": report.converted_16bit}[what].append(rel)
            hw = [lay.height, lay.width]
            entry["min_size"] = hw if entry["min_size"] is None else [min(a, b) for a, b in zip(entry["min_size"], hw)]
            entry["max_size"] = hw if entry["max_size"] is None else [max(a, b) for a, b in zip(entry["max_size"], hw)]
        entry["samples"] += len(plan.samples)
        entry["bytes"] += plan.size
        entry["shards"].append({"file": plan.name, "samples": len(plan.samples), "bytes": plan.size, "sha256": digest,
                                "index": index})
    for name, entry in splits.items():
        kinds = members.get(name, DEFAULT)
        pixels = sum(kinds.pair_bytes(h, w) for sh in entry["shards"] for h, w in sh["index"]["hw"])
        report.splits[name] = {"samples": entry["samples"], "shards": len(entry["shards"]), "bytes": entry["bytes"],
                               "pixel_bytes": pixels}
    # versions: 1 without shared targets (readable by every pairload), 2 with them, 3 compressed (older readers
    # refuse it by its version instead of taking the offsets of its frames for offsets of pixels), 4 with a split
    # whose members are not uint8 RGB (older readers would take its pixels for those)
    typed = any(FIELD in entry for entry in splits.values())
    version = (schema.VERSION_TYPED if typed else schema.VERSION_COMPRESSED if compressed else schema.VERSION if shared
               else 1)
    options_doc = {"resize": list(options.resize) if options.resize else None, "max_side": options.max_side,
                   "to_8bit": options.to_8bit, "shard_size": options.shard_size}
    if compressed:
        options_doc.update(compress=options.compress, compress_level=options.compress_level)
    return {
        "format": schema.FORMAT,
        "version": version,
        "created_by": f"pairload {__version__}",
        schema.RAW_DIR: str(raw.resolve()),
        "layout": layout_doc(options.compress, typed),
        "options": options_doc,
        "report": {"gray_replicated": report.gray, "alpha_dropped": report.alpha,
                   "converted_16bit": report.converted_16bit, "skipped_unmatched": report.skipped,
                   "skipped_per_split": discovery.skipped_per_split, "unused": report.unused,
                   "split_folders": report.split_folders},
        "splits": splits,
    }


def _sensor_columns(index: dict, exposure, res: JobResult, lead: int) -> None:
    """One camera raw sample's index entries: its ratio and exposures, its input's levels and (a packed target) its
    target's, which a sample sharing another's target takes from that one."""
    index[fmt.RATIO].append(exposure.ratio)
    index[fmt.EXPOSURE].append([exposure.low_s, exposure.high_s])
    index[fmt.LEVELS].append(list(res.levels))
    if fmt.LEVELS_HIGH in index:
        index[fmt.LEVELS_HIGH].append(list(res.levels_high) if lead < 0 else index[fmt.LEVELS_HIGH][lead])


def layout_doc(compression: str | None, typed: bool = False) -> dict:
    """The manifest's "layout": what the members hold and what the index's offsets point at."""
    doc = {"members": list(schema.member_order(compression)), "dtype": "uint8", "channels": "RGB", "shape": "HxWx3",
           "index_offsets": "byte offset of each array's pixels in its tar"}
    if typed:  # informative only: readers take each split's types from its "members"
        doc.update(dtype=f"per split: its \"{FIELD}\" (uint8 ×3 where absent)", channels=f"per split: its \"{FIELD}\"",
                   shape="HxWxC")
    if compression:
        doc["index_offsets"] = ("byte offset of each image member's data (one zstd frame holding the .npy file) in "
                                f"its tar; index.{schema.LOW_BYTES}/{schema.HIGH_BYTES}: the frame's length")
    return doc
