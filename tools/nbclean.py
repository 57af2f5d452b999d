"""Clean the notebooks in nbs/, or check that they are clean (``--check``).

"Clean" is nbdev's ``clean_nb`` (configured in pyproject.toml to keep cell tags) with one difference:
execution counts are kept, because nbval refuses to compare a cell whose stored count is empty
("Unrun reference cell has outputs"). We also require the counts to run 1, 2, 3, ... down the notebook:
that is the mark of a notebook executed top to bottom in one kernel, so stored outputs belong to the code.
"""
import argparse
import json
import sys
from pathlib import Path

from nbdev.clean import clean_nb
from nbdev.config import get_config


MAX_LINE = 88  # wider code scrolls sideways in the book
KERNELSPEC = {"display_name": "python3", "language": "python", "name": "python3"}


def _counts(nb):
    return [(c.get("execution_count"), [o.get("execution_count") for o in c.get("outputs", [])])
            for c in nb["cells"]]


def clean(nb):
    counts = _counts(nb)
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
