"""How much host memory this process may use: the machine's, or less under a memory limit (a cgroup's `memory.max`,
as SLURM's `--mem`, a container or systemd set it; cgroup v1's `memory.limit_in_bytes`). The one place that reads it:
what the page cache may pin, and how far a streamed split reads ahead, are fractions of `host_memory().available`.

Under a limit the page cache of the files a process reads is charged to its cgroup, and pages registered with a GPU
(pinned) cannot be reclaimed: pinning more than the limit leaves the kernel reclaiming forever with no batch coming.
So the limit, not the machine's free memory, bounds what may be pinned, and whether a split can stay cached at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
NO_LIMIT = 1 << 60  # cgroup v1 writes "no limit" as a number near 2**63


@dataclass(frozen=True)
class HostMemory:
    """`total`: bytes this process may use at most (the machine's RAM, or a smaller cgroup limit); `available`: of
    them, bytes usable now without pushing anything out (the machine's available memory, or, under a limit, the limit
    less what the cgroup uses that cannot be reclaimed); `limit`: where a limit comes from (a cgroup file), '' for
    none."""

    total: int
    available: int
    limit: str = ""

    def describe(self) -> str:
        from .units import human_bytes

        where = f" (the memory limit in {self.limit})" if self.limit else ""
        return f"{human_bytes(self.available)} available of {human_bytes(self.total)}{where}"


CACHE_FRACTION = 0.9  # files beyond this share of what the page cache may hold cannot all stay cached


def cache_room(mem: HostMemory | None = None) -> int:
    """Bytes of files the page cache may hold for this process: all of a memory limit (the page cache counts against
    it), else the memory available now."""
    mem = host_memory() if mem is None else mem
    return mem.total if mem.limit else mem.available


def outgrows_cache(nbytes: int, mem: HostMemory | None = None) -> bool:
    """Files of `nbytes` cannot all stay in the page cache: every pass over them reads them from disk."""
    return nbytes > CACHE_FRACTION * cache_room(mem)


ROOM = 64 << 20  # page cache a loader needs besides what it reads: its processes' code as it runs


def room_note(in_flight: int, mem: HostMemory | None = None) -> str | None:
    """Under a memory limit, why the page cache has too little room for a loader whose reads hold `in_flight` bytes
    at once (None: room enough, or no limit). The processes of the job (the loader's workers, the training) hold
    the rest; what is left is all the page cache may use, so every page read is soon pushed out again, the processes'
    own code included: every read then waits on the disk, and batches come many times slower than the disk gives."""
    from .units import human_bytes

    mem = host_memory() if mem is None else mem
    need = ROOM + max(0, int(in_flight))
    if not mem.limit or mem.available >= need:
        return None
    return (f"under the memory limit in {mem.limit} ({human_bytes(mem.total)}) the job's processes hold "
            f"{human_bytes(mem.total - mem.available)}, leaving {human_bytes(mem.available)} for the page cache, "
            f"where the loader needs about {human_bytes(need)}: every read will wait on the disk, far slower than it "
            "could be; raise the limit (SLURM --mem, the container's memory) or use fewer num_workers")


def host_memory(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> HostMemory:
    """This process's memory: the machine's (psutil), bounded by the tightest cgroup limit of its cgroup and the
    cgroups above it (v2 and v1). `root`, `proc_cgroup`: where cgroups are mounted and listed (tests point them
    elsewhere)."""
    import psutil

    vm = psutil.virtual_memory()
    best = HostMemory(int(vm.total), int(vm.available))
    for limit in _limits(root, proc_cgroup):
        if limit.total < best.total:
            best = HostMemory(limit.total, min(limit.available, best.available), limit.limit)
    return best


def _limits(root: Path, proc_cgroup: Path):
    """The limited cgroups on this process's path (each as a HostMemory), v2 then v1."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and controllers == "":
            yield from _walk(root, path, _v2)
        elif "memory" in controllers.split(","):
            yield from _walk(root / "memory", path, _v1)


def _walk(mount: Path, path: str, read):
    """`read(folder)` for the cgroup at `path` under `mount` and each one above it. Inside a container the listed
    path may be the host's while the mount shows the container's own cgroup as its root: that root is read too."""
    seen = set()
    parts = [p for p in path.strip("/").split("/") if p]
    for k in range(len(parts), -1, -1):
        folder = mount.joinpath(*parts[:k])
        if folder in seen or not folder.is_dir():
            continue
        seen.add(folder)
        got = read(folder)
        if got is not None:
            yield got


def _number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max" or not text.isdigit():
        return None
    value = int(text)
    return value if value < NO_LIMIT else None


def _stat(path: Path, *names: str) -> int:
    """The sum of these fields of a memory.stat file (0 for missing ones)."""
    try:
        fields = dict(line.split(" ", 1) for line in path.read_text().splitlines() if " " in line)
    except OSError:
        return 0
    return sum(int(fields.get(n, "0")) for n in names)


def _bounded(folder: Path, limit: int | None, used: int | None, reclaimable: int) -> HostMemory | None:
    if limit is None:
        return None
    held = max(0, (used or 0) - reclaimable)
    return HostMemory(limit, max(0, limit - held), str(folder))


def _v2(folder: Path) -> HostMemory | None:
    return _bounded(folder, _number(folder / "memory.max"), _number(folder / "memory.current"),
                    _stat(folder / "memory.stat", "inactive_file", "active_file"))


def _v1(folder: Path) -> HostMemory | None:
    return _bounded(folder, _number(folder / "memory.limit_in_bytes"), _number(folder / "memory.usage_in_bytes"),
                    _stat(folder / "memory.stat", "total_inactive_file", "total_active_file"))
