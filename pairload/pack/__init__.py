"""The write side, run once per dataset: write shards from the pairs `pairload.raw` finds and decodes (`writer`),
upload them into object storage as they are written (`upload`), and make synthetic pairs (`synth`). Never imports
torch or DALI."""

from .writer import PackOptions, pack  # noqa: F401
