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


LAYERS = {"run": 1, "engines": 2, "exports": 3, "cli": 4, "__main__": 4, "lab": 5}
LAYER_NAMES = ["core", "run", "engines", "exports", "cli", "lab"]


def module_name(path: Path, package: Path) -> str:
    "`run.trainer` for run/trainer.py, `engines` for engines/__init__.py, `model`, ..."
    parts = list(path.relative_to(package).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"


def layer(module: str) -> int:
    "0 for the core's modules (and the package itself), then run, engines, ..., lab."
    return LAYERS.get(module.split(".")[0], 0)


def import_graph(package: Path = None) -> dict[str, set[str]]:
    """Which of the package's modules each of its modules imports, relative
    (`from .x import`, `from ..x import`, `from . import x`) or absolute
    (`from annotated_transformer.x import`, `import annotated_transformer.x`): each
    named by `module_name`, the package itself "__init__"."""
    package = package or PACKAGE
    name = "annotated_transformer"
    known = {module_name(p, package) for p in package.rglob("*.py")}

    def resolve(dotted: str, names) -> set[str]:
        "The modules that importing `names` from `dotted` ('': the package) loads."
        found = set()
        for a in names or [None]:
            full = ".".join(x for x in (dotted, a.name if a else "") if x)
            found.add(full if full in known else dotted if dotted in known
                      else dotted.split(".")[0] if dotted else "__init__")
        return found

    graph = {}
    for path in sorted(package.rglob("*.py")):
        if path.name == "_modidx.py":
            continue
        here = module_name(path, package)
        inside = [] if here == "__init__" else here.split(".")
        base = inside if path.name == "__init__.py" else inside[:-1]  # its package
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                up = base[:len(base) - (node.level - 1)]
                deps |= resolve(".".join(up + [node.module or ""]).strip("."),
                                node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and (
                    node.module == name or node.module.startswith(name + ".")):
                deps |= resolve(node.module[len(name) + 1:], node.names)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith(name + "."):
                        deps |= resolve(a.name[len(name) + 1:], None)
        graph[here] = deps - {here}
    return graph


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    "Each import of a module of a later layer (core < run < engines < exports < cli)."
    return sorted(f"{m} ({LAYER_NAMES[layer(m)]}) imports {d} ({LAYER_NAMES[layer(d)]})"
                  for m, deps in graph.items() for d in deps
                  if d != "__init__" and layer(d) > layer(m))


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


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert {"formats", "run.processes", "batching", "training", "engines.static",
            "exports.onnx", "cli"} <= set(graph)
    assert cycles({k: v for k, v in graph.items() if k != "__init__"}) == []
    # the package imports its modules; none of them imports the package back
    assert not any("__init__" in deps for deps in graph.values())


def test_imports_run_one_way_through_the_layers():
    """core <- run <- engines <- exports <- the command line: the core imports neither
    subpackage, the machinery no engine, and nothing below imports the command line."""
    graph = import_graph()
    assert upward_imports(graph) == []
    assert {d for m, deps in graph.items() if layer(m) == 0 for d in deps} <= {
        m for m in graph if layer(m) == 0}


def test_the_layer_scan_would_catch_an_upward_import(tmp_path):
    (tmp_path / "__init__.py").write_text("from .model import f\n")
    (tmp_path / "model.py").write_text("def f():\n    from .run.trainer import train\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "__init__.py").write_text("")
    (tmp_path / "run" / "trainer.py").write_text("from ..model import f\n"
                                                 "import annotated_transformer.cli\n")
    (tmp_path / "cli.py").write_text("from annotated_transformer.run import trainer\n")
    graph = import_graph(tmp_path)
    assert graph["run.trainer"] == {"model", "cli"} and graph["cli"] == {"run.trainer"}
    assert upward_imports(graph) == ["model (core) imports run.trainer (run)",
                                     "run.trainer (run) imports cli (cli)"]


def test_the_cycle_check_would_catch_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_scan_reads_absolute_imports(tmp_path):
    "The old cycle: a module importing the package's version from the package itself."
    (tmp_path / "__init__.py").write_text("from .cli import main\n__version__ = '1'\n")
    (tmp_path / "cli.py").write_text("from annotated_transformer import __version__\n")
    (tmp_path / "model.py").write_text("import annotated_transformer.cli\n"
                                       "from annotated_transformer.lab import copying\n")
    graph = import_graph(tmp_path)
    assert graph["cli"] == {"__init__"} and graph["model"] == {"cli", "lab"}
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


def test_no_module_over_300_lines():
    "One job per module: a module past 300 lines is doing too much (issues 38 and 55)."
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.rglob("*.py") if p.name != "_modidx.py"}   # nbdev's index
    assert {name: n for name, n in sizes.items() if n > 300} == {}
