"""docs/trust.md's commands run as written, and print what the page shows (`pairload make-pairs`, `pack` and
`audit` in a fresh folder)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "trust.md"


def test_the_audit_walkthrough_prints_what_the_page_shows(tmp_path):
    pytest.importorskip("skimage")
    text = PAGE.read_text(encoding="utf-8")
    commands = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)[0].splitlines()
    shown = re.findall(r"^```text\n(.*?)^```", text, re.S | re.M)[0]
    out = ""
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "pairload"
        res = subprocess.run([sys.executable, "-m", "pairload.cli", *argv[1:]], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, f"{command}: {res.stderr[-2000:]}"
        out = res.stdout
    assert out == shown
    assert (tmp_path / "findings.json").is_file()
