"""Everything that turns a planned batch (`pairload.plan.BatchPlan`) into device tensors, in three floors:

- the paths (`paths`: the table of ways to cut, what each requires, and the choice between them), the one payload
  (`payload.Cut`) and the cutters that yield it (`gpu.KernelCuts`, `workers.WorkerCuts`); the stages a cut goes
  through after the cutter (`handover.DeviceStage`: transfer, `degrade.Degrade`, handover), each timed by the
  loader's hooks, ending in `PairBatch`es on the caller's stream;
- `kernel/`: the launch geometry and the one Triton kernel that cuts planned windows, both sides, oriented;
- `memory/`: what the kernel reads, behind the `Memory` protocol (the registered page cache, the device copy).

`pairload.loaders` holds the kinds, the deals and the DALI glue; each consumes a cutter from `paths.choose`.
"""

from .payload import Cut, Cutter
from .paths import PATHS, Choice, Request, choose

__all__ = ["PATHS", "Choice", "Cut", "Cutter", "Request", "choose"]
