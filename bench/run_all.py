"""Run every chapter as a reader does, top to bottom in a Jupyter kernel, and time each one.

No quick mode: each chapter runs exactly what its page shows, with the data in
../shared/data (the Hub copy where it is missing) and the shipped model in models/. The
notebooks are not changed; each executed copy goes to a temporary folder. A chapter that runs
past the limit (50 minutes by default, room for the longest chapter on a slow hour) is stopped
and reported as such: the book promises that none does.

    python bench/run_all.py                 # every chapter, 2 threads (the default here)
    python bench/run_all.py nbs/09_decoding.ipynb --limit 600   # a tighter limit
    python bench/run_all.py nbs/13_inside.ipynb --store   # also keep its outputs

`--store` writes the executed notebook back in place (as `make execute` does, then
tools/nbclean.py), so one run both times a chapter and stores the outputs the book shows.

The times go to bench/results/chapter_times.json, with the commit, the processor, its
instruction set and the thread count, and the machine's one-minute load average before and
after each chapter (a load above the thread count means other work shared the cores). The
table between the `chapter-times` markers in book/intro.md is written from that file
(`--table-only` rewrites the table alone), in the order of _toc.yml's parts, Part I first,
with Part I's total. A run on a machine with a GPU
goes to the file's `gpu` section instead, beside the CPU times.

The file also records what each chapter downloads where a reader has nothing (Colab: no
checkout, no data, no model): its `downloads` section is computed by `downloads()` on every
write, from two facts, both read from the repository rather than typed:
- which chapters fetch what: a chapter fetches the Multi30k data from the Hub where a visible
  code cell (not `#| export`, not `#| hide`) calls `load_multi30k(` or one of the
  functions that call it, `train_translation(` (part 11c) and `ablation_data(` (14), which read
  the Hub copy when no local folder is found; and the shipped model where such a
  cell names it, `multi30k_en_de` (quoted, or a folder whose name is passed:
  `Path("../models/multi30k_en_de")`), as the fallback that `resolve_model` downloads;
- the sizes: the model is config.json and the files it lists (what `download_model`
  fetches), measured in models/; the data is the Hub copy's three JSON-lines files, rebuilt
  from the text files in ../shared/data/multi30k by tests/make_hub_standin.py (the Hub's
  layout) and measured. tests/test_chapter_times.py checks the section against both.

Its `trains` section, computed the same way by `trains()`, says which chapters train a model
first where a reader has none of their own: chapter 8's copy model, which a visible code
cell loads with `train_copy_model(` (without `retrain=True`: chapter 8 itself trains it on
purpose, and its time includes that) and trains when no trained copy is found (a new
runtime); its time is the training's own clock: the last `seconds` of the history saved
with the model the chapters load (nbs/runs/copy_model/copy_16_1200.pt: 16 words, 1,200
updates; the pages run in nbs/), kept from the file where it is not found.

After a chapter's run, tools/nbclean.py cleans it with the new file: it writes the running
cost at the top of each notebook from these sections.
"""
import argparse
import glob
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from annotated_transformer.formats import CONFIG_FILE

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench/results/chapter_times.json"
INTRO = ROOT / "book/intro.md"
BEGIN, END = "<!-- chapter-times: begin -->", "<!-- chapter-times: end -->"
TOC = ROOT / "_toc.yml"
DATA = Path(os.environ.get("AT_SHARED_DATA") or ROOT / "../shared/data") / "multi30k"
MODEL = ROOT / "models/multi30k_en_de"
HUB_ID = "bentrevett/multi30k"


