"""The manifest a pack writes last. Made in two steps, so that the parts of a pack spread over machines give the
bytes one machine would: `skeleton` (before any shard is written: the options, the discovery's report and each
split's fixed fields, the same in every part) and `assemble` (once every shard is done: each split's shards and its
index, in the manifest (versions 1-4) or in a binary `<split>.index` file (version 5), and the decode notes)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import __version__
from ..format import binindex, schema
from ..format import sensor as fmt
from ..format.sequences import Sequences, into_index
from ..format.columns import Pieces
from ..format.sizes import size_counts
from ..format.encoding import RAW, Encoding
from ..audit.measures import VERSION as MEASURES
from ..format.facts import NAMES as FACT_NAMES
from ..format.imageformats import JPEG
from ..format.members import DEFAULT, FIELD, Members, members_of
from .options import INDEXES, PackOptions, PackReport
from .encoded import DECODED, KEPT, TILED
from .rows import NOTES, ShardRows, joined_keys
from .spill import column_spec
from .sensor import CameraPlan

BINARY, JSON = INDEXES  # --index: where the per-sample index goes
FACT = FACT_NAMES[0]  # a shard's rows that have this column have every fact (`format.facts`)


def skeleton(discovery, raw, options: PackOptions, members: dict[str, Members] | None = None,
             camera: CameraPlan | None = None, sequences: dict[str, Sequences] | None = None,
             misaligned: list[dict] | None = None) -> dict:
    """The manifest without its shards, index and decode notes: what every part of a pack computes alike.
    `sequences`: each split's, packed with --sequences (its "sequences" and "sequence_target" fields); `misaligned`:
    the pairs `--skip-misaligned` left out (the report's "misaligned")."""
    members = members or {}
    sequences = sequences or {}
    camera = camera or CameraPlan({}, {}, [])
    stored = options.encoding.stored  # the split field's value (None: raw members, left out)
    splits = {}
    for split in sorted({p.split for p in discovery.pairs}):
        entry = {"folders": discovery.sources.get(split, []), "pairing": discovery.rules.get(split, [])}
        if options.targets_only:
            entry[schema.TARGETS_ONLY] = True
        if stored is not None:
            entry[options.encoding.field] = stored
        typed = members.get(split, DEFAULT).to_doc()
        if typed is not None:
            entry[FIELD] = typed
        if camera.docs.get(split) is not None:
            entry[fmt.FIELD] = camera.docs[split]
        if split in sequences:
            entry.update(sequences[split].to_entry())
        splits[split] = entry
    options_doc = {"resize": list(options.resize) if options.resize else None, "max_side": options.max_side,
                   "to_8bit": options.to_8bit, "shard_size": options.shard_size}
    if options.encoding.per_member:
        options_doc.update(store=stored)
    elif stored is not None:
        options_doc.update(compress=stored, compress_level=options.compress_level)
    if options.targets_only:  # (absent otherwise: a pair pack's manifest stays the bytes it was)
        options_doc.update(targets_only=True, fit=options.fit)
    options_doc.update((k, True) for k in ("sequences", "npy_bgr") if getattr(options, k))  # likewise
    if options.max_shift is not None:  # what pack refuses (`pack.trust` reads them back, finishing a pack's parts)
        options_doc.update(max_shift=options.max_shift, skip_misaligned=options.skip_misaligned)
    if options.allow_bright_inputs:
        options_doc.update(allow_bright_inputs=True)
    report = {"skipped_unmatched": discovery.skipped_low + discovery.skipped_high,
              "skipped_per_split": discovery.skipped_per_split,
              "unused": [u.as_dict() for u in discovery.unused],
              "split_folders": {k: {"split": v[0], "how": v[1]} for k, v in sorted(discovery.split_folders.items())}}
    if options.skip_misaligned:
        report["misaligned"] = list(misaligned or [])
    return {
        "created_by": f"pairload {__version__}",
        schema.RAW_DIR: str(raw.resolve()),
        "options": options_doc,
        "report": report,
        "splits": splits,
    }


def assemble(skel: dict, rows: list[ShardRows], report: PackReport, index: str = BINARY,
             write_index: Callable[[str, dict[str, np.ndarray]], tuple[str, int]] | None = None) -> dict:
    """The manifest of the shards `rows` (in shard order, every part's), with the skeleton's fixed fields;
    `write_index(file name, columns)` writes a split's binary index and returns its sha256 and size. Fills the
    report's per-split totals and decode notes on the way."""
    kinds = {split: members_of(entry, "manifest", split) for split, entry in skel["splits"].items()}
    encoding = next((m.encoding for m in kinds.values() if not m.encoding.plain), RAW)  # one per pack
    shared = any(bool((r.columns["shares_high"] >= 0).any()) for r in rows)
    facts = bool(rows) and all(FACT in r.columns for r in rows)  # (records of an older part have none)
    typed = any(FIELD in entry for entry in skel["splits"].values())
    targets = any(entry.get(schema.TARGETS_ONLY) for entry in skel["splits"].values())
    notes: dict[str, list[str]] = {v: [] for v in NOTES.values()}
    # an encoded pack: the images stored as tiles, by what their files were, and as pixels, by reason
    stored: dict[str, dict[str, list[str]]] = {TILED: {}, DECODED: {}, KEPT: {}}
    splits: dict[str, dict] = {}
    by_split: dict[str, list[ShardRows]] = {}
    for r in rows:
        by_split.setdefault(r.split, []).append(r)
        for rel, what in r.notes:
            how = next((prefix for prefix in stored if what.startswith(prefix)), None)
            if how is not None:
                stored[how].setdefault(what[len(how):], []).append(rel)
            else:
                notes[NOTES[what]].append(rel)
    for split, fixed in skel["splits"].items():
        parts = by_split.get(split, [])
        sizes, counts = _sizes(parts)  # each size stored, and how many samples have it
        entry = {"samples": int(counts.sum()), "bytes": sum(r.bytes for r in parts),
                 "min_size": sizes.min(axis=0).tolist() if len(sizes) else None,
                 "max_size": sizes.max(axis=0).tolist() if len(sizes) else None}
        entry.update((k, v) for k, v in fixed.items())
        if facts:
            entry[schema.MEASURES] = MEASURES  # which definition of the facts the index holds (`audit.measures`)
        entry["shards"] = [{"file": r.name, "samples": r.samples, "bytes": r.bytes, "sha256": r.sha256} for r in parts]
        if index == JSON:
            for sh, r in zip(entry["shards"], parts):
                sh["index"] = _json_index(r, entry, kinds[split].encoding.sized, shared)
        else:
            sized, formats = kinds[split].encoding.sized, kinds[split].encoding.per_member
            if parts and binindex.TILES_AT[0] in parts[0].columns:  # (every shard's rows alike: `Inputs.tiles_kept`)
                entry[binindex.TILE_STARTS] = int(column_spec(parts[0].columns, binindex.TILES_AT[0])[1][1])
            names = [f for f, _, _ in binindex.spec(entry, sized, shared, formats, facts)]
            columns = {name: _joined(parts, name) for name in names
                       if name not in (binindex.KEY_END, binindex.KEY_HASH, binindex.SHARD)}
            columns[binindex.SHARD] = np.repeat(np.arange(len(parts), dtype=np.int32), [r.samples for r in parts])
            keys = joined_keys(parts)
            name = binindex.index_name(split)
            cols = binindex.index_columns(keys, columns, entry, sized, shared, formats, facts)
            cols.update(into_index(entry, f"split {split!r}"))  # a --sequences split's table, beside its samples
            sha, size = write_index(name, cols)
            entry[binindex.FIELD] = {"file": name, "bytes": size, "sha256": sha}
        splits[split] = entry
        m = kinds[split]
        pixels = sum(count * (h * w * m.high.pixel_bytes if fixed.get(schema.TARGETS_ONLY) else m.pair_bytes(h, w))
                     for (h, w), count in zip(sizes.tolist(), counts.tolist()))  # a targets-only sample: one image
        report.splits[split] = {"samples": entry["samples"], "shards": len(parts), "bytes": entry["bytes"],
                                "pixel_bytes": pixels}
    report.gray, report.alpha, report.converted_16bit = notes["gray"], notes["alpha"], notes["converted_16bit"]
    report.kept = _kept(rows, targets) if encoding.per_member else 0
    report.tiled, report.decoded, report.kept_notes = stored[TILED], stored[DECODED], stored[KEPT]
    # versions: 1 without shared targets (readable by every pairload), 2 with them, 3 not plain (older readers
    # refuse it by its version instead of taking the offsets of its frames for offsets of pixels), 4 with a split
    # whose members are not uint8 RGB (older readers would take its pixels for those), 5 with the index in binary
    # files (older readers find no index in the manifest), 6 with a targets-only split (older readers would train on
    # (target, target) pairs; always a binary index), 7 with an encoded split (older readers would take a JPEG's
    # or tiles' bytes for pixels)
    version = (schema.VERSION_ENCODED if encoding.per_member else schema.VERSION_TARGETS if targets else
               schema.VERSION_BINARY if index == BINARY else schema.VERSION_TYPED if typed else
               schema.VERSION_COMPRESSED if not encoding.plain else schema.VERSION if shared else 1)
    top = {k: v for k, v in skel.items() if k != "splits"}
    doc_report = {"gray_replicated": notes["gray"], "alpha_dropped": notes["alpha"],
                  "converted_16bit": notes["converted_16bit"]}
    doc_report.update(top.pop("report"))
    if encoding.per_member:  # (absent otherwise: a decoded pack's manifest stays the bytes it was)
        doc_report.update(kept_jpeg=report.kept, stored_tiles=report.tiled, stored_decoded=report.decoded)
        if report.kept_notes:  # (absent where there is nothing to say: older readers' keys stay as they were)
            doc_report.update(kept_jpeg_notes=report.kept_notes)
    return {"format": schema.FORMAT, "version": version, **{k: top[k] for k in ("created_by", schema.RAW_DIR)},
            "layout": layout_doc(encoding, typed, targets), "options": top["options"], "report": doc_report,
            "splits": splits}


def _sizes(parts: list[ShardRows]) -> tuple[np.ndarray, np.ndarray]:
    """The sizes (h, w) the samples of `parts` are stored at, each once, and how many samples have each."""
    found = [size_counts(r.columns["hw"]) for r in parts if r.samples]
    if not found:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.int64)
    sizes = np.concatenate([s for s, _, _ in found])
    counts = np.concatenate([c for _, c, _ in found])
    sizes, back = np.unique(sizes, axis=0, return_inverse=True)  # a few rows a part
    return sizes, np.bincount(back.reshape(-1), weights=counts, minlength=len(sizes)).astype(np.int64)


