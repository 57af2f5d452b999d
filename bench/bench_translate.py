"""Translation speed side by side: our engines and CTranslate2 (fp32, int8).

Ours: the Translator (fp32, bf16, int8; chapter 11, part 9a), the static-shape search of
part 9b run eagerly and compiled by torch.compile (fp32, the Translator's fp32 weights), the
Translator's engine "aot" (part 9e: the step compiled ahead of time, fp32 and, where bf16 is
native, bf16; its packages are built by the first round's warm-up into the cache folder, and
loaded by every later process), and
the ONNX graphs of part 11e under onnxruntime (greedy only: no bulk beam-4 figure).

Each engine runs in a process of its own, a fresh one in every round, and the engines take
turns, so that a slow moment of a shared machine hits all alike (the best round counts).
One process per engine matters: CTranslate2 ships its own OpenMP runtime, and with its
translator loaded, PyTorch's two-thread decoding of one sentence ran 2.7 times as slow on the
machine this was written on (`--same-process` reproduces that). Workloads, on the shipped
model (chapter 11) and test_2016_flickr:
  - bulk: the whole test set, beam 4 (alpha 0.6), batches of 64 sentences;
  - interactive: --interactive sentences one at a time, greedy and beam 4 (median latency).
The GEMM-bound time is the matrix-multiply FLOPs that our decoder performs for the workload
(counted by torch.utils.flop_counter) divided by the fp32 GEMM rate measured here: a floor no
fp32 engine of this architecture can beat on this machine without skipping work.

    python bench/bench_translate.py --threads 2
    python bench/bench_translate.py --threads 1 --interactive 50
"""
import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("ours fp32", "ours bf16", "ours int8", "ours static fp32", "ours compiled fp32",
           "ours aot fp32", "ours aot bf16", "onnxruntime fp32", "CTranslate2 fp32",
           "CTranslate2 int8")


def load_static(model_dir: str, compiled: bool):
    """Part 9b's static-shape greedy and beam search over the Translator's own fp32
    decoding weights, in its batches (`translate_batched`); `compiled`: torch.compile."""
    from torch import nn
    from annotated_transformer.engines import static
    from annotated_transformer.engines.compiling import compiled_step
    from annotated_transformer.decoding import MAX_LEN_B
    from annotated_transformer.formats import PAD_ID
    from annotated_transformer.engines.quantization import decoding_model
    from annotated_transformer.translator import translate_batched
    from annotated_transformer.run.pretrained import load_translator
    ours = load_translator(model_dir, device="cpu")
    model = decoding_model(ours.model, "fp32", torch.device("cpu")).eval()
    step = compiled_step() if compiled else static.static_step

    def search(rows, k):
        src = nn.utils.rnn.pad_sequence([torch.tensor(r) for r in rows],
                                        batch_first=True, padding_value=PAD_ID)
        if k == 1:
            return static.static_greedy_decode(model, src, step=step)[0]
        return static.static_beam_search(model, src, beam_size=k, step=step)[0][:, 0]
    return lambda s, k: translate_batched(ours.sp, s, lambda rows: search(rows, k),
                                          max_len=model.config.max_len,
                                          max_len_b=MAX_LEN_B)


def load(name: str, model_dir: str, dirs: dict, threads: int):
    """A function (sentences, beam) -> translations for engine `name`; None for a beam
    the engine does not offer."""
    if name.startswith(("ours static", "ours compiled")):
        return load_static(model_dir, compiled="compiled" in name)
    if name.startswith("onnxruntime"):
        from annotated_transformer.exports.onnx import OnnxTranslator
        engine = OnnxTranslator(dirs["onnx"], threads=threads)
        return lambda s, k: engine.translate(s) if k == 1 else None
    if name.startswith("ours"):
        from annotated_transformer.engines import ENGINES
        from annotated_transformer.run.pretrained import load_translator
        *engine, precision = name.split()[1:]
        ours = load_translator(model_dir, device="cpu", precision=precision,
                               engine=ENGINES[engine[0] if engine else "eager"])
        return lambda s, k: ours.translate(s, beam_size=k)
    from annotated_transformer.exports.ct2 import CT2Translator
    kind = name.split()[1]
    engine = CT2Translator(dirs[kind], compute_type={"fp32": "float32"}.get(kind, kind),
                           threads=threads)
    return lambda s, k: engine.translate(s, beam_size=k)


