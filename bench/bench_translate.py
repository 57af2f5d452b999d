"""Translation speed side by side: our Translator (fp32, bf16, int8) and CTranslate2 (fp32, int8).

One process, one machine, the same threads and sentences for every engine; the engines take
turns in each round, so that a slow moment of a shared machine hits all alike (the best round
counts). Workloads, on the shipped model (chapter 9b) and test_2016_flickr:
  - bulk: the whole test set, beam 4 (alpha 0.6), batches of 64 sentences;
  - interactive: --interactive sentences one at a time, greedy and beam 4 (median latency).
The GEMM-bound time is the matrix-multiply FLOPs that our decoder actually performs for the
workload (counted by torch.utils.flop_counter) divided by the fp32 GEMM rate measured in the
same run: a floor no engine of this architecture can beat on this machine at this precision
without skipping work, and a machine-independent yardstick for every time printed.

    python bench/bench_translate.py --threads 2
    python bench/bench_translate.py --threads 1 --interactive 50
"""
import argparse
import tempfile
import time
from pathlib import Path
from statistics import median

import torch
from torch.utils.flop_counter import FlopCounterMode

from annotated_transformer.export import CT2Translator, export_ctranslate2
from annotated_transformer.translator import Translator
from annotated_transformer.utils import hardware, native_bf16

ROOT = Path(__file__).resolve().parents[1]


def gemm_rate(dtype=torch.float32, m: int = 256, k: int = 256, n: int = 1024) -> float:
    "FLOP/s of an (m, k) @ (k, n) product, the shape of a bulk beam step's linear layers."
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    for _ in range(20):
        a @ b
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            a @ b
        best = min(best, (time.perf_counter() - t0) / 200)
    return 2 * m * k * n / best


def decode_flops(translator: Translator, sentences: list, beam: int, one_by_one: bool):
    "Matrix-multiply FLOPs (mm, bmm, attention) of our decoder on this workload."
    with FlopCounterMode(display=False) as counter:
        batches = [[s] for s in sentences] if one_by_one else [sentences]
        for batch in batches:
            translator.translate(batch, beam_size=beam)
    return counter.get_total_flops()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=str(ROOT / "models" / "multi30k_en_de"))
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--interactive", type=int, default=100,
                   help="sentences translated one at a time")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sentences", type=int, default=0, help="bulk: first N (0: all)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    sources = Path(a.data, "test_2016_flickr.en").read_text().splitlines()
    sources = sources[:a.sentences or None]
    alone = sources[:a.interactive]
    ours = Translator.from_pretrained(a.model_dir, device="cpu")
    tmp = Path(tempfile.mkdtemp())
    ct2_fp32 = CT2Translator(export_ctranslate2(ours, tmp / "fp32"), "float32", a.threads)
    ct2_int8 = CT2Translator(export_ctranslate2(ours, tmp / "int8", "int8"), "int8",
                             a.threads)
    engines = {
        "ours fp32": lambda s, k: ours.translate(s, beam_size=k, precision="fp32"),
        "ours bf16": lambda s, k: ours.translate(s, beam_size=k, precision="bf16"),
        "ours int8": lambda s, k: ours.translate(s, beam_size=k, precision="int8"),
        "CTranslate2 fp32": lambda s, k: ct2_fp32.translate(s, beam_size=k),
        "CTranslate2 int8": lambda s, k: ct2_int8.translate(s, beam_size=k)}
    for run in engines.values():                                # warm-up
        run(alone[:2], 4)
    bulk = {name: float("inf") for name in engines}
    latency = {(name, k): [] for name in engines for k in (1, 4)}
    for _ in range(a.rounds):
        for name, run in engines.items():
            t0 = time.perf_counter()
            run(sources, 4)
            bulk[name] = min(bulk[name], time.perf_counter() - t0)
            for k in (1, 4):
                for s in alone:
                    t0 = time.perf_counter()
                    run([s], k)
                    latency[name, k].append(time.perf_counter() - t0)
    rate = gemm_rate()
    flops = {"bulk": decode_flops(ours, sources, 4, False) / len(sources),
             1: decode_flops(ours, alone, 1, True) / len(alone),
             4: decode_flops(ours, alone, 4, True) / len(alone)}
    floor = {k: f / rate for k, f in flops.items()}
    print(f"machine: {hardware()}, PyTorch kernels "
          f"{torch.backends.cpu.get_cpu_capability()}, bf16 "
          f"{'native' if native_bf16('cpu') else 'emulated'} ({a.threads} threads for every "
          f"engine); torch {torch.__version__}")
    print(f"fp32 GEMM rate {rate / 1e9:.1f} GFLOP/s, bf16 {gemm_rate(torch.bfloat16) / 1e9:.1f}"
          f" GFLOP/s; our decoder's GEMM MFLOP per sentence: bulk {flops['bulk'] / 1e6:.0f}, "
          f"greedy {flops[1] / 1e6:.0f}, beam 4 {flops[4] / 1e6:.0f}")
    print(f"bulk: {len(sources)} sentences, beam 4, batches of 64; "
          f"interactive: {len(alone)} sentences one at a time; best of {a.rounds} rounds")
    print()
    print("| engine | bulk sent/s | bulk vs CT2 fp32 | bulk / GEMM-bound | greedy ms "
          "| greedy vs CT2 fp32 | beam 4 ms | beam 4 vs CT2 fp32 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    ref = {k: median(latency["CTranslate2 fp32", k]) for k in (1, 4)}
    for name in engines:
        ms = {k: median(latency[name, k]) for k in (1, 4)}
        print(f"| {name} | {len(sources) / bulk[name]:.1f} "
              f"| {bulk['CTranslate2 fp32'] / bulk[name]:.2f}× "
              f"| {bulk[name] / len(sources) / floor['bulk']:.1f}× "
              f"| {1e3 * ms[1]:.1f} | {ms[1] / ref[1]:.2f}× "
              f"| {1e3 * ms[4]:.1f} | {ms[4] / ref[4]:.2f}× |")
    print(f"| GEMM-bound (our FLOPs / fp32 rate) | {1 / floor['bulk']:.1f} | "
          f"| 1.0× | {1e3 * floor[1]:.1f} | | {1e3 * floor[4]:.1f} | |")


if __name__ == "__main__":
    main()
