"""`python -m pairload.train` (and `torchrun ... -m pairload.train`): the reference loop in `pairload.recipes.train`."""

import sys

from .recipes.train import main

if __name__ == "__main__":
    sys.exit(main())
