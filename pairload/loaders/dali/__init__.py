"""The DALI loader kinds and building blocks; `pairload.dali` is their public import path. This package owns the
one check that NVIDIA DALI is installed: its modules import `nvidia.dali` directly, after it (only its public
API, so the cuda120 and cuda130 builds both work).

Modules: `graph` (DALI operators and how a pipeline is bound and built), `runs` (where a pipeline's feed stands),
`convert` (DALI outputs and failures as torch tensors and pairload errors), `source` (the shared pipeline driver),
`external` and `files` (the two sources), `api` (the loaders and the functions users call)."""

try:
    import nvidia.dali.fn  # noqa: F401
    import nvidia.dali.types  # noqa: F401
    from nvidia.dali import pipeline_def  # noqa: F401
    from nvidia.dali.pipeline import Pipeline  # noqa: F401
    from nvidia.dali.tensors import TensorListGPU  # noqa: F401
except ImportError:  # pragma: no cover - exercised where DALI is absent
    from ...errors import MissingDependencyError

    raise MissingDependencyError(
        "pairload.dali needs NVIDIA DALI: pip install 'pairload[dali]' (CUDA 12 build) or 'pairload[dali-cu13]' "
        "(CUDA 13 build); DALI also runs without a GPU"
    ) from None

from .api import (DaliExternalLoader, DaliFileLoader, PairedIterator, PairedNodes, paired_inputs,  # noqa: E402
                  paired_source)
from .external import ExternalSource  # noqa: E402
from .files import FileSource  # noqa: E402
from .graph import dihedral_matrices  # noqa: E402,F401 - public through pairload.dali, outside __all__
from .source import PairedSource  # noqa: E402

__all__ = ["DaliExternalLoader", "DaliFileLoader", "ExternalSource", "FileSource", "PairedIterator", "PairedNodes",
           "PairedSource", "paired_inputs", "paired_source"]
