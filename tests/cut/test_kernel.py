"""The zero-copy kernel against the numpy reference of the orientation codes, for default and typed members: on a
CUDA device for real, else on the CPU under Triton's interpreter when Triton is installed (it is not in CI's CPU
environment: the GPU run covers it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cuda_available, has_module

HERE = Path(__file__).parent


@pytest.mark.skipif(not has_module("triton"), reason="needs Triton (CUDA builds of torch ship it)")
def test_kernel_cuts_every_orientation_of_every_member_type_like_the_reference():
    path = [str(HERE.parents[1]), str(HERE), os.environ.get("PYTHONPATH", "")]  # the repository, kernel_check.py
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    device = "cuda" if cuda_available() else "cpu"
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    res = subprocess.run([sys.executable, str(HERE / "kernel_check.py"), device], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert res.stdout.count(": 0 wrong windows") == 3, res.stdout
