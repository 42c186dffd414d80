"""`pairload pack RAW URL --part I/N`: a pack made in parts straight into a bucket (any writable fsspec URL), the
bytes of a one-machine pack.

Each part packs its own shards into its own local staging folder (`parts`: every part plans the whole pack alike),
then, at the destination: refuses the claims of another pack found there (other RAW, options or N), records the
files of the pack it replaces (`.pairload-parts-replaced.json`, before that pack's manifest goes), puts its shards
(a shard already there with the same size and sha256 is skipped), its record (`.pairload-part-I-of-N.record`) and,
last, its claim (`.pairload-part-I-of-N.json`: the plan's fingerprint). A part that then finds every claim there
(the last to finish, or `pairload pack --finish URL`) reads the records, checks every listed shard is there at its
size, puts the index files, deletes the replaced pack's files that are no longer listed, puts the manifest last,
and removes the records and claims. Two parts finishing at the same moment put the same bytes."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
from pathlib import Path
from typing import Callable

from ..errors import OutputError
from ..format import binindex, schema
from ..format.atomic import write_bytes_atomic, write_json_atomic
from . import guard, parts, trust
from .local import index_writer, pack_folder
from .manifest import assemble
from .options import PackOptions, PackReport
from .parts import Part
from .upload import Destination, Session, default_staging, refuse_read_only, remove_staging, staging_lock

CLAIM = re.compile(r"^\.pairload-part-(\d{4})-of-(\d{4})\.json$")
REPLACED = ".pairload-parts-replaced.json"


def claim_name(part: Part) -> str:
    return f".pairload-part-{part.index:04d}-of-{part.count:04d}.json"


def pack_part_to_url(raw_dir, url: str, options: PackOptions, on_progress: Callable[[int, int], None] | None, *,
                     part: Part, staging=None, storage_options: dict | None = None, keep_staging: bool = True,
                     on_upload: Callable[[str, str], None] | None = None) -> PackReport:
    """Part `part` of the pack of `raw_dir` into `url` (see the module doc); the report says whether this part
    wrote the manifest (`finished`) or which parts it waits for."""
    start = time.perf_counter()
    refuse_read_only(url)
    raw = Path(raw_dir)
    folder = Path(staging) if staging is not None else default_staging(f"{url.rstrip('/')}#{part.record}")
    guard.check_output_outside_raw(raw, folder)
    folder.mkdir(parents=True, exist_ok=True)
    with staging_lock(folder):
        session = Session(url, storage_options, raw, folder, options.overwrite, on_upload)
        try:
            session.start()  # the destination checked, and another RAW's manifest refused, before any decode
            local = dataclasses.replace(options, overwrite=True) if staging is None else options
            if staging is None:  # pairload's own staging folder of this part: an earlier try's record is stale (its
                for old in folder.glob(".pairload-part-*.record"):  # journal stays: it names a killed try's partials)
                    old.unlink(missing_ok=True)
            report = pack_folder(raw, folder, local, on_progress, part=part)
            rec = parts.read_record(folder / part.record)
            dest = session.dest
            _refuse_other_packs(dest, part, rec.fingerprint)
            if session.old_manifest is not None and dest.read(REPLACED) is None:
                _put_bytes(dest, folder, REPLACED, json.dumps(sorted(session.ledger.owned)).encode())
            for r in rec.rows:  # the upload thread retires the old manifest before the first shard it changes
                session.submit(r.name, str(folder / r.name), r.sha256, r.bytes)
            session.wait()
            dest.put(str(folder / part.record), part.record, (folder / part.record).stat().st_size)
            _put_bytes(dest, folder, claim_name(part), json.dumps({"fingerprint": rec.fingerprint}).encode())
            report.finished = finish_at_url(dest, part.count, report, folder, owned=session.ledger.owned,
                                            required=False)
        finally:
            session.stop()
    report.url, report.upload = session.report.url, session.report
    if not keep_staging:  # what this part wrote there, as a one-machine upload removes its own
        remove_staging(folder, [r.name for r in rec.rows] + [part.record, f"{part.record}.lock", part.journal,
                                                             claim_name(part), REPLACED, guard.FINISH_LOCK])
        session.report.kept = False
    report.seconds = time.perf_counter() - start
    return report


def finish_url(url: str, count: int | None, storage_options: dict | None = None, staging=None) -> PackReport:
    """`pairload pack --finish URL`: write the manifest of a pack made in parts into `url` once every part's claim
    and record are there; refused naming the missing parts before."""
    refuse_read_only(url)
    dest = Destination(url, storage_options)
    dest.check()
    folder = Path(staging) if staging is not None else default_staging(f"{url.rstrip('/')}#finish")
    folder.mkdir(parents=True, exist_ok=True)
    report = PackReport(shards_dir=folder, workers=0)
    with staging_lock(folder):
        report.finished = finish_at_url(dest, count, report, folder, owned=set(), required=True)
    report.url = dest.where()
    return report


def _claims(dest: Destination) -> dict[Part, str]:
    """{part: its plan's fingerprint} of every claim at the destination."""
    found = {}
    for name in dest.names():
        m = CLAIM.match(name)
        if m:
            try:
                doc = json.loads(dest.read(name) or b"{}")
            except ValueError:
                doc = {}
            found[Part(int(m.group(1)), int(m.group(2)))] = str(doc.get("fingerprint"))
    return found


def _refuse_other_packs(dest: Destination, part: Part, fingerprint: str) -> None:
    """Before a part puts anything: the claims there must be of this pack (same plan, same N)."""
    for other, theirs in sorted(_claims(dest).items(), key=lambda kv: (kv[0].count, kv[0].index)):
        if other.count != part.count or theirs != fingerprint:
            why = (f"of a pack in {other.count} parts, and this is part {part}" if other.count != part.count else
                   "of another pack (other dataset files, options or pairload version)")
            raise OutputError(f"{dest.where(claim_name(other))}: part {other} {why}; run every part with the same "
                              "FOLDER, options and N, or delete the .pairload-part-* objects of the other pack (or "
                              "pack into another URL)")


def finish_at_url(dest: Destination, count: int | None, report: PackReport, folder: Path, *, owned: set[str],
                  required: bool) -> bool:
    """Write the manifest at the destination if every part's claim is there (see the module doc); False while a
    part is missing (refused naming it when `required`), or when another part finished it meanwhile. `owned`: files
    of the replaced pack this process knows of, besides those recorded at the destination."""
    claims = _claims(dest)
    where = dest.where()
    count = parts.choose_count(set(claims), count, where)
    gone = [i for i in range(count) if Part(i, count) not in claims]
    if gone:
        if required:
            raise OutputError(parts.missing_message(where, gone, count))
        report.waiting = gone
        return False
    work = folder / ".finish"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    recs = []
    for i in range(count):
        name = Part(i, count).record
        data = dest.read(name)
        if data is None:  # another part is finishing and has removed the records: it writes the same manifest
            report.waiting = []
            return False
        write_bytes_atomic(work / name, data, fsync=False)
        recs.append(parts.read_record(work / name))
    rows = parts.one_pack(recs, lambda rec: dest.where(rec.part.record))
    for r in rows:
        parts.check_shard(dest.where(r.name), dest.size(r.name), r.bytes)
    skel = dict(recs[0].skeleton)
    index = skel.pop("index")
    report.trust = trust.check_pack(skel, rows)  # refused: the parts stay, for a pack made again
    report.waiting = []
    manifest = assemble(skel, rows, report, index, index_writer(work))
    write_json_atomic(work / schema.MANIFEST, manifest)
    files = binindex.pack_files(manifest)
    keep = {f["file"] for f in files}
    for f in files:
        if binindex.is_index_name(f["file"]):
            dest.put(str(work / f["file"]), f["file"], f["bytes"])
    replaced = set(owned)
    try:
        replaced |= set(json.loads(dest.read(REPLACED) or b"[]"))
    except ValueError:
        pass
    for name in sorted(replaced - keep):
        if schema.is_shard_name(name) or binindex.is_index_name(name):
            dest.remove(name)
    dest.put(str(work / schema.MANIFEST), schema.MANIFEST, (work / schema.MANIFEST).stat().st_size)
    for i in range(count):
        dest.remove(Part(i, count).record)
        dest.remove(claim_name(Part(i, count)))
    dest.remove(REPLACED)
    shutil.rmtree(work, ignore_errors=True)
    return True


def _put_bytes(dest: Destination, folder: Path, name: str, data: bytes) -> None:
    local = folder / name
    write_bytes_atomic(local, data, fsync=False)
    dest.put(str(local), name, len(data))