def parts() -> list[tuple[str, list[str]]]:
    "The book's parts from _toc.yml, in order: (caption, [notebook stems])."
    import yaml
    toc = yaml.safe_load(TOC.read_text(encoding="utf-8"))
    found = [(p["caption"], [Path(c["file"]).name for c in p["chapters"]
                             if c["file"].startswith("nbs/")]) for p in toc["parts"]]
    # the on-ramp opens Part I, listed in the contents or not yet (tools/reading_path.py)
    for caption, stems in found:
        if caption.startswith("Part I:") and (ROOT / "nbs/00_start.ipynb").exists() \
                and "00_start" not in stems:
            stems.insert(0, "00_start")
    return found


def _visible_code(path: Path) -> str:
    "The code a reader runs and sees: no `#| export` (library) or `#| hide` cells."
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return "\n".join(c for c in cells
                     if not re.search(r"^#\|\s*(export|hide)\b", c, re.M))


def _model_bytes() -> int:
    config = json.loads((MODEL / CONFIG_FILE).read_text(encoding="utf-8"))
    return sum((MODEL / name).stat().st_size for name in [CONFIG_FILE, *config["files"]])


def _data_bytes(folder: Path = DATA) -> int | None:
    if not folder.is_dir():
        return None
    sys.path.insert(0, str(ROOT / "tests"))
    from make_hub_standin import make_hub_standin
    with tempfile.TemporaryDirectory() as tmp:
        return sum(f.stat().st_size for f in make_hub_standin(folder, tmp).glob("*.jsonl"))


def downloads(old: dict | None = None, data_dir: Path = DATA) -> dict:
    """What each chapter downloads where a reader has nothing, with the sizes measured
    from the real files (see the module's docstring). Without the Multi30k text files
    (`$AT_SHARED_DATA/multi30k`, else ../shared/data/multi30k) the data's size is kept
    from `old`."""
    data = _data_bytes(Path(data_dir))
    if data is None:
        data = (old or {}).get("items", {}).get("multi30k", {}).get("bytes")
    items = {
        "multi30k": {"what": "the Multi30k sentence pairs from the Hugging Face Hub", "bytes": data,
                     "source": f"the Hugging Face Hub, {HUB_ID}",
                     "measured": "train.jsonl, val.jsonl and test.jsonl in the Hub's layout, "
                                 "written by tests/make_hub_standin.py from the en and de "
                                 "text files in ../shared/data/multi30k"},
        "model": {"what": "the trained model from the repository", "bytes": _model_bytes(),
                  "source": "the repository's models/multi30k_en_de",
                  "measured": "models/multi30k_en_de: config.json and the files it lists, "
                              "the files download_model fetches"}}
    chapters = {}
    for path in sorted((ROOT / "nbs").glob("*.ipynb")):
        code = _visible_code(path)
        fetches = (("multi30k", r"\b(load_multi30k|train_translation|ablation_data)\("),
                   ("model", r"\bmulti30k_en_de\b"))
        got = [name for name, rx in fetches if re.search(rx, code)]
        if got:
            chapters[path.stem] = got
    return {"how": "computed by bench/run_all.py (downloads): a chapter fetches what its "
                   "visible code loads where nothing is local; sizes measured from the real "
                   "files", "items": items, "chapters": chapters}


# where chapter 8's `train_copy_model` keeps the model chapters 9, 9a and 9c load (its
# history has the training's clock): the pages run in nbs/, so their runs/ is nbs/runs/
COPY_RUNS = (ROOT / "nbs/runs/copy_model/copy_16_1200.pt",)
TRAINS = {"copy_model": r"\btrain_copy_model\((?![^)]*\bretrain=True)"}


def _training_seconds(path: Path) -> float | None:
    """The training's own clock: the last `seconds` of a saved model's history (.pt),
    or the largest `elapsed` of a metrics.jsonl; None where there is neither."""
    if not path.is_file():
        return None
    if path.suffix == ".pt":
        import torch
        history = torch.load(path, map_location="cpu", weights_only=True).get("history")
        clock = [r["seconds"] for r in history or [] if "seconds" in r]
    else:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        clock = [r["elapsed"] for r in lines if "elapsed" in r]
    return round(max(clock), 1) if clock else None


