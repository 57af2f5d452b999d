"""Chapter 12's race of Table 1's layers against the length n, at batches 1, 8 and 64.

One layer of each kind of the paper's Table 1, as chapter 12 builds it
(annotated_transformer.lab.complexity; d_model 512, 8 heads, d_k 64, kernel width 3,
neighbourhood 32), timed over n = 16, 32, ... for one forward and one backward pass:
  - self-attention: the explicit Eq. (1), chapter 1's `attention`, between the
    projections of MultiHeadAttention (SelfAttentionLayer);
  - self-attention, fused: the same layer with fused=True, Eq. (1) as
    F.scaled_dot_product_attention; the script first checks that both give the same
    outputs and input gradients on one input, and which kernel the fused one ran;
  - LSTM, convolution, separable conv., restricted attn.
None of the layers has dropout. (The stored results' commit, 08bc99e, chose the fused
form by eval mode, where MultiHeadAttention called scaled_dot_product_attention, and the
explicit one by train mode: the same two computations.)

Each (engine, batch) runs in a fresh process of its own, at --threads threads; every
round runs all pairs once, in a new random order, and each process times its lengths
in a random order: per length one untimed warm-up pass, then the median of --reps
passes (the chapter's time_layer, wall clock). Batch 1 goes up to n = 4096, larger
batches while the explicit attention's weights (batch·8·n² floats) stay within 2 GiB:
n = 2048 at batch 8, 1024 at batch 64. The results, one median per round for the
chapter's intervals, are written after every round, so a stopped run keeps the rounds
it finished.

Several --threads make the thread count one more axis of the race: every (engine, batch,
threads) runs in each round, so the thread counts are paired by round, and `times` gets
one more level, the thread count, outermost. --engines keeps some of the engines.

    python bench/bench_complexity.py            # the full grid: 15 to 20 minutes, quiet
    python bench/bench_complexity.py --quick    # d_model 64: about half a minute, quiet
    # one thread against two, self-attention and the LSTM at batch 1, paired by round
    python bench/bench_complexity.py --threads 1 2 --batches 1 --rounds 7 \
        --engines self-attention LSTM --out bench/results/complexity_threads.json
"""
import argparse
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import nn

from annotated_transformer.lab.complexity import (ConvLayer, RecurrentLayer,
                                                  SelfAttentionLayer, time_layer)

ROOT = Path(__file__).resolve().parents[1]
FUSED = "self-attention, fused"
ENGINES = ("self-attention", FUSED, "LSTM", "convolution", "separable conv.",
           "restricted attn.")
K, R = 3, 32                                 # kernel width; restricted neighbourhood
WEIGHTS_CAP = 2**26              # batch·n² at most: 8 heads' fp32 weights, 2 GiB


