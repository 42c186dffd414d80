"""The write side, run once per dataset: find pairs in a raw folder (`discover`), decode (`decode`), write
shards (`writer`), and make synthetic pairs (`synth`). Never imports torch or DALI."""

from .discover import find_pairs  # noqa: F401
from .writer import PackOptions, pack  # noqa: F401
