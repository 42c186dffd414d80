"""What the wheel ships: pyproject's package discovery takes `pairload` and its subpackages only (never benchmarks/
or tests/), and every module of `pairload/` is imported from an entry point, so code that only the benchmarks or the
tests use fails here instead of shipping (it belongs in benchmarks/benchlib/ or tests/)."""

from fnmatch import fnmatch
from pathlib import Path

import pytest

import pairload
from pairload.kinds import KIND_LIST
from test_layout import package_imports

ROOT = Path(__file__).resolve().parents[1]
MOVED = ("scale", "packbench", "rawdata", "rawbench", "rawbaselines")  # the benchmarks' own code

# where the package is entered: the console script (read from pyproject), `import pairload`, `python -m` of
# pairload.train, pairload.workers (and its decode process) and pairload.basicsr, the public integration modules, and
# the modules named by strings (the kinds' classes, `pairload`'s lazy names)
ENTRY_POINTS = ("pairload", "pairload.train", "pairload.workers.__main__", "pairload.workers.decode", "pairload.dali",
                "pairload.lightning", "pairload.basicsr", "pairload.basicsr.__main__")


def _setuptools() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_wheel_takes_the_package_only():
    doc = _setuptools()
    packages = doc["tool"]["setuptools"]["packages"]
    if isinstance(packages, list):
        assert all(p.split(".")[0] == "pairload" for p in packages), packages
        return
    find = packages["find"]
    assert find.get("where", ["."]) == ["."] and find["include"], find
    # a package is a folder with an __init__.py (what setuptools' find takes; pip's pairload.egg-info is not one)
    top = {d.name for d in ROOT.iterdir() if (d / "__init__.py").is_file()
           and any(fnmatch(d.name, p) for p in find["include"])}
    assert top == {"pairload"}, f"package discovery also takes {sorted(top - {'pairload'})}"


def test_the_benchmarks_own_code_lives_in_benchmarks():
    assert not [m for m in MOVED if (ROOT / "pairload" / "bench" / f"{m}.py").exists()]
    assert all((ROOT / "benchmarks" / "benchlib" / f"{m}.py").is_file() for m in MOVED)


# the names `pairload` imports on first use (its module `__getattr__`)
LAZY_NAMES = ("make_loader", "PairBatch", "Normalize", "RawNormalize", "SensorBatch")


def test_every_module_of_the_package_is_imported_from_an_entry_point():
    graph = package_imports()
    scripts = _setuptools()["project"]["scripts"].values()
    roots = [*ENTRY_POINTS, *(s.split(":")[0] for s in scripts), *(k.cls.split(":")[0] for k in KIND_LIST),
             *(getattr(pairload, name).__module__ for name in LAZY_NAMES)]
    assert not [r for r in roots if r not in graph], "an entry point that is not a module of pairload"
    reached, todo = set(), list(roots)
    while todo:
        mod = todo.pop()
        if mod in reached:
            continue
        reached.add(mod)
        parts = mod.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a module runs its packages
        todo += [target for target, _ in graph[mod]]
    assert sorted(set(graph) - reached) == [], ("imported by no entry point (only by benchmarks/ or tests/?): move "
                                                "it to benchmarks/benchlib/ or tests/")
