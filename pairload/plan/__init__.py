"""The one planner of randomness: sample order, rank shares, crop windows and dihedral augmentation, and what
restoration recipes do around them: repeats, mixed epochs over several sources and crop/batch schedules.

Everything is a pure function of (seed, epoch, rank, world_size), the config and each sample's key (and which
draw of it this is), so every backend (ram, GPU-resident, wds, DALI) executes the same plan, and input and
target always receive the same window and the same transform. Numpy only.

`draws` (hashes, permutations, crop corners, codes), `config` (`PlanConfig`, `LastBatch`, `Phase`, `BatchPlan`),
`mix` (mixed epochs), `deals` (the registry of orders and rank shares), `positions` (an epoch's rows as views of
positions), `epochs` (`plan_run`, `plan_epoch`, `num_batches`), `run` (`Run`: a rank's batches, planned a block at a
time).
"""

from .clips import Clips, ClipUnits  # noqa: F401
from .config import (LAST_BATCH, REQUIRED, BatchPlan, Groups, LastBatch, PlanConfig, Phase,  # noqa: F401
                     check_groups, check_split, parse_schedule, phase_at)
from .deals import DEALS, Deal, Shards, get_deal, shard_order  # noqa: F401
from .draws import HFLIP, TRANSPOSE, VFLIP, epoch_order, key_hashes, sample_params  # noqa: F401
from .epochs import (Consumed, epoch_rows, epoch_start_step, epoch_stream, num_batches, plan_epoch,  # noqa: F401
                     plan_run, rank_share, share_rows, whole_steps)
from .run import Block, Run  # noqa: F401
from .mix import interleave, mix_counts, source_counts  # noqa: F401
