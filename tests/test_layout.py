"""The layout's import rules: the write side and the torch-free read side never import torch or DALI, the
library never imports the recipes, the recipes never import the benchmark, and the documented entry points still
work."""

import subprocess
import sys

import pytest

TORCH_FREE = ["pairload.format.schema", "pairload.format.atomic", "pairload.folders", "pairload.folders.discover",
              "pairload.folders.decode", "pairload.pack", "pairload.makepairs", "pairload.read", "pairload.workers",
              "pairload.workers.serve", "pairload.workers.decode", "pairload.plan", "pairload.kinds", "pairload.errors",
              "pairload.format.members", "pairload.dihedral", "pairload.plan.crops", "pairload.units", "pairload.hooks",
              "pairload.recipes.config", "pairload.remote.urls", "pairload.remote.schemes", "pairload.pack.upload",
              "pairload.format.stamps", "pairload.format.encoding", "pairload.camera.files", "pairload.format.sensor",
              "pairload.pack.sensor", "pairload.bench.rows"]
LIBRARY = ["pairload.loaders", "pairload.loaders.shards", "pairload.loaders.byshard", "pairload.cut",
           "pairload.batch", "pairload.devices"]
RECIPES = ["pairload.recipes.train", "pairload.recipes.model", "pairload.recipes.timing", "pairload.recipes.metrics"]


def _loaded_after(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", TORCH_FREE)
def test_the_write_side_and_the_host_read_side_never_import_torch_or_dali(module):
    loaded = _loaded_after(module)
    assert "torch" not in loaded and not any(m.startswith("nvidia") for m in loaded), module


@pytest.mark.parametrize("module", LIBRARY)
def test_the_library_does_not_import_the_recipes_or_the_benchmark(module):
    loaded = _loaded_after(module)
    assert not [m for m in loaded if m.startswith(("pairload.recipes", "pairload.bench"))], module


@pytest.mark.parametrize("module", RECIPES)
def test_the_recipes_do_not_import_the_benchmark(module):
    # one way only: bench uses the recipes' model and timing, the demo (pairload.demo) uses both
    assert not [m for m in _loaded_after(module) if m.startswith("pairload.bench")], module


def test_the_documented_entry_points_still_work():
    out = subprocess.run([sys.executable, "-m", "pairload.train", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--shards" in out.stdout
    from pairload import Normalize, PairBatch, make_loader, open_shards  # noqa: F401
    from pairload.pack import PackOptions, pack  # noqa: F401
    from pairload.folders import decode_rgb, find_pairs, probe_size  # noqa: F401


@pytest.mark.parametrize("module", ["pairload.plan", "pairload.workers.serve"])
def test_the_planner_and_the_workers_never_import_the_loaders(module):
    loaded = _loaded_after(module)
    assert not [m for m in loaded if m.startswith("pairload.loaders")], module
    if module.startswith("pairload.workers"):
        assert not [m for m in loaded if m.startswith("pairload.plan")], "workers execute, they never plan"


def package_imports() -> dict[str, set[tuple[str, str]]]:
    """module -> {(module imported, name taken)} for every module of `pairload`, lazy imports included, relative
    imports resolved; names that are modules resolve to them."""
    import ast
    from pathlib import Path

    import pairload

    root = Path(pairload.__file__).parent
    mods = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    out = {}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for a in node.names:
                    full = f"{target}.{a.name}"
                    found.add((full if full in mods else target, a.name))
            elif isinstance(node, ast.Import):
                found.update((a.name, "") for a in node.names)
        out[mod] = {(t, n) for t, n in found if t in mods and t != mod}
    return out


# the runtime side (what a training process runs) and the offline side (packing, reading dataset folders and camera
# files, calibrating, making pairs): the one loader kind that reads dataset folders at run time is dali-file's source
RUNTIME = ("pairload.degrade", "pairload.cut", "pairload.loaders", "pairload.read", "pairload.plan", "pairload.workers",
           "pairload.batch", "pairload.remote", "pairload.evaluate")
READS_FOLDERS = {"pairload.loaders.dali.files"}
OFFLINE = ("pairload.pack", "pairload.folders", "pairload.camera", "pairload.makepairs", "pairload.demo")


def test_the_runtime_imports_no_offline_module():
    """Lazy imports included: a runtime module never reaches the packer, the folder readers, the camera files or the
    offline tools (dali-file's source, which reads dataset folders as it loads, is the one exception)."""
    found = [f"{mod} imports {target}" for mod, deps in package_imports().items() for target, _ in deps
             if mod.startswith(RUNTIME) and mod not in READS_FOLDERS and target.startswith(OFFLINE)]
    assert found == []
    assert any(mod.startswith("pairload.degrade") for mod in package_imports())  # the runtime side is found at all


def test_no_import_cycle_and_no_private_name_across_packages():
    graph = package_imports()
    private = [f"{mod} imports {target}.{name}" for mod, deps in graph.items() for target, name in deps
               if name.startswith("_") and not name.startswith("__") and target.split(".")[:2] != mod.split(".")[:2]]
    assert private == []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for target, _ in graph[mod]:
            assert state.get(target) != 1, "import cycle: " + " -> ".join(path[path.index(target):] + [target])
            if target not in state:
                visit(target, path + [target])
        state[mod] = 2

    for mod in graph:
        if mod not in state:
            visit(mod, [mod])


# attributes with a leading underscore that belong to other libraries (os._exit, namedtuple._replace,
# torch.cuda._sleep, argparse's _actions): not pairload's privates
NOT_PAIRLOAD = {"_exit", "_replace", "_asdict", "_fields", "_sleep", "_actions"}


def _private_reads(path) -> list[str]:
    """Where a test or benchmark file reads a private name of pairload: `from pairload… import _x`, `obj._x` on any
    object but `self`/`cls` (a test's own helper classes), and `setattr(obj, "_x", …)` (monkeypatching one)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pairload"):
            found += [f"{path}:{node.lineno}: imports {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in NOT_PAIRLOAD and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"{path}:{node.lineno}: reads .{node.attr}")
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "setattr"
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            found.append(f"{path}:{node.lineno}: patches {node.args[1].value}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_tests_and_benchmarks_use_only_public_names_of_pairload():
    """Benchmarks see inside a loader through its hooks (`pairload.hooks`) and public attributes; tests likewise."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = [hit for folder in ("tests", "benchmarks") for path in sorted((root / folder).rglob("*.py"))
             for hit in _private_reads(path)]
    assert found == []


def test_no_module_of_the_package_is_over_600_lines():
    from pathlib import Path

    import pairload

    long = {str(p): n for p in Path(pairload.__file__).parent.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert long == {}


def test_the_decode_process_imports_numpy_and_its_own_modules_only():
    """It starts with every loader over JPEG files (its import is on the path to the first batch): neither the readers
    nor the format modules, which `import pairload` once pulled in."""
    loaded = {m for m in _loaded_after("pairload.workers.decode") if m.startswith("pairload")}
    assert loaded <= {"pairload", "pairload.errors", "pairload.interrupts", "pairload.workers",
                      "pairload.workers.decode", "pairload.workers.jpegs", "pairload.workers.cudadrv"}, sorted(loaded)
