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