def trains(old: dict | None = None, runs: tuple = COPY_RUNS) -> dict:
    """Which chapters train chapter 8's copy model first where no trained copy is found,
    and how long that training took (see the module's docstring); where no run is
    found the time is kept from `old`."""
    kept = (old or {}).get("items", {}).get("copy_model", {})
    seconds, measured = kept.get("seconds"), kept.get("measured")
    for path in map(Path, runs):
        if (clock := _training_seconds(path)) is not None:
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            seconds, measured = clock, f"the training's own clock, in {where}"
            break
    items = {"copy_model": {"what": "chapter 8's copy model", "seconds": seconds,
                            "measured": measured}}
    chapters = {}
    for path in sorted((ROOT / "nbs").glob("*.ipynb")):
        code = _visible_code(path)
        got = [name for name, rx in TRAINS.items() if re.search(rx, code)]
        if got:
            chapters[path.stem] = got
    return {"how": "computed by bench/run_all.py (trains): a chapter trains what its "
                   "visible code loads or trains where no trained copy is found",
            "items": items, "chapters": chapters}


def save(results: dict) -> None:
    """Write the results file, chapters sorted, its downloads and trains sections
    recomputed; whole or not at all (a reader never sees half a file)."""
    results = dict(results, chapters=dict(sorted(results["chapters"].items())),
                   downloads=downloads(results.get("downloads")),
                   trains=trains(results.get("trains")))
    part = RESULTS.with_suffix(".part")
    part.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    part.replace(RESULTS)


def merged(now: dict, run_: dict, *, gpu: bool, named: bool) -> dict:
    """The results file `now` (as it is when this run saves) with this run's block: its
    chapters over the file's when the run named its notebooks (another run's records,
    written meanwhile, are kept), alone when it ran every chapter."""
    base = now.get("gpu", {"chapters": {}}) if gpu else now
    chapters = {**(base.get("chapters", {}) if named else {}), **run_["chapters"]}
    block = {**run_, "chapters": chapters}
    return dict(now, gpu=block) if gpu else dict(now, **block)


