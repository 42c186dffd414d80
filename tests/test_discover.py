"""Pair discovery on folders as they are found in the wild: symlinks, loops, unreadable folders."""

import os
import subprocess
import sys

import pytest

from pairload.raw.discover import find_pairs

from conftest import make_raw


def test_symlinked_subfolders_are_followed(tmp_path):
    elsewhere = make_raw(tmp_path / "elsewhere", 4, start=10)
    raw = make_raw(tmp_path / "raw", 1)
    for side in ("low", "high"):
        (raw / side / "more").symlink_to(elsewhere / side, target_is_directory=True)
    found = find_pairs(raw)
    assert len(found.pairs) == 5
    assert sorted(p.key for p in found.pairs)[-1] == "more+00013"


def test_a_symlinked_split_folder_is_a_split(tmp_path):
    elsewhere = make_raw(tmp_path / "elsewhere", 3)
    raw = tmp_path / "raw"
    make_raw(raw, 2, split="train")
    (raw / "test").symlink_to(elsewhere, target_is_directory=True)
    assert {s: len(p) for s, p in find_pairs(raw).splits().items()} == {"train": 2, "test": 3}


def test_a_symlink_loop_is_walked_once(tmp_path):
    raw = make_raw(tmp_path / "raw", 3)
    for side in ("low", "high"):
        (raw / side / "loop").symlink_to(raw / side, target_is_directory=True)
    assert len(find_pairs(raw).pairs) == 3


def _without_permission_override():
    """In the child: give up the capabilities that let root ignore file permissions (root's bounding set loses
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, so the exec'd process has them in no set)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            os._exit(77)


def _with_permissions(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a process for which file permissions apply, even when the tests run as root."""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         preexec_fn=_without_permission_override if os.geteuid() == 0 else None)
    if res.returncode == 77:
        pytest.skip("running as root without CAP_SETPCAP: cannot make permissions apply")
    return res


@pytest.mark.parametrize("where", ["low/sub", "high"])
def test_an_unreadable_folder_is_refused_by_name_not_skipped(tmp_path, where):
    raw = make_raw(tmp_path / "raw", 4)
    (raw / "low" / "sub").mkdir()
    (raw / where).chmod(0o000)
    try:
        res = _with_permissions(f"from pairload.raw.discover import find_pairs; find_pairs({str(raw)!r}, skip_unmatched=True)")
    finally:
        (raw / where).chmod(0o755)
    assert res.returncode != 0
    assert f"PairingError: {raw / where}: cannot be listed (Permission denied); fix its permissions" in res.stderr


def test_split_folders_beside_a_top_level_pair_are_not_ignored(tmp_path):
    raw = make_raw(tmp_path / "raw", 3)
    make_raw(raw, 2, split="test", start=50)
    assert {s: len(p) for s, p in find_pairs(raw).splits().items()} == {"train": 3, "test": 2}
