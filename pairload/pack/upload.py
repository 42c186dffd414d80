"""`pairload pack RAW URL`: pack into a local staging folder, upload each shard as soon as it is finished, and the
manifest last, so that a reader never sees a manifest whose shards are missing.

The staging folder is an ordinary local pack (same journal, same resume, same refusals). Beside it, the ledger
`.pairload-upload.json` records what a re-run needs: the stamp of the dataset folder and options the staging pack is
complete for (a re-run with the same stamp uploads the staged shards without decoding anything), and what is known to
be at the destination: per shard object its bytes and sha256 (read from the manifest found there, or uploaded by
pack), and the shard objects pack may replace or delete. A shard already at the destination is skipped when its size
(fs.info) and its recorded sha256 match the new shard; any other is uploaded. The manifest found at the destination
is deleted before the first shard is replaced (at once when `--overwrite` replaces another pack's manifest), shards
no longer listed are deleted, and the new manifest is put last.

Every remote operation goes through fsspec (`pairload.remote.urls.filesystem`); backend errors become one-line
OutputErrors naming the URL and what to check. Credentials come from the backend's usual places or
`storage_options`, and are never printed. Imports neither torch nor DALI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import queue
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import OutputError, PairloadError
from ..format import binindex, schema
from ..format.stamps import stamp
from ..format.atomic import write_json_atomic
from ..remote import schemes
from ..remote.urls import filesystem, redact, scheme
from . import guard
from .local import pack_folder
from .options import PackOptions, PackReport, UploadReport

LEDGER = ".pairload-upload.json"
LOCK = ".pairload-upload.lock"
# How each scheme is written (read-only; an object store, whose objects appear only once complete; or a file system,
# written under a temporary name and moved into place) is `pairload.remote.schemes`' table: `Scheme.writable`,
# `Scheme.object_store`.
_TEMP = re.compile(r"^\.(?P<target>.+)\.\d+\.upload$")


def default_staging(url: str) -> Path:
    """The staging folder of `url` when none is given: under the system temp folder, named after a hash of the URL,
    so that a re-run of the same command finds it again."""
    digest = hashlib.sha256(url.rstrip("/").encode("utf-8")).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"pairload-staging-{digest}"


def pack_to_url(raw_dir: str | os.PathLike, url: str, options: PackOptions = PackOptions(),
                on_progress: Callable[[int, int], None] | None = None, *, staging: str | os.PathLike | None = None,
                storage_options: dict | None = None, keep_staging: bool = True,
                on_upload: Callable[[str, str], None] | None = None) -> PackReport:
    """Pack `raw_dir` into `staging` (default: `default_staging(url)`) and upload it to `url`; see the module doc."""
    start = time.perf_counter()
    refuse_read_only(url)
    raw = Path(raw_dir)
    folder = Path(staging) if staging is not None else default_staging(url)
    guard.check_output_outside_raw(raw, folder)
    folder.mkdir(parents=True, exist_ok=True)
    with staging_lock(folder):
        session = Session(url, storage_options, raw, folder, options.overwrite, on_upload)
        try:
            report = _stage_and_upload(session, raw, folder, options, on_progress, own_folder=staging is None)
        finally:
            session.stop()
    upload = session.report
    if not keep_staging:
        remove_staging(folder)
        upload.kept = False
    report.url, report.upload = upload.url, upload
    report.seconds = time.perf_counter() - start
    return report


def _stage_and_upload(session: "Session", raw: Path, folder: Path, options: PackOptions, on_progress,
                      own_folder: bool) -> PackReport:
    ledger = session.ledger
    stamp = _stamp(raw, options)
    doc = _staged(folder, ledger, stamp)
    if doc is None:
        ledger.set_pack(None)  # the staging pack is about to change
        # the default staging folder is pairload's own cache of this URL: a pack of another RAW there is replaced
        local = dataclasses.replace(options, overwrite=True) if own_folder else options
        try:
            report = pack_folder(raw, folder, local, on_progress, on_start=session.start,
                                        on_shard=session.submit)
        except OutputError as exc:  # a full disk under the default staging folder: say how to pick another
            if own_folder and str(exc).startswith(str(folder)) and "disk" in str(exc):
                raise OutputError(f"{exc} (this is the staging folder of {session.report.url}; pick one on a larger "
                                  "disk with --staging DIR)") from None
            raise
        ledger.set_pack(stamp)
        doc = schema.read_manifest(folder)
    else:
        session.start()
        session.report.reused = True
        report = _report_from_manifest(doc, folder)
    session.finish(doc)
    return report


# ------------------------------------------------------------------ the destination

def refuse_read_only(url: str) -> None:
    if not schemes.lookup(scheme(url)).writable:
        raise OutputError(f"{redact(url)}: an HTTP(S) URL is read-only, `pairload pack` cannot write there; pack into "
                          "a local folder or a bucket and serve that folder")


class _LocalGone(Exception):
    """The local file being uploaded was renamed before it was opened (a partial shard that became a shard)."""


class Destination:
    """The folder at `url`, through its fsspec filesystem, with every backend error turned into an OutputError."""

    def __init__(self, url: str, storage_options: dict | None):
        self.shown = redact(url.rstrip("/"))
        self.fs, path = filesystem(url, storage_options)
        self.root = path.rstrip("/")
        protocols = {self.fs.protocol} if isinstance(self.fs.protocol, str) else set(self.fs.protocol)
        # an object store by the URL's scheme or by the backend's protocols (a scheme fsspec maps to an object store)
        self.atomic = any(schemes.lookup(p).object_store for p in (scheme(url), *protocols))

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def where(self, name: str | None = None) -> str:
        return f"{self.shown}/{name}" if name else self.shown

    @contextlib.contextmanager
    def errors(self, name: str | None, doing: str):
        try:
            yield
        except (PairloadError, _LocalGone):
            raise
        except Exception as exc:  # noqa: BLE001 - every backend has its own exception types
            raise OutputError(backend_error(self.where(name), doing, exc)) from None

    def check(self) -> None:
        """The bucket exists (object stores), or the folder can be made (any other file system)."""
        if not self.atomic:
            with self.errors(None, "creating the folder"):
                self.fs.makedirs(self.root, exist_ok=True)
            return
        bucket = self.root.split("/", 1)[0]
        with self.errors(None, f"looking up the bucket {bucket!r}"):
            try:
                self.fs.info(bucket)
            except FileNotFoundError:
                raise OutputError(f"{self.shown}: the bucket {bucket!r} does not exist (or these credentials cannot "
                                  "see it); create it first, or fix the URL") from None

    def read(self, name: str) -> bytes | None:
        with self.errors(name, "reading it"):
            try:
                return self.fs.cat_file(self.path(name))
            except FileNotFoundError:
                return None

    def size(self, name: str) -> int | None:
        with self.errors(name, "looking it up"):
            try:
                info = self.fs.info(self.path(name))
            except FileNotFoundError:
                return None
        return info.get("size") if info.get("type", "file") == "file" else None

    def put(self, local: str, name: str, size: int) -> None:
        """Upload `local` as `name` and check the size that arrived."""
        with self.errors(name, "uploading it"):
            try:
                if self.atomic:  # an object store shows the object only once it is complete: put it in place
                    self.fs.put_file(local, self.path(name))
                else:
                    temp = self.path(f".{name}.{os.getpid()}.upload")
                    self.fs.put_file(local, temp)
                    self.fs.mv(temp, self.path(name))
            except FileNotFoundError:
                if not os.path.exists(local):
                    raise _LocalGone(local) from None
                raise
        got = self.size(name)
        if got != size:
            raise OutputError(f"{self.where(name)}: {got} bytes arrived, {size} were uploaded; check the destination "
                              "(is another program writing there?), then run the same command again")

    def remove(self, name: str) -> None:
        with self.errors(name, "deleting it"):
            try:
                self.fs.rm_file(self.path(name))
            except FileNotFoundError:
                pass

    def names(self) -> list[str]:
        """The names of the objects in the folder (none where it does not exist yet)."""
        with self.errors(None, "listing the folder"):
            try:
                return [str(p).rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False)]
            except FileNotFoundError:
                return []

    def remove_temps(self) -> None:
        """Delete what a killed upload left under pack's temporary names (only backends without atomic puts use
        them): `.<shard or manifest>.<pid>.upload`."""
        if self.atomic:
            return
        for name in self.names():
            m = _TEMP.match(name)
            target = m.group("target") if m else ""
            if m and (schema.is_shard_name(target) or binindex.is_index_name(target) or target == schema.MANIFEST):
                self.remove(name)


def backend_error(where: str, doing: str, exc: BaseException) -> str:
    """One line for a backend's exception: what failed where, and what to check. Never the credentials."""
    detail = " ".join(str(exc).split())[:200] or type(exc).__name__
    names = [cls.__name__ for cls in type(exc).__mro__]
    if isinstance(exc, PermissionError):
        return (f"{where}: permission denied while {doing} ({detail}); check the credentials the backend found in its "
                "usual places (environment variables, its config files, the machine's role, or --storage-option) "
                "and that they may write under this URL")
    if isinstance(exc, FileNotFoundError):
        return (f"{where}: not found while {doing} ({detail}); check that the bucket exists and the URL is spelled "
                "right")
    if isinstance(exc, (ConnectionError, TimeoutError)) or any("Connect" in n or "Timeout" in n for n in names):
        return (f"{where}: cannot reach the storage service while {doing} ({detail}); check the network and the "
                "endpoint (--storage-option endpoint_url=URL for an S3-compatible service), then run the same command "
                "again to resume")
    return (f"{where}: {type(exc).__name__} while {doing} ({detail}); check the URL, the credentials and the storage "
            "options, then run the same command again to resume")


