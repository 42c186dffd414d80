"""The write side, run once per dataset: write shards from the pairs `pairload.raw` finds and decodes (`writer`),
and make synthetic pairs (`synth`). Never imports torch or DALI."""

from .writer import PackOptions, pack  # noqa: F401
