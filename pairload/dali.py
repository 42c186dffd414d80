"""pairload for DALI users: the planner's paired crops inside your own pipelines (`paired_source`,
`paired_inputs`, `PairedIterator`), and the two DALI loaders. The code lives in `pairload.loaders.dali`; this is
its public import path. Importing it without NVIDIA DALI installed raises `MissingDependencyError`."""

from .loaders.dali import *  # noqa: F401,F403
from .loaders.dali import __all__  # noqa: F401
from .loaders.dali import dihedral_matrices  # noqa: F401
