"""The DALI loader kinds and building blocks (`sources`); `pairload.dali` is their public import path."""

from .sources import (DaliExternalLoader, DaliFileLoader, ExternalSource, FileSource, PairedIterator,  # noqa: F401
                      PairedNodes, PairedSource, dihedral_matrices, paired_inputs, paired_source)

__all__ = ["DaliExternalLoader", "DaliFileLoader", "ExternalSource", "FileSource", "PairedIterator", "PairedNodes",
           "PairedSource", "paired_inputs", "paired_source"]
