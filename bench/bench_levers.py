"""What each decoding speed lever is worth: the same workloads on several commits, side by side.

Each revision's package is extracted (`git archive`) into a temporary folder and run in its own
worker process; the revisions take turns in every round, so that a busy moment of a shared
machine hits all alike, and the best round counts. Workloads on the shipped model:
  - bulk: the first --sentences sentences of test_2016_flickr, beam 4, batches of 64 (sent/s);
  - interactive: --interactive sentences one at a time, greedy and beam 4 (median ms).
Each worker also checks that its translations equal the first revision's (a lever must not
change the output).

    python bench/bench_levers.py --threads 1 560f5bc 12316aa HEAD
    python bench/bench_levers.py --precision int8 HEAD~1 HEAD
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = r"""
import json, sys, time, torch
from statistics import median
sys.path.insert(0, sys.argv[1])
from annotated_transformer.engines import eager
from annotated_transformer.run.pretrained import load_translator
threads, n_bulk, n_alone = (int(x) for x in sys.argv[2:5])
precision = sys.argv[7]
torch.set_num_threads(threads)
t = load_translator(sys.argv[5], device="cpu", precision=precision, engine=eager)
src = open(sys.argv[6]).read().splitlines()
t.translate(src[:4], beam_size=4)
t0 = time.perf_counter(); bulk = t.translate(src[:n_bulk], beam_size=4)
out = {"bulk_s": time.perf_counter() - t0, "bulk": bulk}
for k in (1, 4):
    times = []
    for s in src[:n_alone]:
        t0 = time.perf_counter(); t.translate([s], beam_size=k)
        times.append(time.perf_counter() - t0)
    out[f"alone_{k}_ms"] = 1e3 * median(times)
print(json.dumps(out))
"""


def torch_isa() -> str:
    "The kernel level PyTorch runs at here (AVX2, AVX512, ...), as a worker sees it."
    return subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu."
                           "get_cpu_capability())"], capture_output=True, text=True,
                          check=True).stdout.strip()


def extract(rev: str, into: Path) -> Path:
    "The package at `rev`, as a folder that can go first on sys.path."
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev, "annotated_transformer"], cwd=ROOT,
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("revisions", nargs="+", help="git revisions, the baseline first")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--interactive", type=int, default=30)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--precision", default="fp32",
                   help="fp32, bf16 or int8 (default: fp32)")
    p.add_argument("--model-dir", default=str(ROOT / "models" / "multi30k_en_de"))
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    a = p.parse_args(argv)
    tmp_dir = tempfile.TemporaryDirectory()   # the revisions' trees, removed at the end
    tmp = Path(tmp_dir.name)
    paths = {rev: extract(rev, tmp / str(i)) for i, rev in enumerate(a.revisions)}
    best = {rev: {} for rev in a.revisions}
    outputs = {}
    for _ in range(a.rounds):
        for rev, path in paths.items():
            cmd = [sys.executable, "-c", WORKER, str(path), str(a.threads),
                   str(a.sentences), str(a.interactive), a.model_dir,
                   str(Path(a.data) / "test_2016_flickr.en"), a.precision]
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                          text=True).stdout.splitlines()[-1])
            outputs.setdefault(rev, r.pop("bulk"))
            for k, v in r.items():
                best[rev][k] = min(best[rev].get(k, float("inf")), v)
    base = a.revisions[0]
    print(f"{a.precision}, {a.threads} threads, PyTorch kernels {torch_isa()}; bulk: "
          f"{a.sentences} sentences, beam 4; interactive: {a.interactive} sentences one "
          f"at a time; best of {a.rounds} rounds")
    print("| revision | bulk sent/s | speed-up | greedy ms | speed-up | beam 4 ms "
          "| speed-up | same output |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for rev in a.revisions:
        b, r0 = best[rev], best[base]
        same = sum(x == y for x, y in zip(outputs[rev], outputs[base]))
        print(f"| {rev} | {a.sentences / b['bulk_s']:.1f} | {r0['bulk_s'] / b['bulk_s']:.2f}× "
              f"| {b['alone_1_ms']:.1f} | {r0['alone_1_ms'] / b['alone_1_ms']:.2f}× "
              f"| {b['alone_4_ms']:.1f} | {r0['alone_4_ms'] / b['alone_4_ms']:.2f}× "
              f"| {same}/{len(outputs[base])} |")


if __name__ == "__main__":
    main()
