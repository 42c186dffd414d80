"""One row of the report (`Result`): an entry's rates per repeat and what they summarise to (median or node
total, spread, MB/s), the resources it used, and how it ran (path, cold, ranks) or why it did not."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class Result:
    loader: str
    status: str = "ok"  # ok | skipped | failed | invalid (a cold row whose every repeat found the split cached)
    reason: str = ""
    pairs_per_s: float = 0.0
    pairs_per_s_min: float = 0.0
    pairs_per_s_max: float = 0.0
    repeats: list[float] = field(default_factory=list)
    mb_per_s: float = 0.0
    cpu_cores_used: float = 0.0
    peak_host_rss_mb: float = 0.0
    device_mem_mb: float = 0.0  # the device's free memory lost over the measurement (every allocator, DALI's too)
    device_reserved_mb: float = 0.0  # torch's caching allocator: the most it reserved, and the most allocated
    device_allocated_mb: float = 0.0
    data_wait_frac: float | None = None
    cold: bool = False
    ranks: int = 1
    per_rank: list[float] = field(default_factory=list)  # with ranks > 1: each rank's median; pairs_per_s is their sum
    path: str = ""  # ram: "zero-copy" (the GPU cuts the crops), "workers" (why, when zero-copy was given up)
    stage_seconds: dict[str, float] = field(default_factory=dict)  # the loader's timed stages (`loader.hooks`), summed
    # cold rows: per repeat, the share of the split cached once evicted, and the seconds from the loader's
    # construction to its first batch; repeats not timed because the split stayed cached
    resident_before: list[float] = field(default_factory=list)
    first_batch_s: list[float] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)

    def summarise(self, pair_bytes: int, peak_rss: int, node_total: bool = False) -> None:
        """Median (or, for concurrent ranks, the node's sum) and spread of the repeats, MB/s of delivered crops
        (`pair_bytes` each pair), peak host memory."""
        self.pairs_per_s = sum(self.repeats) if node_total else statistics.median(self.repeats)
        self.pairs_per_s_min, self.pairs_per_s_max = min(self.repeats), max(self.repeats)
        self.mb_per_s = self.pairs_per_s * pair_bytes / 1e6
        self.peak_host_rss_mb = peak_rss / 2**20


def failed(name: str, exc: BaseException, **fields) -> Result:
    """A failed row whose reason is the error's type and first line."""
    text = str(exc).splitlines()[0][:300] if str(exc) else ""
    return Result(loader=name, status="failed", reason=f"{type(exc).__name__}: {text}", **fields)


def limits_line(lim: dict) -> str:
    """The report's limits in one line (`bench-loaders` prints it under the table)."""
    h2d, dec, disk = lim["h2d"], lim.get("decode"), lim.get("disk")
    return (f"limits: {h2d['kind']} {h2d['gb_per_s']:.1f} GB/s = {h2d['pairs_per_s']:,.0f} pairs/s; "
            f"one core copying crops {lim['copy']['pairs_per_s_per_core']:,.0f} pairs/s"
            + (f"; {dec['format']} decode {dec['pairs_per_s_per_core']:,.0f} pairs/s per core, "
               f"{dec['pairs_per_s_all_cores']:,.0f} on {dec['cores']} cores" if dec else "")
            + (f"; disk {disk['gb_per_s']:.2f} GB/s cold ({disk.get('streams', 1)} stream(s), the better of 1 "
               f"and {disk.get('parallel_streams', 1)}) = {disk['pairs_per_s']:,.0f} pairs/s" if disk else "")
            + _stored_line(lim.get("stored")))


def _stored_line(stored: dict | None) -> str:
    """How the split is stored: bytes per pair, and an encoded split's decode rates."""
    if not stored:
        return ""
    line = f"; stored {stored['store']}, {stored['bytes_per_pair'] / 1e3:,.0f} KB per pair"
    if stored.get("cpu_images_per_s_per_core"):
        gpu = stored.get("gpu_images_per_s")
        line += (f", JPEG decode {stored['cpu_images_per_s_per_core']:,.0f} images/s per core"
                 + (f", {gpu:,.0f} on the GPU" if gpu else ""))
    if stored.get("tiles_cpu_images_per_s_per_core"):
        gpu = stored.get("tiles_gpu_images_per_s")
        line += (f", tiles decode {stored['tiles_cpu_images_per_s_per_core']:,.0f} images/s per core"
                 + (f", {gpu:,.0f} on the GPU" if gpu else ""))
    return line
