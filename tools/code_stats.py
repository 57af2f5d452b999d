"""The shape of the package, for the notes of issue "Core and lab": lines per module
(core and lab), the names `import annotated_transformer` offers, the longest functions,
and whether any core module imports another's private name or the lab (exit status 1 if one
does).

    python tools/code_stats.py [--json]
"""
import ast
import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "annotated_transformer"


def modules() -> dict[str, int]:
    "Lines of each module, `_modidx.py` (nbdev's index) left out."
    return {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
            for p in sorted(PACKAGE.rglob("*.py")) if p.name != "_modidx.py"}


def longest_functions(n: int = 3) -> list[tuple[int, str]]:
    "The `n` longest functions or methods of the core, as (lines, module:name)."
    found = []
    for p in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.end_lineno - node.lineno + 1, f"{p.stem}:{node.name}"))
    return sorted(found, reverse=True)[:n]


def top_level_names() -> int:
    code = "import annotated_transformer as a; print(len(a.__all__))"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True,
                              text=True, check=True).stdout)


def crossings() -> list[str]:
    "Core modules that import another module's private name, or the lab."
    found = []
    for p in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            ours = node.level > 0 or module.startswith("annotated_transformer")
            if ours and (module.startswith("lab") or ".lab" in module
                         or any(a.name == "lab" for a in node.names)):
                found.append(f"{p.stem}: imports the lab")
            if ours:
                found += [f"{p.stem}: {module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def main() -> None:
    lines = modules()
    core = {k: v for k, v in lines.items() if not k.startswith("lab/")}
    lab = {k: v for k, v in lines.items() if k.startswith("lab/")}
    stats = {"core_modules": len(core), "core_lines": sum(core.values()),
             "core_max": max(core.items(), key=lambda kv: kv[1]),
             "core_over_300": sorted(k for k, v in core.items() if v > 300),
             "lab_modules": len(lab), "lab_lines": sum(lab.values()),
             "top_level_names": top_level_names(),
             "longest_functions": longest_functions(), "crossings": crossings()}
    if "--json" in sys.argv:
        print(json.dumps(stats, indent=1))
        return
    for k, v in stats.items():
        print(f"{k}: {v}")
    sys.exit(1 if stats["crossings"] else 0)


if __name__ == "__main__":
    main()
