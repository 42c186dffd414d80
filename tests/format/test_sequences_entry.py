"""`Sequences.first_mismatch`, the one check that a sequence's frames agree (sizes, shared targets), as the packer,
`verify` and the clip planner use it."""

from __future__ import annotations

import numpy as np
import pytest

from pairload.errors import ConfigError
from pairload.format.sequences import Sequences
from pairload.plan.clips import Clips, ClipUnits


def test_the_first_frame_that_differs_from_its_sequences_first():
    seqs = Sequences(["a", "b"], [0, 3], [3, 2])
    hw = np.tile([[40, 56]], (5, 1))
    assert seqs.first_mismatch(hw) is None
    hw[4] = (40, 60)
    assert seqs.first_mismatch(hw) == (4, 3)
    crc = np.array([7, 7, 8, 5, 5], dtype=np.uint32)  # one value per sample
    assert seqs.first_mismatch(crc) == (2, 0)
    with pytest.raises(ConfigError, match=r"sequence 'b' has frames of 56x40 and 60x40"):
        ClipUnits.build(Clips(2), seqs, np.arange(5, dtype=np.uint64), hw, "split 'train'")
