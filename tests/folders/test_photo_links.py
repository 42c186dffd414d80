"""The photos of a targets-only pack (`find_targets`) reached through links and list files as editors write them: a
list naming a photo and a link to it packs it twice unless refused, a broken link in a folder is named as one, and a
list saved with a byte-order mark reads its first line."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import write_rgb
from pairload.errors import PairingError
from pairload.folders.photos import find_targets


@pytest.fixture
def photos(tmp_path):
    root = tmp_path / "photos"
    for name in ("a.png", "b.png"):
        write_rgb(root / name, np.zeros((8, 8, 3), np.uint8))
    return root


def test_a_list_naming_a_photo_and_a_link_to_it_is_refused(photos):
    os.symlink(photos / "a.png", photos / "again.png")
    (photos / "list.txt").write_text("a.png\nb.png\nagain.png\n")
    with pytest.raises(PairingError, match=r"list\.txt:3: again\.png is the same file as a\.png \(line 1\), through a "
                                           r"link; it would be trained on twice: remove one line$"):
        find_targets(photos / "list.txt")
    assert [p.key for p in find_targets(photos).pairs] == ["a", "b"]  # a folder packs it once, as before


def test_a_broken_link_in_a_folder_is_named_as_one(photos):
    os.symlink("gone.png", photos / "c.png")
    with pytest.raises(PairingError, match=r"photos: c\.png is a link to gone\.png, which does not exist; restore the "
                                           r"file it points to, or remove the link$"):
        find_targets(photos)


def test_a_list_with_a_byte_order_mark_reads_its_first_line(photos):
    (photos / "list.txt").write_bytes(b"\xef\xbb\xbfa.png\r\nb.png\r\n")
    assert [p.key for p in find_targets(photos / "list.txt").pairs] == ["a", "b"]