# ------------------------------------------------------------------ the ledger

class _Ledger:
    """LEDGER in the staging folder: `destination` (the URL and endpoint the rest is about), `pack` (the stamp the
    staging pack is complete for, or None), `remote` ({shard: [bytes, sha256]} known to be at the destination) and
    `owned` (shard objects at the destination that pack may replace or delete). Saved atomically on every change."""

    def __init__(self, folder: Path, destination: str):
        self.path = folder / LEDGER
        self.lock = threading.Lock()
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        same = doc.get("destination") == destination
        self.destination = destination
        self.pack = doc.get("pack") if isinstance(doc.get("pack"), str) else None
        remote = doc.get("remote") if same and isinstance(doc.get("remote"), dict) else {}
        self.remote = {k: v for k, v in remote.items() if isinstance(v, list) and len(v) == 2}
        owned = doc.get("owned") if same and isinstance(doc.get("owned"), list) else []
        self.owned = {n for n in owned if isinstance(n, str) and schema.is_shard_name(n)}

    def _save(self) -> None:
        with guard.writing(self.path):
            write_json_atomic(self.path, {"destination": self.destination, "pack": self.pack,
                                          "remote": self.remote, "owned": sorted(self.owned)})

    def set_pack(self, stamp: str | None) -> None:
        with self.lock:
            self.pack = stamp
            self._save()

    def adopt(self, doc) -> None:
        """The shards a manifest found at the destination lists: their content is known, and they are pack's."""
        if not isinstance(doc, dict) or not isinstance(doc.get("splits"), dict):
            return
        with self.lock:
            for entry in doc["splits"].values():
                files = entry.get("shards", []) if isinstance(entry, dict) else []
                files = list(files) + ([entry[binindex.FIELD]] if isinstance(entry.get(binindex.FIELD), dict) else [])
                for sh in files:
                    name = sh.get("file") if isinstance(sh, dict) else None
                    if isinstance(name, str) and (schema.is_shard_name(name) or binindex.is_index_name(name)):
                        self.owned.add(name)
                        if isinstance(sh.get("bytes"), int) and isinstance(sh.get("sha256"), str):
                            self.remote[name] = [sh["bytes"], sh["sha256"]]
            self._save()

    def knows(self, name: str, size: int, sha256: str) -> bool:
        with self.lock:
            return self.remote.get(name) == [size, sha256]

    def replacing(self, name: str) -> None:
        """Before `name` is uploaded: it is pack's, and its content unknown until the upload is done."""
        with self.lock:
            if name not in self.owned or name in self.remote:
                self.owned.add(name)
                self.remote.pop(name, None)
                self._save()

    def uploaded(self, name: str, size: int, sha256: str) -> None:
        with self.lock:
            self.remote[name] = [size, sha256]
            self._save()

    def deleted(self, name: str) -> None:
        with self.lock:
            self.owned.discard(name)
            self.remote.pop(name, None)
            self._save()