def measure(run, sources: list, alone: list) -> dict:
    """Bulk seconds and per-sentence latencies (greedy, beam 4) of one engine; None
    where it does not offer the beam."""
    out = {}
    run(sources, 4)                  # warm-up, of every shape timed below: a compiled
    for k in (1, 4):                 # step compiles here, once per shape
        for s in alone:
            run([s], k)
    t0 = time.perf_counter()
    out["bulk"] = None if run(sources, 4) is None else time.perf_counter() - t0
    for k in (1, 4):
        times = []
        for s in alone:
            t0 = time.perf_counter()
            if run([s], k) is None:
                times = None
                break
            times.append(time.perf_counter() - t0)
        out[str(k)] = times                           # JSON's keys are strings
    return out


def worker(args: list) -> None:
    "In a process of its own: load one engine, measure, print JSON."
    name, model_dir, dirs_json, threads, data_json = args
    threads = int(threads)
    torch.set_num_threads(threads)
    sources, alone = json.loads(Path(data_json).read_text())
    run = load(name, model_dir, json.loads(dirs_json), threads)
    print(json.dumps(measure(run, sources, alone)))


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


def decode_flops(model_dir: str, sentences: list, beam: int, one_by_one: bool) -> float:
    "Matrix-multiply FLOPs (mm, bmm, attention) of our fp32 decoder on this workload."
    from annotated_transformer.run.pretrained import load_translator
    from annotated_transformer.engines import eager
    ours = load_translator(model_dir, device="cpu", precision="fp32", engine=eager)
    with FlopCounterMode(display=False) as counter:
        for batch in ([[s] for s in sentences] if one_by_one else [sentences]):
            ours.translate(batch, beam_size=beam)
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
    p.add_argument("--engines", nargs="+", choices=ENGINES, metavar="ENGINE",
                   help=f"only these (quoted), of: {', '.join(ENGINES)}")
    p.add_argument("--same-process", action="store_true",
                   help="all engines loaded in this one process (to see the interference)")
    a = p.parse_args(argv)
    from annotated_transformer.exports.ct2 import export_ctranslate2
    from annotated_transformer.exports.onnx import export_onnx
    from annotated_transformer.run.pretrained import load_translator
    from annotated_transformer.precision import native_bf16
    from annotated_transformer.utils import hardware
    torch.set_num_threads(a.threads)
    sources = Path(a.data, "test_2016_flickr.en").read_text().splitlines()
    sources = sources[:a.sentences or None]
    alone = sources[:a.interactive]
    tmp_dir = tempfile.TemporaryDirectory()   # the exports (~70 MB), removed at the end
    tmp = Path(tmp_dir.name)
    ours = load_translator(a.model_dir, device="cpu")
    dirs = {"fp32": str(export_ctranslate2(ours, tmp / "fp32")),
            "int8": str(export_ctranslate2(ours, tmp / "int8", quantization="int8")),
            "onnx": str(export_onnx(ours, tmp / "onnx"))}
    data = tmp / "sentences.json"
    data.write_text(json.dumps([sources, alone]))
    asked = [*(a.engines or ENGINES), "CTranslate2 fp32", "CTranslate2 int8"]  # the refs
    engines = [e for e in dict.fromkeys(asked)              # our bf16 only where native
               if not (e.startswith("ours") and e.endswith("bf16")) or native_bf16("cpu")]
    if a.same_process:
        loaded = {e: load(e, a.model_dir, dirs, a.threads) for e in engines}
    results = {e: [] for e in engines}
    for _ in range(a.rounds):
        for e in engines:
            if a.same_process:
                results[e].append(measure(loaded[e], sources, alone))
                continue
            cmd = [sys.executable, __file__, "--worker", e, a.model_dir,
                   json.dumps(dirs), str(a.threads), str(data)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:                     # a crash is a result: say which
                why = (f"signal {signal.Signals(-done.returncode).name}"
                       if done.returncode < 0 else f"exit status {done.returncode}")
                results[e].append({"bulk": None, "1": None, "4": None, "failed": why})
                continue
            results[e].append(json.loads(done.stdout.splitlines()[-1]))
    failed = {e: r["failed"] for e in engines for r in results[e] if "failed" in r}
    bulk = {e: None if e in failed or results[e][0]["bulk"] is None
            else min(r["bulk"] for r in results[e]) for e in engines}
    ms = {(e, k): None if e in failed or results[e][0][str(k)] is None
          else 1e3 * min(median(r[str(k)]) for r in results[e])
          for e in engines for k in (1, 4)}
    rate, rate16 = gemm_rate(), gemm_rate(torch.bfloat16)
    flops = {"bulk": decode_flops(a.model_dir, sources, 4, False) / len(sources),
             1: decode_flops(a.model_dir, alone, 1, True) / len(alone),
             4: decode_flops(a.model_dir, alone, 4, True) / len(alone)}
    floor = {k: f / rate for k, f in flops.items()}
    print(f"machine: {hardware()}, PyTorch kernels "
          f"{torch.backends.cpu.get_cpu_capability()}, bf16 "
          f"{'native' if native_bf16('cpu') else 'emulated'}; {a.threads} threads for every "
          f"engine; torch {torch.__version__}; "
          f"{'one process' if a.same_process else 'one process per engine and round'}")
    print(f"fp32 GEMM rate {rate / 1e9:.1f} GFLOP/s, bf16 {rate16 / 1e9:.1f} GFLOP/s; our "
          f"decoder's GEMM MFLOP per sentence: bulk {flops['bulk'] / 1e6:.0f}, greedy "
          f"{flops[1] / 1e6:.0f}, beam 4 {flops[4] / 1e6:.0f}")
    print(f"bulk: {len(sources)} sentences, beam 4, batches of 64; interactive: "
          f"{len(alone)} sentences one at a time; best of {a.rounds} rounds")
    print()
    print("| engine | bulk sent/s | vs CT2 fp32 | vs CT2 int8 | greedy ms | vs CT2 fp32 "
          "| vs CT2 int8 | beam 4 ms | vs CT2 fp32 | vs CT2 int8 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ref32, ref8 = "CTranslate2 fp32", "CTranslate2 int8"
    def cells(value, ref32, ref8, fmt, ratio):     # "—" where the engine has no figure
        if value is None:
            return "| — | | "
        return f"| {fmt(value)} | {ratio(ref32, value):.2f}× | {ratio(ref8, value):.2f}× "
    for e in engines:
        print(f"| {e} " + cells(bulk[e], bulk[ref32], bulk[ref8],
                                lambda b: f"{len(sources) / b:.1f}", lambda r, v: r / v)
              + "".join(cells(ms[e, k], ms[ref32, k], ms[ref8, k], lambda m: f"{m:.1f}",
                              lambda r, v: v / r) for k in (1, 4)) + "|")
    print(f"| GEMM-bound (our FLOPs / fp32 rate) | {1 / floor['bulk']:.1f} | | "
          f"| {1e3 * floor[1]:.1f} | | | {1e3 * floor[4]:.1f} | | |")
    for e, why in failed.items():                  # "—" in the table above
        print(f"{e}: its worker failed ({why}); no figures")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2:])
    else:
        main()