def machine() -> dict:
    import torch
    from annotated_transformer.utils import hardware
    return {"hardware": hardware(), "isa": torch.backends.cpu.get_cpu_capability(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch": torch.__version__, "python": platform.python_version()}


def run(path: Path, limit: float, store: bool = False) -> dict:
    """Execute `path` in a fresh kernel; its wall time and whether it finished in time.
    With `store`, the executed notebook replaces `path`."""
    # as a reader runs it: full size, and OpenMP's default spin (the test command shortens
    # it, which slows the timings of small operations that the chapters store)
    env = {k: v for k, v in os.environ.items() if k not in ("AT_QUICK", "GOMP_SPINCOUNT")}
    if DATA.is_dir():                  # the pages read $MULTI30K_DIR, else the Hub's copy
        env.setdefault("MULTI30K_DIR", str(DATA.resolve()))
    with tempfile.TemporaryDirectory() as tmp:
        where = ["--inplace"] if store else ["--output-dir", tmp]
        cmd = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
               *where, f"--ExecutePreprocessor.timeout={int(limit)}", str(path)]
        load = os.getloadavg()[0]      # other work on the machine inflates the time
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, cwd=path.parent, env=env, capture_output=True, text=True,
                               timeout=limit + 60)
            status = "ok" if p.returncode == 0 else "failed"
            tail = p.stderr.strip().splitlines()[-3:]
        except subprocess.TimeoutExpired:
            status, tail = "over the limit", []
        seconds = time.perf_counter() - t0
    if (status == "failed" and any("Timeout" in line for line in tail)) or seconds > limit:
        status = "over the limit"
    # the last lines of stderr say why a chapter failed; for one that ran they are noise
    return {"seconds": round(seconds, 1), "status": status,
            "tail": tail if status != "ok" else [],
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def title(stem: str) -> str:
    "A page's title, its first heading (`13. Inside the trained model: ...`), else its stem."
    path = ROOT / "nbs" / f"{stem}.ipynb"
    if path.exists():
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            m = re.match(r"#\s+(.+)", "".join(cell["source"]))
            if cell["cell_type"] == "markdown" and m:
                return m.group(1).strip()
    return stem


def table(results: dict) -> str:
    "The markdown block for the introduction: a sentence, then the table by part."
    m = results["machine"]
    runs = results["chapters"]
    order, rows, part1 = [], [], None
    for caption, stems in parts():
        measured = [s for s in stems if s in runs]
        if not measured:
            continue
        rows.append(f"| **{caption}** | |")
        for name in measured:
            r = runs[name]
            cell = minutes(r["seconds"]) if r["status"] == "ok" else r["status"]
            rows.append(f"| [{title(name)}](../nbs/{name}) | {cell} |")
        if caption.startswith("Part I:"):
            part1 = sum(runs[s]["seconds"] for s in measured)
            rows.append(f"| Part I in all | {minutes(part1)} |")
        order += measured
    rest = [name for name in runs if name not in order]
    if rest:
        rows.append("| **not in the book's contents** | |")
        rows += [f"| {name} | {minutes(runs[name]['seconds'])} |" for name in rest]
    total = sum(r["seconds"] for r in runs.values())
    rows.append(f"| all chapters | {total / 60:.0f} |")
    slowest = max(runs, key=lambda k: runs[k]["seconds"])
    said = (f"The slowest page, *{title(slowest)}*, takes about "
            f"{minutes(runs[slowest]['seconds'])} minutes")
    if part1 is not None:
        said += f"; Part I takes about {minutes(part1)} minutes in all"
    lines = [said + ".", "",
             f"Measured by `python bench/run_all.py` on "
             f"{m['hardware']} ({m['isa']}), PyTorch {m['torch']}, in a Jupyter kernel, "
             "top to bottom, nothing skipped.", "",
             "| page | minutes |", "|---|---:|", *rows]
    return "\n".join(lines)


def write_table(results: dict) -> None:
    text = INTRO.read_text(encoding="utf-8")
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        INTRO.write_text(f"{head}{BEGIN}\n{table(results)}\n{END}{rest.split(END, 1)[1]}",
                         encoding="utf-8")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--limit", type=float, default=3000.0, help="seconds a chapter may take")
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--store", action="store_true",
                    help="write each executed notebook back in place")
    args = ap.parse_args()
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"chapters": {}}
    if args.table_only:
        save(old)
        return write_table(old)
    paths = args.notebooks or [Path(p) for p in sorted(glob.glob(str(ROOT / "nbs/*.ipynb")))]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    where = machine()
    # CPU times at the top level (the table's); a GPU's in a section of their own (merged)
    run_ = {"commit": commit, "machine": where, "limit_s": args.limit, "chapters": {}}

    def results():                      # the file as it is now, this run's records on top
        now = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"chapters": {}}
        return merged(now, run_, gpu=bool(where["gpu"]), named=bool(args.notebooks))

    over = 0
    for path in paths:
        r = dict(run(path.resolve(), args.limit, args.store), commit=commit)
        run_["chapters"][path.stem] = r
        over += r["status"] != "ok"
        print(f"{path.stem:22s} {r['status']:15s} {r['seconds'] / 60:5.1f} min  "
              f"{' / '.join(r['tail'])[-200:] if r['status'] != 'ok' else ''}", flush=True)
        save(results())
        if args.store and r["status"] == "ok":     # its running cost from the new file
            subprocess.run([sys.executable, str(ROOT / "tools/nbclean.py"), str(path)],
                           check=True)
    run_["chapters"] = dict(sorted(run_["chapters"].items()))
    save(results())
    write_table(json.loads(RESULTS.read_text()))
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
