"""Modules use each other's public names only: no `from .x import _private` anywhere in the
package, the lab included (issue "Core and lab"). A private name is one module's business."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "annotated_transformer"


def private_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_modidx.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            ours = isinstance(node, ast.ImportFrom) and (
                node.level > 0 or (node.module or "").startswith("annotated_transformer"))
            if ours:
                found += [f"{path.relative_to(PACKAGE)}: {node.module}.{a.name}"
                          for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_the_scan_reads_every_module():
    assert len(list(PACKAGE.rglob("*.py"))) >= 20


def test_no_private_name_crosses_a_module():
    assert private_imports() == []


def test_the_scan_would_catch_one(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text("from .b import _secret, public\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path)
    assert private_imports() == ["a.py: b._secret"]


def core_graph(package: Path = None) -> dict[str, set[str]]:
    """Which core modules each core module imports, relative (`from .x import ...`,
    `from . import x`) or absolute (`from annotated_transformer.x import ...`,
    `import annotated_transformer.x`, `from annotated_transformer import x`)."""
    package = package or PACKAGE
    graph, stems = {}, {p.stem for p in package.glob("*.py")}
    name = "annotated_transformer"

    def target(module: str, names) -> set[str]:
        "The core modules (or the package, '__init__') that importing `names` loads."
        if module:
            first = module.split(".")[0]
            return {first if first in stems else "__init__"}
        return {a.name if a.name in stems else "__init__" for a in names}

    for path in sorted(package.glob("*.py")):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= target(node.module, node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                    node.module == name or node.module.startswith(name + ".")):
                rest = node.module[len(name) + 1:]
                if not rest.startswith("lab"):
                    deps |= target(rest, node.names)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith(name + ".") and not a.name.startswith(name + ".lab"):
                        deps |= target(a.name[len(name) + 1:], [])
        graph[path.stem] = deps - {path.stem}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    "The import cycles of `graph`, each as a path that comes back to its start."
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                found.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_core_has_no_import_cycle():
    graph = core_graph()
    assert {"formats", "distributed", "batching", "training"} <= set(graph)
    assert cycles({k: v for k, v in graph.items() if k != "__init__"}) == []
    # the package imports its modules; none of them imports the package back
    assert not any("__init__" in deps for deps in graph.values())


def test_the_cycle_check_would_catch_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_scan_reads_absolute_imports(tmp_path):
    "The old cycle: a module importing the package's version from the package itself."
    (tmp_path / "__init__.py").write_text("from .cli import main\n__version__ = '1'\n")
    (tmp_path / "cli.py").write_text("from annotated_transformer import __version__\n")
    (tmp_path / "model.py").write_text("import annotated_transformer.cli\n"
                                       "from annotated_transformer.lab import copying\n")
    graph = core_graph(tmp_path)
    assert graph["cli"] == {"__init__"} and graph["model"] == {"cli"}
    assert any("__init__" in deps for deps in graph.values())   # what the test above refuses


def absolute_self_imports(package: Path = PACKAGE) -> list[str]:
    """Imports of the package by its own name inside it. nbdev makes
    `from annotated_transformer.x import ...` relative, but misses a parenthesised import
    whose last line is shorter than its first (it slices the first line at the last
    line's end column); an absolute self-import ties the code to the installed name."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "_modidx.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import)
                     else [])
            found += [f"{path.relative_to(package)}:{node.lineno}: {name}" for name in names
                      if name.split(".")[0] == "annotated_transformer"]
    return found


def test_no_module_imports_the_package_by_name():
    assert absolute_self_imports() == []


def test_the_self_import_scan_would_catch_one(tmp_path):
    (tmp_path / "a.py").write_text("from annotated_transformer.training import (\n"
                                   "    evaluate,\n    lrate)\nimport annotated_transformer\n")
    assert absolute_self_imports(tmp_path) == [
        "a.py:1: annotated_transformer.training", "a.py:4: annotated_transformer"]


def test_no_core_module_over_300_lines():
    "One concern per module: a core module past 300 lines is doing too much (issue 38)."
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.glob("*.py") if p.name != "_modidx.py"}   # nbdev's index
    assert {name: n for name, n in sizes.items() if n > 300} == {}
