"""Table 3 of the paper in miniature on a CPU (chapter 14), and the sweep around it.

Every variant changes one thing of a small base model and trains for the same number
of updates with the trainer of chapter 7c (`train`). The variants are data, in
bench/table3_variants.json beside this script (the base row once, the settings a group
shares, one line per run with what it changes), expanded by `expand_variants`; the run
function (`run_variant`) is the chapter's own, exported to
annotated_transformer.lab.ablations: the book shows the code that made its numbers, and
re-runs a miniature of each experiment with it. Results go to one JSON file after each
run; runs already there are skipped, so the sweep resumes. Several sweep processes can
share one output file (each takes the next run nobody has claimed), one per core:

    python bench/sweep_table3.py --data ../shared/data/multi30k \\
        --out bench/results/table3.json --runs runs/ablations
    python bench/sweep_table3.py --variants bench/table3_paired.json \\
        --out bench/results/table3_paired.json --runs runs/paired &   # twice

Each run records wall time and process CPU time: the process may be paused by other
jobs on a shared machine, so CPU time is the budget to compare, beside steps.
"""
import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from annotated_transformer.lab.ablations import (ablation_data, expand_variants,
                                                 run_variant)
from annotated_transformer.run.durable import write_durably
from annotated_transformer.utils import hardware

VARIANTS = Path(__file__).with_name("table3_variants.json")


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def claim(run_dir: Path) -> bool:
    "Take the run at `run_dir` for this process, unless a live process holds it."
    mark = run_dir.parent / f"{run_dir.name}.claim"      # names may hold dots
    mark.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        try:
            os.kill(int(mark.read_text() or 0), 0)
            return False                            # its owner is still running
        except (ProcessLookupError, ValueError):
            mark.unlink(missing_ok=True)            # left by a process that died
            return claim(run_dir)
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


def record(out: Path, run: dict, meta: dict) -> None:
    "Append `run` to the JSON file `out`, under a lock: other sweep processes share it."
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = json.loads(out.read_text()) if out.exists() else {"runs": []}
        done.update(meta)
        if any(r["name"] == run["name"] for r in done["runs"]):
            return                              # another process finished it first
        done["runs"].append(run)
        write_durably(out, json.dumps(done, indent=1) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="folder of the Multi30k text files")
    p.add_argument("--out", type=Path, default=Path("bench/results/table3.json"))
    p.add_argument("--runs", type=Path, default=Path("runs/ablations"))
    p.add_argument("--variants", type=Path, default=VARIANTS,
                   help="the sweep's definition (default: %(default)s)")
    p.add_argument("--only", nargs="*", help="names of the variants to run")
    p.add_argument("--bleu-sentences", type=int, default=None,
                   help="validation sentences for BLEU (default: all)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    done = json.loads(a.out.read_text()) if a.out.exists() else {"runs": []}
    have = {r["name"] for r in done["runs"]}
    variants = expand_variants(json.loads(a.variants.read_text()))
    todo = [v for v in variants if v["name"] not in have
            and (not a.only or v["name"] in a.only)]
    commit = git_commit()                 # the code this process runs, read once
    data = ablation_data(a.data, out_dir=a.runs)
    meta = dict(tokenizer_pieces=data["sp"].get_piece_size(),
                bleu_sentences=a.bleu_sentences, command=" ".join(sys.argv))
    for v in todo:
        run_dir = a.runs / v["name"]
        if not claim(run_dir):
            continue
        if a.out.exists() and any(r["name"] == v["name"] for r in
                                  json.loads(a.out.read_text())["runs"]):
            continue                            # finished since this process started
        shutil.rmtree(run_dir, ignore_errors=True)         # a run starts afresh
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            result = run_variant(v, data, run_dir, bleu_sentences=a.bleu_sentences)
        except Exception as e:                  # noted, not stored: a rerun retries it
            print(f"{v['name']}: failed: {e!r}", flush=True)
            (run_dir.parent / f"{run_dir.name}.claim").unlink(missing_ok=True)
            continue
        r = {**v, **result, "cpu_s": time.process_time() - cpu,
             "wall_s": time.perf_counter() - wall, "hardware": hardware(),
             "torch": torch.__version__, "commit": commit,
             "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        record(a.out, r, meta)
        print(f"{v['name']:>32}: val loss {r['val_loss']:.3f} ppl {r['val_ppl']:8.2f} "
              f"BLEU {r.get('val_bleu', float('nan')):5.2f} | {r['steps']} steps "
              f"{r['cpu_s']:6.1f} s CPU {r['wall_s']:6.1f} s wall", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
