"""The degrade stage (`pairload.cut.degrade`) run on a cut after the cutter gives the inputs the cutter makes when the
path places the stage in it, and the converter adds nothing of its own."""

from __future__ import annotations

import numpy as np

from pairload import make_loader
from pairload.cut.workers import WorkerCuts


def test_the_stage_after_the_cut_makes_the_inputs_the_host_cutter_makes(packed):
    loader = make_loader("ram", packed, batch_size=4, crop=24, degrade="lowlight")
    assert loader.cutter.degrades  # on a CPU device the host cutter runs the stage
    plans = loader.plan()
    run = loader.degrade_stage.begin(plans)
    assert loader.degrade_stage.begin(plans) is run  # a run's tables are made once
    common = dict(num_workers=0, prefetch=2, pin=False, apply_codes=True, name="t")
    made = WorkerCuts(loader.ds, loader.cfg, loader.plan_for, degrade=loader.cfg.degrade, **common)
    plain = WorkerCuts(loader.ds, loader.cfg, loader.plan_for, **common)
    assert made.degrades and not plain.degrades
    for a, b in zip(made.cuts((0, ()), plans), plain.cuts((0, ()), plans)):
        stored_low = b.sides()[0].copy()
        out = run.apply(b)
        low, high = out.sides()
        assert np.array_equal(low, a.sides()[0]) and np.array_equal(high, a.sides()[1])
        assert not np.array_equal(low, stored_low)  # the stored inputs were replaced
        params = run.params(b.plans[0])
        assert set(params) == set(loader.cfg.degrade.columns) and len(params["gamma"]) == len(b.plans[0])
