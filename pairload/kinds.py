"""The names of the loader kinds and of the benchmark's entries.

Torch-free on purpose: the CLI lists them in its options without importing torch (`pairload pack --help` stays fast).
"""

LOADER_KINDS = ("ram", "wds", "dali-external", "dali-file")
BASELINES = ("cv2-disk", "naive-pil")
BENCH_ENTRIES = ("ram", "ram-workers", "ram-resident", "wds", "dali-external", "dali-file") + BASELINES