def _destination_id(url: str, storage_options: dict | None) -> str:
    """The URL and the endpoint or account it is on: the same bucket name on another service is another place."""
    so = storage_options or {}
    client = so.get("client_kwargs") if isinstance(so.get("client_kwargs"), dict) else {}
    where = [str(v) for v in (so.get("endpoint_url"), client.get("endpoint_url"), so.get("account_name")) if v]
    return " ".join([url.rstrip("/"), *where])


def _stamp(raw: Path, options: PackOptions) -> str:
    """A digest of what a pack of `raw` is made of: the options that shape the shards, every file under RAW (path,
    size, mtime) and the pairs files; a staging pack with the same stamp holds the shards a re-pack would write."""
    h = hashlib.sha256()
    shape = {k: v for k, v in dataclasses.asdict(options).items() if k not in ("workers", "overwrite")}
    h.update(json.dumps([str(raw.resolve()), shape], sort_keys=True, default=str).encode("utf-8"))
    items = options.pairs_file if isinstance(options.pairs_file, tuple) else (options.pairs_file,)
    extra = {p for item in items if item for p in (item, item.partition("=")[2]) if p}  # a path, or split=path
    for path in sorted(extra | {str(raw / p) for p in extra}):
        _stamp_file(h, path, path)
    if raw.is_file():  # a list of photos (`--targets-only`): the list, and the photos it names
        from ..folders.photos import listed

        for path in [str(raw), *listed(raw)]:
            _stamp_file(h, path, path)
    for folder, dirs, files in os.walk(raw):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            _stamp_file(h, path, os.path.relpath(path, raw))
    return h.hexdigest()


