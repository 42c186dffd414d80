"""What a shard folder or URL holds, from its manifest (and a version-5 split's index file): `read_manifest_at`
(the checked manifest), `info` (per split: samples, shards, bytes, compression or store, an encoded split's member
formats, image sizes, the index file, the sequences, the shifts and brightness pack measured) and `size_histogram`
(a split's image sizes as text)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np

from ..audit.packing import SHIFTED_PX, exposure_stats, shift_stats
from ..format import binindex, imageformats, schema
from ..format.sequences import GAPS
from ..format.sizes import size_counts
from ..remote import urls
from ..units import human_bytes


def read_manifest_at(source: str | os.PathLike, storage_options: dict | None = None) -> dict:
    """The checked manifest of a shard folder or URL."""
    if urls.is_url(source):
        from ..remote.cache import read_object

        manifest_url = urls.join(str(source).rstrip("/"), schema.MANIFEST)
        return schema.parse_manifest(read_object(manifest_url, storage_options), urls.redact(manifest_url))
    return schema.read_manifest(urls.local_path(source))


@contextlib.contextmanager
def index_files_at(source: str | os.PathLike, storage_options: dict | None = None):
    """Where `schema.split_index` finds a version-5 split's index file: the local folder, or (a URL, read without a
    node cache) each one downloaded into a temporary folder removed on exit (a mapped file stays readable)."""
    if not urls.is_url(source):
        yield urls.local_path(source)
        return
    from ..remote.cache import read_object

    with tempfile.TemporaryDirectory(prefix="pairload-index-") as tmp:
        def locate(name: str, sha: str, size: int) -> tuple[Path, str]:
            url = urls.join(str(source).rstrip("/"), name)
            path = Path(tmp) / name
            path.write_bytes(read_object(url, storage_options))  # checked against the manifest by the caller
            return path, urls.redact(url)

        yield locate


def info(shards_dir: str | os.PathLike, *, storage_options: dict | None = None) -> dict[str, dict]:
    """Per split: samples, shards, bytes, compression ("zstd", "encoded" or "none") and the bytes of its pixels
    decoded, an encoded split's member formats (`formats`: per format, its members, their bytes and bytes per pair), the
    distinct image sizes, and (version 5) its index file's bytes, per pair too; a split packed with --sequences, its
    sequences (`_sequences`: count, fewest and most frames, target per "frame" or "sequence", the first few by name,
    breaks in their frame numbering); a targets-only split says so
    (`"targets_only": true`, and its "members" begin "targets only"). A URL: read from its manifest (and
    index files) alone."""
    doc = read_manifest_at(shards_dir, storage_options)
    out = {}
    with index_files_at(shards_dir, storage_options) as index_at:
        for split, entry in doc["splits"].items():
            idx = schema.split_index(doc, split, index_at=index_at)
            sizes, counts, pixels = size_counts(idx.hw)
            m = idx.members
            # a targets-only split stores one image per sample: its input is that image, not a second one
            per_pixel = m.high.pixel_bytes if idx.targets_only else m.bytes_per_input_pixel
            out[split] = {
                "samples": len(idx),
                "shards": len(idx.files),
                "bytes": int(sum(sh["bytes"] for sh in entry["shards"])),
                "compression": idx.encoding.stored or "none",
                "pixel_bytes": pixels * per_pixel,
                **({"targets_only": True, "members": f"targets only: {m.high.describe()}"} if idx.targets_only else
                   {"members": m.describe()} if not m.default else {}),
                **({"sensor": _sensor(entry, idx.sensor)} if idx.sensor is not None else {}),
                **({"store": "encoded", "formats": formats(idx)} if idx.encoding.per_member else {}),
                "sizes": {f"{w}x{h}": int(c) for (h, w), c in zip(sizes.tolist(), counts.tolist())},
                **({"index": _index(entry[binindex.FIELD], len(idx))} if idx.mapped is not None else {}),
                **({"sequences": _sequences(idx.sequences, idx.keys, split)} if idx.sequences is not None else {}),
                **_facts(idx),
            }
    return out


def _facts(idx: schema.SplitIndex) -> dict:
    """What pack measured of a split's pairs (`audit.packing`): its shifts (`"shift"`: median, 95th percentile and
    largest in pixels, pairs shifted by 1 px or more, pairs measured confidently) and its brightness (`"exposure"`:
    median, least and most luma per side, inputs brighter than their targets, the keys of targets far darker than
    the others); nothing for a pack that predates them, brightness not for camera raw counts."""
    facts = idx.facts
    if facts is None:
        return {}
    out = {} if idx.targets_only else {"shift": shift_stats(facts)}
    if idx.sensor is None:
        exposure = exposure_stats(facts, idx.shares_high < 0 if idx.shares_high is not None else None)
        if "dark_targets" in exposure:
            exposure["dark_targets"] = [idx.keys[k] for k in exposure["dark_targets"]]
        if idx.targets_only:  # each input is its target
            exposure = {k: v for k, v in exposure.items() if k not in ("input", "brighter_inputs", "differing")}
        out["exposure"] = exposure
    return out


def checks_line(split: str, s: dict) -> str | None:
    """`info`'s line of what pack measured of a split: 'train: shift median 0.1 px, 95th percentile 0.4 px, largest
    4.1 px; 3 of 485 pairs shifted by 1 px or more; luma of the inputs 0.06 (0.01-0.31), of the targets 0.45
    (0.04-0.81); 0 of the 485 pairs whose sides differ clearly in brightness have the brighter image as input; …'
    (None for a pack that predates them)."""
    said = []
    q = s.get("shift")
    if q is not None:
        if q["measured"]:
            said.append(f"shift median {q['median']:g} px, 95th percentile {q['p95']:g} px, largest {q['max']:g} px; "
                        f"{q['shifted']} of {q['pairs']} pairs shifted by {SHIFTED_PX:g} px or more")
        if q["measured"] < q["pairs"]:
            said.append(f"{q['pairs'] - q['measured']} pair(s) without a confident shift estimate")
    e = s.get("exposure")
    if e is not None:
        sides = [f"of the {name}s {e[name]['median']:.2f} ({e[name]['min']:.2f}-{e[name]['max']:.2f})"
                 for name in ("input", "target") if name in e]
        if sides:
            said.append("luma " + ", ".join(sides))
        if "brighter_inputs" in e:
            said.append(f"{e['brighter_inputs']} of the {e['differing']} pairs whose sides differ clearly in "
                        "brightness have the brighter image as input")
        if "dark_targets" in e:
            keys = e["dark_targets"]
            said.append(f"{len(keys)} target(s) far darker than the others (luma under {e['dark_below']:g}): "
                        f"{', '.join(keys[:10])}{' …' if len(keys) > 10 else ''}")
    return f"{split}: " + "; ".join(said) if said else None


def formats(idx: schema.SplitIndex) -> dict[str, dict]:
    """An encoded split's stored image members by format, most bytes first: {"jpeg": {"members": 4980, "bytes": …,
    "bytes_per_pair": …}, "tiles": {…}, "npy": {…}} (a shared target counted once, a targets-only sample's input not at
    all)."""
    own = idx.shares_high < 0 if idx.shares_high is not None else slice(None)
    sides = [(idx.high_kind[own], idx.high_bytes[own])] + ([] if idx.targets_only else [(idx.low_kind, idx.low_bytes)])
    out = {}
    for fmt in imageformats.FORMATS.values():
        count = sum(int((kind == fmt.code).sum()) for kind, _ in sides)
        nbytes = sum(int(length[kind == fmt.code].sum()) for kind, length in sides)
        if count:
            out[fmt.name] = {"members": count, "bytes": nbytes, "bytes_per_pair": round(nbytes / max(len(idx), 1), 1)}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["bytes"]))


def formats_cell(found: dict[str, dict]) -> str:
    """`info`'s formats of an encoded split in a table cell: '4,980 jpeg (61.2 KB a pair), 20 tiles (1.4 KB a pair),
    1 npy (0.1 KB a pair)'."""
    return ", ".join(f"{f['members']:,} {name} ({human_bytes(f['bytes_per_pair'])} a pair)"
                     for name, f in found.items())


