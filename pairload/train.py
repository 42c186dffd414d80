"""`python -m pairload.train` (and `torchrun ... -m pairload.train`): the reference loop in `pairload.recipes.train`."""

import os
import sys

# who started this process, read before the seconds of importing torch: a rank compares it with its parent once it
# has asked to die with it (`pairload.distributed.exit_with_parent`), so a parent lost meanwhile is noticed too
STARTED_BY = os.getppid()

from .recipes.train import main  # noqa: E402 - after STARTED_BY, on purpose

if __name__ == "__main__":
    sys.exit(main(parent=STARTED_BY))