def _stamp_file(h, path: str, label: str) -> None:
    st = stamp(path)  # the one file identity (`format.stamps`); size and mtime go into the pack's digest
    if st is not None:
        h.update(f"{label}\0{st.size}\0{st.mtime_ns}\n".encode("utf-8", "surrogateescape"))


def _staged(folder: Path, ledger: _Ledger, stamp: str) -> dict | None:
    """The staging folder's manifest when it holds the complete pack for `stamp` (every shard at its size)."""
    if ledger.pack != stamp or (folder / guard.JOURNAL).exists():
        return None
    try:
        doc = schema.read_manifest(folder)
        for sh in _shards(doc):
            if (folder / sh["file"]).stat().st_size != sh["bytes"]:
                return None
    except (PairloadError, OSError):
        return None
    return doc


def _shards(doc: dict) -> list[dict]:
    """The files of a pack that go up before its manifest: the shards and (version 5) the index files."""
    return binindex.pack_files(doc)


# ------------------------------------------------------------------ one upload

class Session:
    """The destination, the ledger and the one thread that changes the destination, in order: shards as they are
    finished (`submit`), then, from `finish`, the shards no longer listed and the manifest."""

    def __init__(self, url: str, storage_options: dict | None, raw: Path, folder: Path, overwrite: bool,
                 on_upload: Callable[[str, str], None] | None):
        self.url, self.storage_options, self.raw, self.folder = url, storage_options, raw, folder
        self.overwrite, self.on_upload = overwrite, on_upload
        self.ledger = _Ledger(folder, _destination_id(url, storage_options))
        self.report = UploadReport(url=redact(url.rstrip("/")), staging=folder)
        self.dest: Destination | None = None
        self.old_manifest: bytes | None = None  # the manifest at the destination, until it is deleted
        self.queue: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.submitted: set[str] = set()

    def start(self) -> None:
        """Check the destination (before anything is decoded) and start the upload thread. Called once the pack's
        worker processes exist: the backend's own I/O thread starts here, after them."""
        self.dest = Destination(self.url, self.storage_options)
        self.dest.check()
        self.dest.remove_temps()
        self.old_manifest = self.dest.read(schema.MANIFEST)
        if self.old_manifest is not None:
            doc = guard.parse_manifest_bytes(self.old_manifest)
            refusal = guard.manifest_refusal(doc, self.dest.where(schema.MANIFEST), self.raw, "another URL")
            if refusal and not self.overwrite:
                raise OutputError(refusal)
            self.ledger.adopt(doc)  # saved before that manifest can go: a re-run still knows its shards are pack's
            if refusal:  # --overwrite: another pack's manifest goes first, before any of its shards is replaced
                self._retire_manifest()
        self.thread = threading.Thread(target=self._run, name="pairload-upload", daemon=True)
        self.thread.start()

    def submit(self, name: str, partial: str, sha256: str, size: int) -> None:
        """on_shard: a finished shard (still under its temporary name `partial`, renamed to `name` beside it later)."""
        self.submitted.add(name)
        self.queue.put((name, partial, sha256, size))

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.error is None:
                try:
                    self._shard(*item)
                except BaseException as exc:  # noqa: BLE001 - raised by finish() on the caller's thread
                    self.error = exc

    def _shard(self, name: str, partial: str, sha256: str, size: int) -> None:
        if self.ledger.knows(name, size, sha256) and self.dest.size(name) == size:
            self._event("skipped", name)
            return
        self._retire_manifest()  # readers never pair the old manifest with a new shard
        self.ledger.replacing(name)
        final = os.path.join(os.path.dirname(partial), name)
        try:
            self.dest.put(partial if os.path.exists(partial) else final, name, size)
        except _LocalGone:  # renamed between the look and the open: the same bytes under the shard's name
            self.dest.put(final, name, size)
        self.ledger.uploaded(name, size, sha256)
        self.report.bytes_uploaded += size
        self._event("uploaded", name)

    def _retire_manifest(self) -> None:
        if self.old_manifest is not None:
            self.dest.remove(schema.MANIFEST)
            self.old_manifest = None
            self._event("deleted", schema.MANIFEST)

    def _event(self, kind: str, name: str) -> None:
        events = {"uploaded": self.report.uploaded, "skipped": self.report.skipped, "deleted": self.report.deleted}
        events[kind].append(name)
        if self.on_upload:
            self.on_upload(kind, name)

    def _drain(self) -> None:
        if self.thread is not None:
            self.queue.put(None)
            self.thread.join()
            self.thread = None

    def wait(self) -> None:
        """Every submitted shard uploaded (or the first error raised); the upload thread is done."""
        self._drain()
        if self.error is not None:
            raise self.error

    def finish(self, doc: dict) -> None:
        """Upload the shards not uploaded yet (all of them when the staging pack was reused), wait for the upload
        thread, delete the shards the new manifest does not list, then put the manifest: last."""
        for sh in _shards(doc):  # the pack called submit() for every shard it wrote before it returned
            if sh["file"] not in self.submitted:
                self.submit(sh["file"], str(self.folder / sh["file"]), sh["sha256"], sh["bytes"])
        self.wait()
        keep = {sh["file"] for sh in _shards(doc)}
        for name in sorted(self.ledger.owned - keep):
            self._retire_manifest()
            self.dest.remove(name)
            self.ledger.deleted(name)
            self._event("deleted", name)
        manifest = (self.folder / schema.MANIFEST).read_bytes()
        if self.old_manifest == manifest:  # nothing changed at the destination: its manifest is this one
            self._event("skipped", schema.MANIFEST)
            return
        self.dest.put(str(self.folder / schema.MANIFEST), schema.MANIFEST, len(manifest))
        self.old_manifest = manifest
        self.report.bytes_uploaded += len(manifest)
        self._event("uploaded", schema.MANIFEST)

    def stop(self) -> None:
        """After success or failure: no upload goes on once `pack` has returned."""
        if self.thread is not None:
            self.error = self.error or OutputError("stopped")  # the thread skips what is still queued
            self._drain()