def _joined(parts: list[ShardRows], name: str) -> Pieces:
    """One column of `parts`, one after the other, read shard by shard as the index is written (never joined in
    memory: a pack's rows may be far larger than one shard's)."""
    specs = [column_spec(r.columns, name) for r in parts]
    dtype = np.result_type(*(d for d, _ in specs)) if specs else np.dtype(np.int64)
    n = sum(shape[0] for _, shape in specs)
    trailing = specs[0][1][1:] if specs else ()
    return Pieces(dtype, (n, *trailing), lambda: (r.columns[name] for r in parts))


def _kept(rows: list[ShardRows], targets_only: bool) -> int:
    """The JPEG files an encoded pack kept as they are: each stored member of the jpeg format (a targets-only
    sample's input is its target, a shared target is stored once)."""
    kept = 0
    for r in rows:
        c = r.columns
        kept += int(((c["high_kind"] == JPEG.code) & (c["shares_high"] < 0)).sum())
        kept += 0 if targets_only else int((c["low_kind"] == JPEG.code).sum())
    return kept


def _json_index(r: ShardRows, entry: dict, sized: bool, shared: bool) -> dict:
    """One shard's index as versions 1-4 keep it in the manifest."""
    c = r.columns
    index = {"key": list(r.keys), "hw": c["hw"].tolist(), "low": c["low"].tolist(), "high": c["high"].tolist(),
             "crc32": c["crc32"].tolist()}
    for name in fmt.index_fields(entry):
        index[name] = c[name].tolist()
    if sized:
        index[schema.LOW_BYTES], index[schema.HIGH_BYTES] = c["low_bytes"].tolist(), c["high_bytes"].tolist()
    if shared:
        index[schema.SHARES_HIGH] = c["shares_high"].tolist()
    if FACT in c:  # older readers pass over fields they do not know
        index.update((name, c[name].tolist()) for name in FACT_NAMES)
    return index


def layout_doc(encoding: Encoding = RAW, typed: bool = False, targets_only: bool = False) -> dict:
    """The manifest's "layout": what the members hold and what the index's offsets point at."""
    doc = {"members": list(schema.member_order(encoding, targets_only)), "dtype": "uint8", "channels": "RGB",
           "shape": "HxWx3", "index_offsets": encoding.offsets_doc}
    if targets_only:
        doc["targets_only"] = "no input member: the index's low offsets are its high offsets (the target is the input)"
    if typed:  # informative only: readers take each split's types from its "members"
        doc.update(dtype=f"per split: its \"{FIELD}\" (uint8 ×3 where absent)", channels=f"per split: its \"{FIELD}\"",
                   shape="HxWxC")
    return doc
