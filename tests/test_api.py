"""The package's public surface: a curated `__all__`, and every submodule reachable.

Each check runs in a fresh interpreter, because what `import annotated_transformer` binds
depends on what was imported before it, and the tests before this one import submodules.
"""
import json
import subprocess
import sys
from pathlib import Path

import annotated_transformer

PACKAGE = Path(annotated_transformer.__file__).parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py")       # the core's: not the CLI,
                 if not p.stem.startswith("_") and p.stem != "cli")   # __init__, _modidx
LAYERS = ("run", "engines", "exports", "lab")                   # subpackages: not loaded


def fresh(code: str):
    "Run `code` in a new interpreter and return what it prints as JSON."
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_a_plain_import_loads_the_core_alone():
    """`import annotated_transformer` loads the core's modules, each reachable by name,
    and nothing of the machinery, the engines, the exports, the lab or the CLI."""
    loaded = fresh("import json, sys, annotated_transformer\n"
                   "print(json.dumps(sorted(m for m in sys.modules"
                   " if m.startswith('annotated_transformer.'))))")
    assert loaded == [f"annotated_transformer.{m}" for m in MODULES], loaded
    assert all((PACKAGE / layer / "__init__.py").is_file() for layer in LAYERS)
    kinds = fresh("import json, types, annotated_transformer as at\n"
                  f"print(json.dumps({{m: isinstance(getattr(at, m, None), types.ModuleType)"
                  f" for m in {MODULES!r}}}))")
    assert kinds == {m: True for m in MODULES}, kinds
    # the example CONTRIBUTING.md gives, after a plain import: the fastest device present
    got = fresh("import annotated_transformer, json\n"
                "print(json.dumps(annotated_transformer.utils.default_device().type))")
    import torch
    want = ("cuda" if torch.cuda.is_available()
            else "mps" if torch.backends.mps.is_available() else "cpu")
    assert got == want


def test_all_is_curated():
    names = fresh("import json, annotated_transformer as at\nprint(json.dumps(at.__all__))")
    assert len(names) == len(set(names))
    assert not [n for n in names if n.startswith("_")]
    assert not set(names) & set(MODULES)             # no name shadows a submodule
    assert not [n for n in names if n.endswith("_FILE")]          # file-name constants
    assert "main" not in names                                    # the CLI's internals
    assert len(names) <= 40, len(names)          # a top level a reader can hold (#55)
    core = {"make_model", "TransformerConfig", "MultiHeadAttention", "Transformer",
            "train_step", "beam_search", "greedy_decode", "Translator",
            "load_multi30k", "corpus_bleu", "label_smoothing_loss", "lrate",
            "PAD_ID", "BOS_ID", "EOS_ID",
            "TruncationWarning"}                                # the warning to filter
    assert core <= set(names), sorted(core - set(names))


def test_star_import_gives_exactly_all():
    got = fresh("import json\nbefore = set(dir())\nfrom annotated_transformer import *\n"
                "import annotated_transformer as at\n"
                "print(json.dumps([sorted(set(dir()) - before - {'at', 'before'}),"
                " sorted(at.__all__)]))")
    assert got[0] == got[1]
