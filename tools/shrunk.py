"""Shrunk runs of the chapters: smaller sizes, set by the tooling, never by a cell a reader sees.

A chapter whose full run is slow puts the sizes it uses in one ordinary code cell tagged
`parameters` (a reader's knobs: `COPY_STEPS = 1200  # updates; ...`). tools/shrunk.json
maps a notebook's stem to the code that a shrunk run executes right after that cell:

    {"08_copy": "COPY_STEPS, MIN_COPIED = 30, 0.0"}

Everything that runs a chapter shrunk inserts that code as a cell of its own, in memory or
in a copy, never in the notebook in nbs/:
- the notebooks' pytest runs in the checkout with AT_QUICK set (the test command sets it):
  the root conftest.py wraps nbval's collector (`ShrunkNotebook` below);
- tools/fresh_runtime.sh: `python tools/shrunk.py COPY.ipynb` on the copy it runs;
- bench/run_notebooks.py with AT_QUICK set: `inject` before executing.
A notebook named in the file without a `parameters` cell, or with two, is an error wherever
it is read (`inject`, `problems`), and so is a name with no notebook.

    python tools/shrunk.py --check                  # the file against nbs/
    python tools/shrunk.py RUN/08_copy.ipynb        # inject into that copy, in place
"""
import argparse
import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "tools/shrunk.json"
TAG = "parameters"
# the inserted cell: its output is not compared (a shrunk run prints what it prints)
INJECTED_TAGS = ["injected-shrunk-sizes", "nbval-ignore-output"]


class ShrunkError(ValueError):
    "tools/shrunk.json and a notebook disagree."


def table(path: Path = TABLE) -> dict[str, str]:
    "The shrunk code of each notebook stem (empty where the file is missing)."
    if not Path(path).exists():
        return {}
    found = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(found, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise ShrunkError(f"{path}: expected one JSON object of notebook stem -> code")
    return found


def _tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", []) or []


def parameters_index(nb: dict, name: str = "notebook") -> int | None:
    "Index (in `nb['cells']`) of the code cell tagged `parameters`; None if there is none."
    found = [i for i, c in enumerate(nb["cells"]) if TAG in _tags(c)]
    if len(found) > 1:
        raise ShrunkError(f"{name}: {len(found)} cells tagged {TAG!r} (cells {found}); "
                          "a chapter's sizes live in one")
    if found and nb["cells"][found[0]]["cell_type"] != "code":
        raise ShrunkError(f"{name}: the cell tagged {TAG!r} is not a code cell")
    return found[0] if found else None


def shrunk_cell(code: str) -> dict:
    "The cell a shrunk run executes after the `parameters` cell."
    return {"cell_type": "code", "execution_count": None, "id": "shrunk-sizes",
            "metadata": {"tags": list(INJECTED_TAGS)}, "outputs": [],
            "source": code}


def code_for(stem: str, shrunk: dict | None = None) -> str | None:
    "The shrunk code of notebook `stem`, or None."
    return (table() if shrunk is None else shrunk).get(stem)


def inject(nb: dict, stem: str, shrunk: dict | None = None) -> dict:
    """A copy of `nb` with the shrunk code of `stem` (tools/shrunk.json) inserted after
    its `parameters` cell; `nb` itself where the file names no code for it."""
    code = code_for(stem, shrunk)
    at = parameters_index(nb, stem)               # two of them fail here, named or not
    if code is None:
        return nb
    if at is None:
        raise ShrunkError(f"tools/shrunk.json has sizes for {stem}, which has no code "
                          f"cell tagged {TAG!r} to run them after")
    nb = copy.deepcopy(nb)
    nb["cells"].insert(at + 1, shrunk_cell(code))
    return nb


def unknown(nbs: Path = ROOT / "nbs", shrunk: dict | None = None) -> list[str]:
    "The names in tools/shrunk.json that no notebook in `nbs` has, as problems."
    shrunk = table() if shrunk is None else shrunk
    return [f"tools/shrunk.json: {stem}: no notebook nbs/{stem}.ipynb" for stem in sorted(shrunk)
            if not (Path(nbs) / f"{stem}.ipynb").exists()]


def problems(nbs: Path = ROOT / "nbs", shrunk: dict | None = None) -> list[str]:
    "What is wrong between tools/shrunk.json and the notebooks in `nbs`."
    shrunk = table() if shrunk is None else shrunk
    out = unknown(nbs, shrunk)
    for path in sorted(Path(nbs).glob("*.ipynb")):
        try:
            inject(json.loads(path.read_text(encoding="utf-8")), path.stem, shrunk)
        except ShrunkError as e:
            out.append(f"{path}: {e}")
    return out


def inject_file(path: Path, stem: str | None = None) -> bool:
    "Inject into the notebook file `path` (a copy, never nbs/); whether it changed."
    path = Path(path)
    if path.resolve().parent == (ROOT / "nbs").resolve():
        raise ShrunkError(f"{path}: inject into a copy, not the notebook in nbs/")
    nb = json.loads(path.read_text(encoding="utf-8"))
    new = inject(nb, stem or path.stem)
    if new is not nb:
        path.write_text(json.dumps(new, indent=1, ensure_ascii=False) + "\n",
                        encoding="utf-8")
    return new is not nb


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", type=Path, help="copies to inject into")
    ap.add_argument("--check", action="store_true",
                    help="check tools/shrunk.json against nbs/ and exit")
    args = ap.parse_args(argv)
    try:
        if args.check:
            bad = problems()
            print(*bad, sep="\n", file=sys.stderr)
            return 1 if bad else 0
        for path in args.notebooks:
            if inject_file(path):
                print(f"{path}: shrunk sizes after its {TAG!r} cell")
    except ShrunkError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