def staging_lock(folder: Path):
    """One upload at a time per staging folder (the pack inside it takes the packer's own lock too)."""
    return guard.exclusive(folder / LOCK, OutputError(
        f"{folder}: another `pairload pack` is uploading from this staging folder (it holds {LOCK}); wait for it to "
        "finish, or pass another --staging folder"))


def _report_from_manifest(doc: dict, folder: Path) -> PackReport:
    """The pack report of a staging pack that was reused, from its manifest."""
    report = PackReport(shards_dir=folder, workers=0)
    for split, entry in doc["splits"].items():
        report.splits[split] = {"samples": entry["samples"], "shards": len(entry["shards"]),
                                "bytes": sum(sh["bytes"] for sh in entry["shards"])}
        report.layout[split] = {"folders": entry.get("folders") or [], "rules": entry.get("pairing") or []}
    notes = doc.get("report") if isinstance(doc.get("report"), dict) else {}
    report.gray = list(notes.get("gray_replicated") or [])
    report.alpha = list(notes.get("alpha_dropped") or [])
    report.converted_16bit = list(notes.get("converted_16bit") or [])
    report.skipped = list(notes.get("skipped_unmatched") or [])
    report.skipped_per_split = dict(notes.get("skipped_per_split") or {})
    report.unused = list(notes.get("unused") or [])
    report.split_folders = dict(notes.get("split_folders") or {})
    return report


def remove_staging(folder: Path, extra: list[str] = ()) -> None:
    """--no-keep-staging: delete what pack wrote in the staging folder (and the `extra` files a part of a pack
    wrote there), and the folder when nothing else is left."""
    names = [schema.MANIFEST, LEDGER, LOCK, guard.LOCK, guard.JOURNAL, *extra]
    try:
        names += [sh["file"] for sh in _shards(schema.read_manifest(folder))]
    except PairloadError:
        pass
    names += [binindex.record_of(name) for name in names if binindex.is_index_name(name)]  # their records
    for name in names:
        (folder / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()
