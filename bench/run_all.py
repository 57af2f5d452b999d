"""Run every chapter as a reader does, top to bottom in a Jupyter kernel, and time each one.

No quick mode: each chapter runs exactly what its page shows, with the data in
../shared/data (the Hub copy where it is missing) and the shipped model in models/. The
notebooks are not changed; each executed copy goes to a temporary folder. A chapter that runs
past the limit (10 minutes by default) is stopped and reported as such: the book promises that
none does.

    python bench/run_all.py                 # every chapter, 2 threads (the default here)
    python bench/run_all.py nbs/07_decoding.ipynb --limit 600
    python bench/run_all.py nbs/11_inside.ipynb --store   # also keep its outputs

`--store` writes the executed notebook back in place (as `make execute` does, then
tools/nbclean.py), so one run both times a chapter and stores the outputs the book shows.

The times go to bench/results/chapter_times.json, with the commit, the processor, its
instruction set and the thread count, and the table between the `chapter-times` markers in
book/intro.md is written from that file (`--table-only` rewrites the table alone).
"""
import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench/results/chapter_times.json"
INTRO = ROOT / "book/intro.md"
BEGIN, END = "<!-- chapter-times: begin -->", "<!-- chapter-times: end -->"


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
    with tempfile.TemporaryDirectory() as tmp:
        where = ["--inplace"] if store else ["--output-dir", tmp]
        cmd = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
               *where, f"--ExecutePreprocessor.timeout={int(limit)}", str(path)]
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
    return {"seconds": round(seconds, 1), "status": status, "tail": tail}


def table(results: dict) -> str:
    "The markdown table for the introduction."
    m = results["machine"]
    commits = sorted({r["commit"] for r in results["chapters"].values()})
    lines = [f"Measured by `python bench/run_all.py` (commit {', '.join(commits)}) on "
             f"{m['hardware']} ({m['isa']}), PyTorch {m['torch']}, in a Jupyter kernel, "
             "top to bottom, nothing skipped.", "",
             "| chapter | minutes on a 2-core CPU |", "|---|---:|"]
    for name, r in results["chapters"].items():
        cell = f"{r['seconds'] / 60:.1f}" if r["status"] == "ok" else r["status"]
        lines.append(f"| {name} | {cell} |")
    total = sum(r["seconds"] for r in results["chapters"].values())
    lines.append(f"| all chapters | {total / 60:.0f} |")
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
    ap.add_argument("--limit", type=float, default=600, help="seconds a chapter may take")
    ap.add_argument("--table-only", action="store_true")
    ap.add_argument("--store", action="store_true",
                    help="write each executed notebook back in place")
    args = ap.parse_args()
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"chapters": {}}
    if args.table_only:
        return write_table(old)
    paths = args.notebooks or [Path(p) for p in sorted(glob.glob(str(ROOT / "nbs/*.ipynb")))]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    results = {"commit": commit, "machine": machine(), "limit_s": args.limit,
               "chapters": dict(old["chapters"]) if args.notebooks else {}}
    over = 0
    for path in paths:
        r = dict(run(path.resolve(), args.limit, args.store), commit=commit)
        if args.store and r["status"] == "ok":
            subprocess.run([sys.executable, str(ROOT / "tools/nbclean.py"), str(path)],
                           check=True)
        results["chapters"][path.stem] = r
        over += r["status"] != "ok"
        print(f"{path.stem:22s} {r['status']:15s} {r['seconds'] / 60:5.1f} min  "
              f"{' / '.join(r['tail'])[-200:] if r['status'] != 'ok' else ''}", flush=True)
        RESULTS.write_text(json.dumps(dict(results, chapters=dict(
            sorted(results["chapters"].items()))), indent=1) + "\n")
    results["chapters"] = dict(sorted(results["chapters"].items()))
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_table(results)
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
