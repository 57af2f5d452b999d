"""Clean the notebooks in nbs/, or check that they are clean (``--check``).

Cleaning also (re)writes each chapter's install cell, the `#| hide` cell after `#| default_exp`,
from the one place each fact lives: the repository URL in _config.yml, the version in
annotated_transformer/__init__.py, and the extras from what the chapter imports.

It also (re)writes the chapter's running cost, plain text in a markdown cell tagged
`running-cost` right after the title cell (Colab shows it as the site does): how long the
page takes, what its first cell installs, what it downloads and what it trains first where
nothing is local, all from bench/results/chapter_times.json (bench/run_all.py writes it and
then cleans the chapters it ran). A page the file does not time gets no such cell.

nbval reads its cell tags (`nbval-ignore-output`, ...); the comment forms (`#| nbval-...`,
`# NBVAL_...`), which Colab would show, become tags.

``--check`` also fails on harness words in any code cell (a reader sees every cell in Colab,
hidden ones too): the quick switch, quick or shrunk runs, CI, nbval, the test command. A
chapter's shrunk sizes live in tools/shrunk.json (tools/shrunk.py), applied after its cell
tagged `parameters`, of which it has one at most.

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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shrunk  # noqa: E402  (tools/shrunk.py)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench/results/chapter_times.json"


MAX_LINE = 88  # wider code scrolls sideways in the book
MAX_CELL = 40  # lines of a code cell, `#|` lines aside: longer cells are split at a seam
KERNELSPEC = {"display_name": "python3", "language": "python", "name": "python3"}


# Once a release is on the package index, install cells pin it there (`name[extras]==version`);
# until then they install the repository at `SOURCE_REF` (chapter 11): `main` between releases,
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
    translator = (root / "annotated_transformer/translator.py").read_text()
    ref = re.search(r'^SOURCE_REF = "([^"]+)"', translator, re.M).group(1)
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
    cell = code[first[0]]           # its own list of modules is not the page's imports
    text = install_cell("\n".join("".join(c["source"]) for c in code if c is not cell))
    cell["source"] = text.splitlines(keepends=True)


RUNNING_COST = "running-cost"          # the tag of the running-cost cell
BEGIN, END = "<!-- running-cost: begin -->", "<!-- running-cost: end -->"


def load_results(path=RESULTS) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8")) if Path(path).exists() else {}


def install_spec(nb: dict) -> str | None:
    "The requirement the page's install cell installs: `annotated_transformer[...]`."
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "code" and text.startswith("#| hide") and "SPEC =" in text:
            m = re.search(r'SPEC = \(?\s*"(annotated_transformer(\[[^\]]*\])?)', text)
            return m.group(1) if m else None
    return None


def duration(seconds: float) -> str:
    "About how long: seconds under a minute and a half, else minutes."
    if seconds < 90:
        return f"{max(5, 5 * round(seconds / 5)):.0f} seconds"
    return f"{seconds / 60:.1f} minutes" if seconds < 600 else f"{seconds / 60:.0f} minutes"


def megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def running_cost(stem: str, nb: dict, results: dict) -> str | None:
    "The running-cost text of chapter `stem`, or None where the file has no time for it."
    run = results.get("chapters", {}).get(stem)
    if not run or run.get("status") != "ok":
        return None
    m = results["machine"]
    said = (f"**Running this page** takes about {duration(run['seconds'])} on "
            f"{m['hardware']} ({m['isa']})")
    gpu = results.get("gpu", {})
    if gpu.get("chapters", {}).get(stem, {}).get("status") == "ok":
        said += (f", about {duration(gpu['chapters'][stem]['seconds'])} on "
                 f"{gpu['machine']['gpu'] or gpu['machine']['hardware']}")
    said += "."
    spec = install_spec(nb)
    if spec:
        said += f" Its first cell installs `{spec}` where the package is missing."
    items = results.get("downloads", {}).get("items", {})
    fetched = [items[k] for k in results.get("downloads", {}).get("chapters", {}).get(stem, [])
               if items.get(k, {}).get("bytes")]
    if fetched:
        said += (" Without local copies it downloads "
                 + " and ".join(f"{i['what']} ({megabytes(i['bytes'])})" for i in fetched)
                 + ".")
    made = results.get("trains", {}).get("items", {})
    for k in results.get("trains", {}).get("chapters", {}).get(stem, []):
        if made.get(k, {}).get("seconds"):
            said += (f" Where {made[k]['what']} is not found beside it (a new runtime), "
                     f"it trains it first: about {duration(made[k]['seconds'])} more.")
    return f"{BEGIN}\n{said}\n{END}"


def _title_index(cells: list) -> int | None:
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and re.search(r"^# ", "".join(cell["source"]), re.M):
            return i
    return None


def _set_running_cost(nb: dict, stem: str, results: dict) -> None:
    "Write, move or remove the running-cost cell so that it follows the title cell."
    cells = nb["cells"]
    old = [c for c in cells if RUNNING_COST in c.get("metadata", {}).get("tags", [])]
    for c in old:
        cells.remove(c)
    text, at = running_cost(stem, nb, results), _title_index(cells)
    if text is None or at is None:
        return
    cell = old[0] if old else {"cell_type": "markdown", "id": RUNNING_COST,
                               "metadata": {"tags": [RUNNING_COST]}, "source": []}
    cell["source"] = text.splitlines(keepends=True)
    cells.insert(at + 1, cell)


NBVAL_DIRECTIVE = re.compile(r"^#\|\s*(nbval-[\w-]+)\s*$")
NBVAL_COMMENT = re.compile(r"^\s*#\s*(NBVAL_[A-Z_]+|PYTEST_VALIDATE_IGNORE_OUTPUT)\s*$")
NBVAL_TAGS = {"NBVAL_IGNORE_OUTPUT": "nbval-ignore-output",
              "PYTEST_VALIDATE_IGNORE_OUTPUT": "nbval-ignore-output",
              "NBVAL_CHECK_OUTPUT": "nbval-check-output",
              "NBVAL_RAISES_EXCEPTION": "nbval-raises-exception", "NBVAL_SKIP": "nbval-skip"}


def _nbval_lines_to_tags(nb: dict) -> None:
    "`#| nbval-...` and `# NBVAL_...` lines dropped, their meaning kept as cell tags."
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        kept, tags = [], []
        for line in "".join(c["source"]).splitlines(keepends=True):
            d, m = NBVAL_DIRECTIVE.match(line.rstrip("\n")), NBVAL_COMMENT.match(line)
            if d:
                tags.append(d.group(1))
            elif m and m.group(1) in NBVAL_TAGS:
                tags.append(NBVAL_TAGS[m.group(1)])
            else:
                kept.append(line)
        if tags:
            c["source"] = kept
            if kept:                                     # no newline left at the end
                kept[-1] = kept[-1].rstrip("\n")
            have = c.setdefault("metadata", {}).setdefault("tags", [])
            have += [t for t in tags if t not in have]


# harness words that no code cell may carry (Colab shows every cell, hidden ones too)
HARNESS = [(re.compile(r"\bAT_QUICK\b|\bQUICK\b"), "the quick switch"),
           (re.compile(r"\bshrunk\b|[a-z0-9]_quick\b|\bquick_|\bif quick\b"
                       r"|\bquick\s*(?:[:=,)]|runs?\b|mode\b|tests?\b)", re.I),
            "quick or shrunk runs"),
           (re.compile(r"\bCI\b"), "CI"), (re.compile(r"\bnbval\b|\bNBVAL_", re.I), "nbval"),
           (re.compile(r"\btest command\b", re.I), "the test command")]


def harness_words(source: str) -> list[str]:
    "What a code cell's source says of the harness: one finding per line."
    found = []
    for line in source.splitlines():
        what = [w for rx, w in HARNESS if rx.search(line)]
        if what:
            found.append(f"{' and '.join(what)}: {line.strip()[:70]}")
    return found


def _counts(nb):
    return [(c.get("execution_count"), [o.get("execution_count") for o in c.get("outputs", [])])
            for c in nb["cells"]]


def clean(nb, stem: str | None = None, results: dict | None = None):
    """Clean `nb`; with `stem`, also write its running-cost cell from `results` (default:
    bench/results/chapter_times.json)."""
    _nbval_lines_to_tags(nb)
    _set_install_cell(nb)
    if stem is not None:
        _set_running_cost(nb, stem, load_results() if results is None else results)
    counts = _counts(nb)                  # after the cells above, before nbdev nulls them
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
        out += [f"{path}: code cell {c.get('id')} speaks of {w} (the harness belongs in "
                "tools/shrunk.json and the cell tags)" for w in harness_words("".join(c["source"]))]
    try:
        shrunk.inject(nb, Path(path).stem)
    except shrunk.ShrunkError as e:
        out.append(f"{path}: {e}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true", help="report, change nothing; exit 1 if unclean")
    args = ap.parse_args()
    paths = args.paths or sorted(Path(get_config().nbs_path).glob("*.ipynb"))
    results = load_results()
    bad = [] if args.paths else shrunk.unknown()
    for p in paths:
        text = p.read_text(encoding="utf-8")
        nb = clean(json.loads(text), p.stem, results)
        new = dump(nb)
        if args.check:
            if new != text:
                bad.append(f"{p}: not clean (run: make clean-nbs)")
            if re.search(r'"#\|\s*nbval-|"\s*# NBVAL_', text):
                bad.append(f"{p}: nbval comment lines, which Colab shows (cleaning makes "
                           "them cell tags)")
            bad += problems(p, nb)
        elif new != text:
            p.write_text(new, encoding="utf-8")
            print(f"cleaned {p}")
    for b in bad:
        print(b, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