def _index(ref: dict, samples: int) -> dict:
    """A version-5 split's index file: its name, bytes, and bytes per pair."""
    return {"file": ref["file"], "bytes": ref["bytes"], "bytes_per_pair": round(ref["bytes"] / max(samples, 1), 1)}


SEQUENCES_LISTED = 5  # sequences named by `info`, with their frames; a pack may hold thousands


def _sequences(seqs, keys, split: str) -> dict:
    """A split packed with --sequences: how many sequences, the fewest and most frames of one, whether each frame
    has its own target ("frame") or the frames of a sequence share one ("sequence"), the first `SEQUENCES_LISTED`
    sequences {name: frames}, what the pack did with breaks in their frame numbering ("sequence_gaps": "split" or
    "allow", where the pack was told; not the default "refuse") and, where a sequence's numbering breaks, a line
    saying where ("gaps")."""
    # a pack that refused breaks, or split its sequences at them, left none inside one: its keys are not read
    gaps = seqs.gap_report(keys, f"split {split!r}") if seqs.gaps in (None, "allow") else None
    listed = np.arange(min(len(seqs), SEQUENCES_LISTED), dtype=np.int64)
    return {"count": len(seqs), "frames": list(seqs.bounds), "target": seqs.target,
            "first": {seqs.names[s]: int(n) for s, n in zip(listed.tolist(), seqs.count_of(listed).tolist())},
            **({GAPS: seqs.gaps} if seqs.gaps not in (None, "refuse") else {}), **({"gaps": gaps} if gaps else {})}