def build(name: str, d_model: int) -> nn.Module:
    """Engine `name` of width `d_model` (d_model // 64 heads), weights from seed 0: the
    fused engine is the explicit one, the same weights, with fused=True."""
    torch.manual_seed(0)
    heads = max(1, d_model // 64)
    make = {"self-attention": lambda: SelfAttentionLayer(d_model, heads),
            FUSED: lambda: SelfAttentionLayer(d_model, heads, fused=True),
            "LSTM": lambda: RecurrentLayer(d_model),
            "convolution": lambda: ConvLayer(d_model, K),
            "separable conv.": lambda: ConvLayer(d_model, K, separable=True),
            "restricted attn.": lambda: SelfAttentionLayer(d_model, heads, r=R)}
    return make[name]()


def backward_ops(t: torch.Tensor) -> set:
    "The names of the autograd nodes that lead to `t`: which kernels ran."
    seen, stack = set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is not None and fn not in seen:
            seen.add(fn)
            stack += [f for f, _ in fn.next_functions]
    return {type(fn).__name__ for fn in seen}


def check_fused(d_model: int, *, batch: int = 2, n: int = 48) -> dict:
    """Assert that the fused engine computes what the explicit one does (outputs and
    input gradients) by another kernel; its largest difference and that kernel."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, n, d_model, generator=gen, requires_grad=True)
    grad, got = torch.randn(batch, n, d_model, generator=gen), {}
    for name in ("self-attention", FUSED):
        x.grad = None
        y = build(name, d_model)(x)
        y.backward(grad)
        got[name] = (y.detach(), x.grad, backward_ops(y))
    (y0, g0, ops0), (y1, g1, ops1) = got.values()
    torch.testing.assert_close((y1, g1), (y0, g0))
    fused = sorted(op for op in ops1 if "ScaledDotProduct" in op)
    assert "SoftmaxBackward0" in ops0 and "SoftmaxBackward0" not in ops1 and fused
    return {"max_abs_diff": max(float((y1 - y0).abs().max()),
                                float((g1 - g0).abs().max())),
            "fused_backward": fused[0]}


def worker(job: dict) -> dict:
    """In a fresh process: seconds of one forward and backward pass of one engine at
    one batch, the median of `reps` passes after a warm-up, for each n of `sizes`."""
    torch.set_num_threads(job["threads"])
    layer = build(job["engine"], job["d_model"])
    order, times = list(job["sizes"]), {}
    random.Random(job["seed"]).shuffle(order)
    for n in order:
        x = torch.randn(job["batch"], n, job["d_model"], requires_grad=True)
        time_layer(layer, x)                                       # warm-up
        times[n] = statistics.median(time_layer(layer, x) for _ in range(job["reps"]))
    return {str(n): times[n] for n in job["sizes"]}


def run_worker(job: dict) -> dict:
    "`worker(job)` in a new process of this script, with this one's environment."
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(job)]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def lengths(batch: int, *, longest: int) -> list:
    "n = 16, 32, ... up to `longest`, while batch·n² stays within WEIGHTS_CAP."
    sizes, n = [], 16
    while n <= longest and batch * n * n <= WEIGHTS_CAP:
        sizes.append(n)
        n *= 2
    return sizes


def commit() -> str:
    "The checked-out commit of this repository, or 'unknown'."
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine(threads: int | list) -> dict:
    """The CPU, the kernels PyTorch picked, threads, versions and the load at the start
    (imported here: the workers start faster without)."""
    from annotated_transformer.precision import native_bf16
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_decoding import cpu_name
    return {"cpu": cpu_name(), "isa": torch.backends.cpu.get_cpu_capability(),
            "threads": threads, "torch": torch.__version__,
            "python": platform.python_version(), "bf16_native": native_bf16("cpu"),
            "load_average": os.getloadavg()[0]}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def save(result: dict, path: Path) -> None:
    "Write `result` to `path` whole or not at all."
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(path)


def race(result: dict, grid: dict, *, engines: list, threads: list, rounds: int,
         out: Path) -> None:
    """Fill `result["times"]` round by round: every (engine, batch, threads) in its own
    process, in a new random order each round; save after every round."""
    jobs = [(e, b, t) for e in engines for b in grid for t in threads]
    for rnd in range(1, rounds + 1):
        random.Random(rnd).shuffle(jobs)
        for i, (engine, batch, thr) in enumerate(jobs, 1):
            start = time.perf_counter()
            got = run_worker({"engine": engine, "batch": batch, "sizes": grid[batch],
                              "seed": rnd, "d_model": result["d_model"],
                              "threads": thr, "reps": result["reps"]})
            times = result["times"][str(thr)] if len(threads) > 1 else result["times"]
            for n, seconds in got.items():
                times[engine][str(batch)][n].append(seconds)
            print(f"round {rnd}/{rounds}, {i}/{len(jobs)}: {engine}, batch {batch}, "
                  f"{thr} thr.: {time.perf_counter() - start:.1f} s", file=sys.stderr,
                  flush=True)
        result["load_per_round"].append(os.getloadavg()[0])   # ours counts up to 2
        result.update(rounds_done=rnd, finished=now())
        save(result, out)


def summary(times: dict, title: str = "") -> None:
    "Milliseconds, the median over rounds, one table per batch."
    for batch, sizes in next(iter(times.values())).items():
        print(f"\n{title}batch {batch}, ms" + "".join(f"{n:>9s}" for n in sizes))
        for engine, by_batch in times.items():
            row = by_batch[batch].values()
            print(f"{engine:22s}"[:22] + "".join(
                f"{1e3 * statistics.median(t):9.1f}" for t in row))


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[2],
                   help="default 2; several: each engine at each, paired by round")
    p.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    p.add_argument("--rounds", type=int, help="default 5 (--quick: 2)")
    p.add_argument("--reps", type=int,
                   help="timed passes per n after the warm-up; default 1")
    p.add_argument("--batches", type=int, nargs="+",
                   help="default 1 8 64 (--quick: 1 4)")
    p.add_argument("--max-n", type=int, default=4096, help="longest n at any batch")
    p.add_argument("--out", type=Path, help="default bench/results/"
                   "complexity_timing.json (--quick: a temporary file)")
    p.add_argument("--quick", action="store_true",
                   help="d_model 64, one head, n = 16, 64, 256: a check that it runs")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> None:
    a = parse(argv)
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return
    batches = a.batches or ([1, 4] if a.quick else [1, 8, 64])
    grid = {b: [n for n in (16, 64, 256) if n <= a.max_n] if a.quick
            else lengths(b, longest=a.max_n) for b in batches}
    out = a.out or (Path(tempfile.mkdtemp(), "complexity_timing.json") if a.quick
                    else ROOT / "bench" / "results" / "complexity_timing.json")
    d_model = 64 if a.quick else 512
    threads = a.threads[0] if len(a.threads) == 1 else a.threads
    grid_times = {e: {str(b): {str(n): [] for n in grid[b]} for b in grid}
                  for e in a.engines}
    result = {
        "about": "Seconds of one forward and backward pass of one layer of each kind "
                 "of Table 1 (chapter 12) against the length n, per batch: one median "
                 "of `reps` passes per round, each (engine, batch) in a fresh process.",
        "command": shlex.join(["python", "bench/bench_complexity.py",
                               *(sys.argv[1:] if argv is None else argv)]),
        "commit": commit(), "machine": machine(threads), "d_model": d_model,
        "n_heads": max(1, d_model // 64), "k": K, "r": R,
        "reps": a.reps or 1, "rounds_done": 0, "load_per_round": [],
        "fused_check": check_fused(d_model), "started": now(), "finished": None,
        "times": grid_times if len(a.threads) == 1 else
                 {str(t): json.loads(json.dumps(grid_times)) for t in a.threads}}
    m = result["machine"]
    print(f"machine: {m['cpu']}, kernels {m['isa']}, threads {m['threads']}, load "
          f"average {m['load_average']:.1f}; torch {m['torch']}, Python {m['python']}")
    print(f"d_model {d_model}, heads {result['n_heads']}; grid: " + "; ".join(
        f"batch {b}: n = {s[0]}..{s[-1]}" for b, s in grid.items()))
    print(f"fused = explicit (outputs, input gradients) within "
          f"{result['fused_check']['max_abs_diff']:.1e}; fused backward: "
          f"{result['fused_check']['fused_backward']}", flush=True)
    race(result, grid, engines=a.engines, threads=a.threads,
         rounds=a.rounds or (2 if a.quick else 5), out=out)
    for t in a.threads:
        summary(result["times"] if len(a.threads) == 1 else result["times"][str(t)],
                title="" if len(a.threads) == 1 else f"{t} thread(s), ")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
