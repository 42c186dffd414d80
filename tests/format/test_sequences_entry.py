"""`Sequences.first_mismatch`, the one check that a sequence's frames agree (sizes, shared targets), as the packer,
`verify` and the clip planner use it; `numbering_breaks`, where a sequence's frame numbers are not evenly spaced; the
split entry's "sequence_gaps" field."""

from __future__ import annotations

import numpy as np
import pytest

from pairload.errors import ConfigError, ShardError
from pairload.format.sequences import Sequences, frame_name, numbering_breaks
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


@pytest.mark.parametrize("names, said", [
    (["0001", "0002", "0003"], []),
    (["0010", "0020", "0030"], []),  # every 10th frame: evenly numbered
    (["a", "b", "cover"], []),  # no numbers: name order is all there is
    (["0001", "0002", "0003", "0007", "0008"], ["frames 0003 → 0007, step 1 elsewhere"]),
    (["f_0001", "f_0002", "g_0001", "g_0002"], ["frames f_0002 → g_0001, numbered backwards"]),
    (["x_0001", "y_0001"], ["frames x_0001 → y_0001, one number twice"]),
    (["0001", "0002", "cover"], ["frames 0002 → cover, cover has no number at the end of its name"]),
    (["001", "0002", "03"], []),  # widths differ, numbers do not (name order is refused apart, `misnumbered`)
    (["0001", "0002", "0004"], ["frames 0002 → 0004, step 1 elsewhere"]),  # equally frequent steps: the smaller
])
def test_numbering_breaks(names, said):
    assert [b.words() for b in numbering_breaks(names)] == said


def test_a_frames_name_comes_back_from_its_key():
    assert frame_name("vidA+0001") == "0001" and frame_name("v+clip~281~29") == "clip(1)"
    assert frame_name("S01+low_light_10+00004") == "00004" and frame_name("a~2Eb+c~C3~A9") == "cé"


def test_the_gap_field_round_trips_and_is_checked():
    seqs = Sequences(["a@0001", "a@0007"], [0, 3], [3, 3], gaps="split")
    entry = seqs.to_entry()
    assert entry["sequence_gaps"] == "split" and Sequences.from_entry(entry, 6, "s").gaps == "split"
    assert "sequence_gaps" not in Sequences(["a"], [0], [6]).to_entry()  # the default: the bytes of before
    with pytest.raises(ShardError, match=r"^s: \"sequence_gaps\" is .skip., not one of refuse, split, allow; the"):
        Sequences.from_entry({**entry, "sequence_gaps": "skip"}, 6, "s")
    keys = ["a+0001", "a+0002", "a+0003", "a+0007", "a+0008", "a+0010"]
    assert [(s, b.at) for s, b in Sequences(["a"], [0], [6]).breaks(keys)] == [(0, 3), (0, 5)]
    assert Sequences(["a"], [0], [6]).gap_report(keys, "w").startswith(
        "w: sequence 'a': frames 0003 → 0007, step 1 elsewhere (and 1 more break(s)): a clip that crosses it joins")
