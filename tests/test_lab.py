"""The library and the lab: `annotated_transformer.lab` (chapters 12–14) imports the core,
the core never imports the lab, and a plain `import annotated_transformer` loads none of it.

What an import binds depends on what was imported before it, so the import checks run in
a fresh interpreter each.
"""
import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "annotated_transformer"
CORE = sorted(p.stem for p in PACKAGE.glob("*.py")             # the core: not the CLI
              if not p.stem.startswith("_") and p.stem != "cli")
LAB = sorted(p.stem for p in (PACKAGE / "lab").glob("*.py") if not p.stem.startswith("_"))


def fresh(code: str):
    "Run `code` in a new interpreter and return what it prints as JSON."
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_the_lab_holds_its_kits_and_the_core_does_not():
    assert LAB == ["ablations", "analysis", "complexity", "copying", "figures"]
    assert not set(LAB) & set(CORE), "a chapter of the lab is still a core module"
    assert "lab" not in CORE


def test_a_plain_import_loads_the_core_only():
    got = fresh("import json, sys, types, annotated_transformer as at\n"
                "print(json.dumps({'lab': sorted(m for m in sys.modules"
                " if m.startswith('annotated_transformer.lab')),"
                " 'bound': hasattr(at, 'lab'),"
                f" 'core': {{m: isinstance(getattr(at, m, None), types.ModuleType)"
                f" for m in {CORE!r}}}}}))")
    assert got["lab"] == [] and not got["bound"], got
    assert got["core"] == {m: True for m in CORE}, got["core"]


def test_the_lab_imports_and_its_names_resolve():
    got = fresh("import json, types, annotated_transformer.lab as lab\n"
                "import annotated_transformer as at\n"
                "print(json.dumps({'all': lab.__all__, 'at_lab': at.lab is lab,"
                " 'where': {n: getattr(lab, n).__module__ for n in lab.__all__"
                " if hasattr(getattr(lab, n), '__module__')},"
                " 'missing': [n for n in lab.__all__ if not hasattr(lab, n)],"
                f" 'mods': {{m: isinstance(getattr(lab, m, None), types.ModuleType)"
                f" for m in {LAB!r}}}}}))")
    assert got["at_lab"], "annotated_transformer.lab is not reachable as an attribute"
    assert got["missing"] == [], got["missing"]
    assert got["mods"] == {m: True for m in LAB}, got["mods"]
    names = got["all"]
    assert names and len(names) == len(set(names))
    assert not set(names) & set(LAB), "a name shadows a module of the lab"
    assert {"LocalSelfAttention", "restricted_attention", "head_mask", "head_gradients",
            "attention_modules", "run_variant", "fit_power_law",
            "copy_task", "train_copy_model", "transformer_figure",
            "attention_figure"} <= set(names)
    # each name is the lab's own, defined in one of its modules (not a core name re-exported)
    assert {m.rsplit(".", 1)[0] for m in got["where"].values()} == {
        "annotated_transformer.lab"}, got["where"]
    star = fresh("import json\nbefore = set(dir())\nfrom annotated_transformer.lab import *\n"
                 "print(json.dumps(sorted(set(dir()) - before - {'before'})))")
    assert star == sorted(names)


def test_the_top_level_lists_no_lab_name():
    got = fresh("import json, annotated_transformer as at, annotated_transformer.lab as lab\n"
                "print(json.dumps([at.__all__, lab.__all__]))")
    top, lab = got
    assert not set(top) & set(lab), sorted(set(top) & set(lab))
    assert "lab" not in top


def _imports(path: Path):
    "Every module an import statement in `path` names, made absolute."
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            # a core module sits at the package's top: `.x` is annotated_transformer.x
            base = ("annotated_transformer." * bool(node.level) + (node.module or "")).rstrip(".")
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)


def test_no_core_module_imports_the_lab():
    bad = {p.name: sorted(m for m in _imports(p)
                          if m == "annotated_transformer.lab"
                          or m.startswith("annotated_transformer.lab.")
                          or m == "lab" or m.startswith("lab."))
           for p in PACKAGE.glob("*.py")}
    assert not {k: v for k, v in bad.items() if v}, bad


def test_the_wheel_carries_the_lab():
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]
    found = find_packages(where=str(ROOT), include=find["include"])
    assert {"annotated_transformer", "annotated_transformer.lab"} <= set(found), found


def test_the_sweep_is_a_data_file_not_constants_of_the_lab():
    from annotated_transformer.lab import ablations
    from annotated_transformer.model import TransformerConfig
    from annotated_transformer.run.trainer import TrainConfig
    assert not [n for n in ablations.__all__ if n.isupper()], ablations.__all__
    for name in ("table3_variants.json", "table3_paired.json", "table3_seeds.json"):
        spec = json.loads((ROOT / "bench" / name).read_text())
        runs = ablations.expand_variants(spec)
        assert len({r["name"] for r in runs}) == len(runs) == len(spec["variants"])
        for r in runs:                               # every run can be built
            TransformerConfig(**r["model"]), TrainConfig(**r["train"])


def test_the_seed_sweep_pairs_with_the_first():
    "Chapter 14 merges the two sweeps by run name: the same base, no name in both."
    from annotated_transformer.lab import ablations
    first, more = (json.loads((ROOT / "bench" / n).read_text())
                   for n in ("table3_paired.json", "table3_seeds.json"))
    assert first["base"] == more["base"]
    names = [{r["name"] for r in ablations.expand_variants(s)} for s in (first, more)]
    assert not names[0] & names[1], sorted(names[0] & names[1])[:5]
