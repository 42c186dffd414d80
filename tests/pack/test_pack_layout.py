"""The import rules of `pairload/pack/`: its modules import no private name (from each other or any other package)
and form no import cycle: upload builds on the local packer, never on the entry point that calls it."""

import ast
from pathlib import Path

import pairload.pack

PACK = Path(pairload.pack.__file__).parent


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import of `path`, lazy ones included; relative imports
    resolved against `pairload.pack`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = "pairload.pack" if node.level == 1 else "pairload" if node.level == 2 else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            out.append((module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def test_no_module_of_pack_imports_a_private_name():
    private = []
    for path in sorted(PACK.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        siblings = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    and node.level == 1 and not node.module for a in node.names}  # `from . import guard`
        private += [f"{path.name}: {module}.{name}" for module, names in _imports(path) for name in names
                    if name.startswith("_") and not name.startswith("__")]
        private += [f"{path.name}: {node.value.id}.{node.attr}" for node in ast.walk(tree)
                    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in siblings and node.attr.startswith("_")]
    assert private == []


def test_the_modules_of_pack_form_no_import_cycle():
    graph = {}
    stems = {p.stem for p in PACK.glob("*.py")}
    for path in PACK.glob("*.py"):
        deps = set()
        for module, names in _imports(path):
            deps.add(module)
            deps.update(f"{module}.{n}" for n in names)  # `from . import guard`
        graph[f"pairload.pack.{path.stem}"] = {d for d in deps if d.startswith("pairload.pack.")
                                               and d.removeprefix("pairload.pack.") in stems}
    state: dict[str, int] = {}

    def visit(node, trail):
        if state.get(node) == 1:
            raise AssertionError("import cycle: " + " -> ".join(trail[trail.index(node):] + [node]))
        if state.get(node) != 2:
            state[node] = 1
            for dep in sorted(graph.get(node, ())):
                visit(dep, trail + [node])
            state[node] = 2

    for node in sorted(graph):
        visit(node, [])
    assert "pairload.pack.writer" not in graph["pairload.pack.upload"]

