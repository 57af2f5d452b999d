"""Clean the notebooks in nbs/, or check that they are clean (``--check``).

Cleaning also (re)writes each chapter's install cell, the `#| hide` cell after `#| default_exp`,
from the one place each fact lives: the repository URL in _config.yml, the version in
annotated_transformer/__init__.py, and the extras from what the chapter imports.

"Clean" is nbdev's ``clean_nb`` (configured in pyproject.toml to keep cell tags) with one difference:
execution counts are kept, because nbval refuses to compare a cell whose stored count is empty
("Unrun reference cell has outputs"). We also require the counts to run 1, 2, 3, ... down the notebook:
that is the mark of a notebook executed top to bottom in one kernel, so stored outputs belong to the code.
"""
import argparse
import json
import re
import sys
import textwrap
from pathlib import Path

import yaml

from nbdev.clean import clean_nb
from nbdev.config import get_config


MAX_LINE = 88  # wider code scrolls sideways in the book
MAX_CELL = 40  # lines of a code cell, `#|` lines aside: longer cells are split at a seam
KERNELSPEC = {"display_name": "python3", "language": "python", "name": "python3"}


# Once a release is on the package index, install cells pin it there (`name[extras]==version`);
# until then they install the repository at `SOURCE_REF` (part 11a): `main` between releases,
# the release's tag in a release commit.
ON_INDEX = False
EXTRAS = {"data": r"\b(sentencepiece|sacrebleu|datasets)\b|annotated_transformer(\.data|\.run\.hub|\.run\.pretrained|\.translator|\.run\.recipe|\.cli)?"
          r" import|^import annotated_transformer$", "viz": r"\bmatplotlib\b",
          "deploy": r"\bctranslate2\b", "web": r"\bonnxruntime\b"}
# what each extra brings, by import name: the cell installs where one of them is missing
MODULES = {"data": ("sentencepiece", "datasets", "sacrebleu"), "viz": ("matplotlib",),
           "deploy": ("ctranslate2",), "web": ("onnx", "onnxscript", "onnxruntime")}
INSTALL_CELL = '''\
#| hide
# Installs the package at the version this page was built from, with the extras this
# page imports, where it is missing or older (Colab, Kaggle, a new Jupyter).
import importlib, importlib.metadata, importlib.util, re, subprocess, sys

BOOK_VERSION = "{version}"
SPEC = {spec}
# the modules of the extras this page imports: one missing means the extra is missing
NEEDS = {needs}


def _parts(version):
    return tuple(int(x) for x in re.findall(r"\\d+", version)[:3])


try:
    _have = _parts(importlib.metadata.version("annotated_transformer"))
except importlib.metadata.PackageNotFoundError:
    _have = None
_missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
if _have is None or _have < _parts(BOOK_VERSION) or _missing:
    _pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", SPEC],
                          capture_output=True, text=True)
    if _pip.returncode:                    # pip's own words first, then what to do
        _said = (_pip.stdout + _pip.stderr).splitlines()[-12:]
        print(*_said, sep="\\n", file=sys.stderr)
        raise SystemExit(f"pip could not install the book's package (its last lines "
                         f"are above). Run  pip install \'{{SPEC}}\'  and restart.")
    importlib.invalidate_caches()'''


def install_cell(code: str) -> str:
    "The install cell for a chapter whose code cells are `code`."
    root = Path(__file__).resolve().parent.parent
    url = yaml.safe_load((root / "_config.yml").read_text())["repository"]["url"]
    init = (root / "annotated_transformer/__init__.py").read_text()
    version = re.search(r'__version__ = "([^"]+)"', init).group(1)
    hub = (root / "annotated_transformer/run/hub.py").read_text()
    ref = re.search(r'^SOURCE_REF = "([^"]+)"', hub, re.M).group(1)
    chosen = [k for k, rx in EXTRAS.items() if re.search(rx, code, re.M)]
    extras = ",".join(chosen)
    needs = tuple(m for k in chosen for m in MODULES[k])
    name = f"annotated_transformer[{extras}]" if extras else "annotated_transformer"
    if ON_INDEX:
        spec = f'"{name}=={version}"'
    else:
        spec = f'("{name} @ "\n        "git+{url}@{ref}")'
    words = textwrap.wrap(" ".join(needs), 70, break_on_hyphens=False) or [""]
    joined = "\n         ".join(f'"{w} "' if i < len(words) - 1 else f'"{w}"'
                               for i, w in enumerate(words))
    return INSTALL_CELL.format(version=version, spec=spec, needs=f"({joined}).split()")


def _set_install_cell(nb):
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    first = [i for i, c in enumerate(code) if "".join(c["source"]).startswith("#| hide")]
    if not first or first[0] > 1:
        return
    cell = code[first[0]]
    text = install_cell("\n".join("".join(c["source"]) for c in code))
    cell["source"] = text.splitlines(keepends=True)


def _counts(nb):
    return [(c.get("execution_count"), [o.get("execution_count") for o in c.get("outputs", [])])
            for c in nb["cells"]]


def clean(nb):
    counts = _counts(nb)
    _set_install_cell(nb)
    cfg = get_config()
    clean_nb(nb, allowed_metadata_keys=cfg.get("allowed_metadata_keys") or [],
             allowed_cell_metadata_keys=cfg.get("allowed_cell_metadata_keys") or [],
             clean_ids=cfg.clean_ids)
    nb["metadata"].pop("jupytext", None)
    # the book's syntax highlighting reads the language from here
    nb["metadata"]["kernelspec"] = KERNELSPEC
    for c, (count, outs) in zip(nb["cells"], counts):
        if c["cell_type"] != "code":
            continue
        c["execution_count"] = count
        for o, oc in zip(c.get("outputs", []), outs):
            if "execution_count" in o:
                o["execution_count"] = oc
    return nb


def dump(nb):
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def problems(path, nb):
    out = []
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in code]
    if counts != list(range(1, len(code) + 1)):
        out.append(f"{path}: execution counts are {counts}, expected 1..{len(code)}: "
                   "run the notebook top to bottom (make execute NB=...)")
    for c in code:
        shown = [l for l in "".join(c["source"]).splitlines() if not l.startswith("#|")]
        if len(shown) > MAX_CELL:
            out.append(f"{path}: code cell {c.get('id')} has {len(shown)} lines > {MAX_CELL} "
                       f"(split it where it can be checked): {shown[0][:60]}...")
        for line in "".join(c["source"]).splitlines():
            if len(line) > MAX_LINE and not line.startswith("#|"):
                out.append(f"{path}: code line of {len(line)} > {MAX_LINE} characters "
                           f"(it would scroll in the book): {line[:60]}...")
        for o in c.get("outputs", []):
            if o.get("output_type") == "error":
                out.append(f"{path}: stored error output in cell {c.get('id')}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true", help="report, change nothing; exit 1 if unclean")
    args = ap.parse_args()
    paths = args.paths or sorted(Path(get_config().nbs_path).glob("*.ipynb"))
    bad = []
    for p in paths:
        text = p.read_text(encoding="utf-8")
        nb = clean(json.loads(text))
        new = dump(nb)
        if args.check:
            if new != text:
                bad.append(f"{p}: not clean (run: make clean-nbs)")
            bad += problems(p, nb)
        elif new != text:
            p.write_text(new, encoding="utf-8")
            print(f"cleaned {p}")
    for b in bad:
        print(b, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