def sequences_cell(q: dict) -> str:
    """`info`'s sequences of a split in a table cell: '3 of 3-4 frames, target per frame: pair1 (3), pair10 (3),
    pair2 (4)', the rest counted, and what the pack was told to do with breaks in their frame numbering (the breaks
    found inside sequences are `q["gaps"]`, a line of its own)."""
    low, high = q["frames"]
    listed = ", ".join(f"{name} ({n})" for name, n in q["first"].items())
    more = f", … and {q['count'] - len(q['first'])} more" if q["count"] > len(q["first"]) else ""
    policy = f"; packed with --sequence-gaps {q[GAPS]}" if GAPS in q else ""
    return f"{q['count']} of {low}-{high} frames, target per {q['target']}: {listed}{more}{policy}"


def _sensor(entry: dict, rows) -> str:
    """A camera raw split in a line: cameras, CFA patterns, the target's kind and the range of ratios."""
    doc = entry["sensor"]
    low, high = float(rows.ratio.min()), float(rows.ratio.max())
    ratios = f"ratio {low:g}" + (f" to {high:g}" if high > low else "")
    return (f"camera raw from {', '.join(doc['low'].get('cameras', []))} ({'/'.join(doc['low'].get('patterns', []))}), "
            f"target {doc['high']['kind']}, {ratios}")


def size_histogram(split: str, entry: dict, *, width: int = 40, top: int = 20) -> list[str]:
    """A split's image sizes as text lines (`info`'s entry for it): a heading, then one line per size, most pairs
    first, 'WxH  bar  pairs' with bars of up to `width` characters; past `top` sizes, one line sums the rest."""
    sizes = sorted(entry["sizes"].items(), key=lambda kv: (-kv[1], kv[0]))
    shown, rest = sizes[:top], sizes[top:]
    most = max((c for _, c in sizes), default=1)
    pad = max((len(s) for s, _ in shown), default=0)
    digits = len(str(most))
    lines = [f"{split}: {entry['samples']} pairs, {len(sizes)} size{'s' if len(sizes) != 1 else ''} (WxH of the "
             "inputs: pairs)"]
    for size, count in shown:
        bar = "#" * max(1, round(width * count / most))
        lines.append(f"  {size:>{pad}}  {bar:<{width}}  {count:>{digits}}")
    if rest:
        lines.append(f"  ... and {len(rest)} other sizes: {sum(c for _, c in rest)} pairs")
    return lines
