"""Finding the photos of a targets-only pack (`pack --targets-only`): every image under a folder, at any depth, or
every image a list file names. Each becomes a `Pair` whose two files are one (the target, stored alone); every other
file under the folder is reported in `Discovery.unused` with the reason, so that no file is dropped in silence."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import PairingError
from ..format.schema import check_split_name, key_from_relpath
from .filetypes import ARRAY_EXTS, IMAGE_EXTS, IMAGE_LIKE_EXTS, READABLE, conversion
from .model import MAX_LISTED, SAME_FILE, UNSUPPORTED, Discovery, Pair, Unused, escaped, listing
from .realpaths import RealPaths
from .walk import walk

RULE = "targets only"  # how the samples were found, for the manifest's "pairing" (there is no partner to find)
NOT_IMAGE = "not an image"  # why a file under PHOTOS is in no sample (`Unused.reason`), beside UNSUPPORTED, SAME_FILE


def find_targets(photos: str | os.PathLike, split: str = "train") -> Discovery:
    """The photos under the folder `photos` (recursively; hidden files and folders left out, as pair packs leave
    them) or named by the list file `photos` (one path a line, relative to the list's folder; blank lines and
    `#` comments skipped), as one split of samples whose input and target are one file. Keys come from the paths
    relative to the folder (`schema.key_from_relpath`). A folder's other files are listed in `unused`; an empty
    folder, a list naming a missing or non-image file, and two files giving one key are refused by name."""
    path = Path(photos)
    check_split_name(split)
    out = Discovery(pairs=[])
    if path.is_dir():
        root = path.resolve()
        found = _from_folder(root, out)
        source = "."
    elif path.is_file():
        root = path.resolve().parent
        found = _from_list(path, root)
        source = path.name
    else:
        raise PairingError(f"{photos}: no such folder or file; pass a folder of photos or a text file listing them")
    if not found:
        raise _no_photos(path, out.unused)
    keys: dict[str, str] = {}
    for rel, full in sorted(found.items()):
        key = key_from_relpath(rel)
        if key in keys:
            raise PairingError(f"{path}: {keys[key]} and {rel} give the same sample key {key!r} (keys are paths "
                               "without their extension); rename or remove one of them")
        keys[key] = rel
        out.pairs.append(Pair(split, key, Path(full), Path(full), rel, rel))
    out.pairs.sort_keys()  # (one split: key order)
    out.sources[split] = [source]
    out.rules[split] = [RULE]
    return out


def _from_folder(root: Path, out: Discovery) -> dict[str, str]:
    """{relative path: absolute path} of the images under `root`; the other files go into `out.unused`, and so does
    a link to an image that is already packed (it would be trained on twice)."""
    found: dict[str, str] = {}
    real: dict[str, str] = {}  # real path -> relative path of the image packed for it
    real_path = RealPaths()
    groups: dict[tuple[str, str], list[str]] = {}
    hints: dict[tuple[str, str], str] = {}
    for folder, names in walk(root):
        where = folder.relative_to(root).as_posix()
        real_folder = os.path.realpath(folder)
        for name in names:
            rel = name if where == "." else f"{where}/{name}"
            full = os.path.join(folder, name)
            ext = os.path.splitext(name)[1].lower()
            if ext in IMAGE_EXTS:
                target = real_path(full)
                if target != os.path.join(real_folder, name) and not os.path.exists(target):  # a link to nothing
                    raise PairingError(f"{root}: {escaped(rel)} is a link to {escaped(os.readlink(full))}, which does "
                                       "not exist; restore the file it points to, or remove the link")
                seen = real.setdefault(target, rel)
                if seen == rel:
                    found[rel] = full
                    continue
                reason, hint = SAME_FILE, f"a link to {seen}, which is packed once"
            elif ext in IMAGE_LIKE_EXTS:
                reason, hint = UNSUPPORTED, (conversion([ext]) if ext in ARRAY_EXTS else
                                             f"pack reads {READABLE}: convert them (e.g. to PNG) to pack them")
            else:
                reason, hint = NOT_IMAGE, f"left out: pack reads {READABLE}"
            groups.setdefault((where, reason), []).append(name)
            hints.setdefault((where, reason), hint)
    out.unused = [Unused(folder, reason, len(names), tuple(names[:MAX_LISTED]), hints[(folder, reason)])
                  for (folder, reason), names in sorted(groups.items())]
    return found


def listed(path: str | os.PathLike) -> list[str]:
    """The absolute paths of the photos a list file names (each line checked as `find_targets` checks it)."""
    return list(_from_list(Path(path), Path(path).resolve().parent).values())


def _from_list(path: Path, root: Path) -> dict[str, str]:
    """{relative path: absolute path} of the images a list file names, each line checked; two lines reaching one
    file (a link and its target) are refused, as a folder packs such a file once."""
    if path.suffix.lower() in IMAGE_LIKE_EXTS:
        raise PairingError(f"{path}: an image, not a folder or a list of photos; pass the folder that holds it")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors) is no part of line 1
    except UnicodeDecodeError:
        raise PairingError(f"{path}: not a UTF-8 text file; pass a folder of photos or a text file listing them, one "
                           "path a line") from None
    except OSError as exc:
        raise PairingError(f"{path}: cannot be read ({exc.strerror})") from None
    found: dict[str, str] = {}
    real: dict[str, tuple[int, str]] = {}  # real path -> (line, entry) that named it first
    real_path = RealPaths()
    for number, line in enumerate(text.splitlines(), 1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        where = f"{path}:{number}"
        full = Path(os.path.normpath(root / entry))
        if not full.is_relative_to(root):
            raise PairingError(f"{where}: {escaped(entry)} is outside {root}; list paths relative to the list's "
                               "folder (keys are made from them), or move the list up to a folder holding them all")
        rel = full.relative_to(root).as_posix()
        if full.suffix.lower() not in IMAGE_EXTS:
            raise PairingError(f"{where}: {escaped(entry)} is not an image pack reads ({READABLE}); remove the line "
                               "or convert the file")
        if not full.is_file():
            raise PairingError(f"{where}: {escaped(entry)}: no such file ({full}); fix or remove the line")
        if rel in found:
            raise PairingError(f"{where}: {escaped(entry)} is listed twice; remove one line")
        first, named = real.setdefault(real_path(full), (number, entry))
        if first != number:
            raise PairingError(f"{where}: {escaped(entry)} is the same file as {escaped(named)} (line {first}), "
                               "through a link; it would be trained on twice: remove one line")
        found[rel] = str(full)
    return found


def _no_photos(path: Path, unused: list[Unused]) -> PairingError:
    """The refusal of a folder or list with no image, naming what the folder holds instead."""
    if path.is_file():
        return PairingError(f"{path}: lists no photos (one path a line, relative to the list's folder)")
    if not unused:
        return PairingError(f"{path}: holds no files; pass the folder of photos to pack")
    files = [f"{u.folder}/{n}" if u.folder != "." else n for u in unused for n in u.names]
    count = sum(u.count for u in unused)
    return PairingError(f"{path}: holds no images pack reads (found {listing(files, count)}); expected {READABLE}")
