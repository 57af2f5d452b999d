"""Part 9e's ahead-of-time packages in bf16 against fp32, on the shipped model.

The model as the Translator decodes it on a CPU (`decoding_model`: its column-major copy
for fp32, its `bf16_weights` copy for bf16), its packages of both kinds built by
`build_package` into a temporary folder (each passing its precision's check):
  - step: in a fresh process per precision and round, precisions taking turns, the median
    microseconds of the step program at each of --rows rows (the "few" package up to
    `FEW_ROWS`, "many" above), and of the encoder for one sentence of 14 tokens (the test
    set's median) and for 64 sentences of 18;
  - tokens: on the first --sentences test sentences, one at a time, greedily and with four
    beams, how many the bf16 package translates otherwise than the eager bf16 decoder, and
    how many eager bf16 translates otherwise than eager fp32 (bf16 rounds after every
    operation eagerly, only where a fused kernel stores in the package);
  - with --bleu, the whole test set translated as the Translator does (beam 4, batches of
    64): BLEU of eager fp32, eager bf16 and `engine="aot"` in bf16 (these packages), and
    how many sentences the last two translate otherwise.
Where bf16 is emulated (no AVX-512 BF16 or AMX) the bf16 timings mean little.

    python bench/probe_bf16_aot.py --threads 2
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16")


def decoding(precision: str):
    "The shipped model's translator, and its model as it decodes in `precision` here."
    from annotated_transformer.engines.quantization import decoding_model
    from annotated_transformer.run.pretrained import load_translator
    ours = load_translator(ROOT / "models" / "multi30k_en_de", device="cpu")
    return ours, decoding_model(ours.model, precision, torch.device("cpu"))


def package(precision: str, kind: str, folder: Path) -> Path:
    from annotated_transformer.engines.packages import aot_package
    return aot_package(decoding(precision)[1], folder, kind)


def build(precision: str, kind: str, folder: Path) -> float:
    "Seconds to build the package of `kind` for `precision` into `folder`."
    from annotated_transformer.engines.packages import build_package
    model = decoding(precision)[1]
    start = time.perf_counter()
    build_package(model, package(precision, kind, folder), kind)
    return time.perf_counter() - start


def median_us(run, inputs: list, repeats: int) -> float:
    for _ in range(max(3, repeats // 10)):                   # warm-up
        run(inputs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(inputs)
        times.append(time.perf_counter() - start)
    return 1e6 * statistics.median(times)


def worker(precision: str, folder: str, rows: list, repeats: int) -> dict:
    "In a fresh process: the step at each number of rows and the encoder, in µs."
    from annotated_transformer.batching import padding_mask
    from annotated_transformer.engines.packages import FEW_ROWS, load_package, step_inputs
    from annotated_transformer.engines.static import StaticCache
    model = decoding(precision)[1]
    runs = {kind: load_package(package(precision, kind, Path(folder)))
            for kind in ("few", "many")}
    out = {}
    with torch.inference_mode():
        for n in rows:
            beams = 1 if n == 1 else 4
            cache = StaticCache(model, n // beams, 32, 32, beams=beams)
            token = torch.randint(4, 8000, (n // beams, beams))
            inputs = step_inputs(token, torch.tensor([10]), cache)
            step = runs["few" if n <= FEW_ROWS else "many"][0]
            label = f"step, {n} row{'s' if n > 1 else ''}"
            out[label] = median_us(step, inputs, repeats)
        for sentences, length, kind in ((1, 14, "few"), (64, 18, "many")):
            src = torch.randint(4, 8000, (sentences, length))
            encode = runs[kind][1]
            out[f"encoder, {sentences}x{length}"] = median_us(
                encode, [src, padding_mask(src, 0)], max(10, repeats // 10))
    return out


def differing(folder: Path, count: int) -> dict:
    "Test sentences translated otherwise: bf16 package vs eager bf16, bf16 vs fp32 eager."
    from annotated_transformer.engines.packages import _Both, load_package
    from annotated_transformer.precision import precision_context
    from annotated_transformer.engines.static import static_beam_search, static_greedy_decode
    ours, model16 = decoding("bf16")
    model32 = decoding("fp32")[1]
    step = _Both(*load_package(package("bf16", "few", folder)))
    data = ROOT.parent / "shared" / "data" / "multi30k" / "test_2016_flickr.en"
    sources = data.read_text().splitlines()[:count]
    out = {"package vs eager, bf16": [0, 0], "eager bf16 vs eager fp32": [0, 0]}
    with torch.inference_mode():
        for s in sources:
            src = torch.tensor([ours.sp.encode(s) + [3]])           # EOS_ID ends it
            for i, search in enumerate((
                    lambda m, **kw: static_greedy_decode(m, src, **kw)[0],
                    lambda m, **kw: static_beam_search(m, src, beam_size=4, **kw)[0])):
                with precision_context("bf16", "cpu"):
                    compiled, eager16 = search(model16, step=step), search(model16)
                eager32 = search(model32)
                out["package vs eager, bf16"][i] += not torch.equal(compiled, eager16)
                out["eager bf16 vs eager fp32"][i] += not torch.equal(eager16, eager32)
    return out


def bleu() -> dict:
    "BLEU and translations of the whole test set, beam 4, by three of our engines."
    from annotated_transformer.engines import ENGINES
    from annotated_transformer.translator import corpus_bleu
    ours = decoding("fp32")[0]
    data = ROOT.parent / "shared" / "data" / "multi30k"
    sources = (data / "test_2016_flickr.en").read_text().splitlines()
    references = (data / "test_2016_flickr.de").read_text().splitlines()
    out = {}
    for name, precision, engine in (("eager fp32", "fp32", "eager"),
                                    ("eager bf16", "bf16", "eager"),
                                    ("aot bf16", "bf16", "aot")):
        ours.use(precision=precision, engine=ENGINES[engine], say=False)
        out[name] = ours.translate(sources)
        out[name] = corpus_bleu(out[name], references)[0].score, out[name]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 160, 256])
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--bleu", action="store_true", help="also BLEU of the whole test set")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    from annotated_transformer.engines.compiling import compile_dir
    from annotated_transformer.precision import native_bf16
    from annotated_transformer.utils import CACHE_ENV, hardware
    with tempfile.TemporaryDirectory() as name:
        os.environ[CACHE_ENV] = name          # the translator finds these packages here
        folder = compile_dir(None)
        built = {(pr, kind): build(pr, kind, folder)
                 for pr in PRECISIONS for kind in ("few", "many")}
        results = {pr: [] for pr in PRECISIONS}
        for _ in range(a.rounds):
            for pr in PRECISIONS:
                cmd = [sys.executable, __file__, "--worker", pr, str(folder),
                       str(a.threads), json.dumps(a.rows), str(a.repeats)]
                done = subprocess.run(cmd, capture_output=True, text=True, check=True)
                results[pr].append(json.loads(done.stdout.splitlines()[-1]))
        tokens = differing(folder, a.sentences)
        scores = bleu() if a.bleu else {}
    print(f"machine: {hardware()}, PyTorch kernels "
          f"{torch.backends.cpu.get_cpu_capability()}, bf16 "
          f"{'native' if native_bf16('cpu') else 'emulated'}; {a.threads} threads; torch "
          f"{torch.__version__}; a fresh process per precision and round, best of "
          f"{a.rounds} rounds of the median of {a.repeats} runs")
    print("build seconds: " + ", ".join(f"{pr} {kind} {s:.0f}"
                                       for (pr, kind), s in built.items()))
    print("\n| program | fp32 µs | bf16 µs | bf16 / fp32 |\n|---|---:|---:|---:|")
    for key in results["fp32"][0]:
        best = {pr: min(r[key] for r in results[pr]) for pr in PRECISIONS}
        print(f"| {key} | {best['fp32']:.0f} | {best['bf16']:.0f} | "
              f"{best['bf16'] / best['fp32']:.2f} |")
    print(f"\nof the first {a.sentences} test sentences, one at a time (greedy, beam 4):")
    for key, value in tokens.items():
        print(f"  {key}: {tuple(value)}")
    if scores:
        same = sum(x == y for x, y in zip(scores["eager bf16"][1], scores["aot bf16"][1]))
        print("the whole test set, beam 4: BLEU " + ", ".join(
            f"{key} {score:.2f}" for key, (score, _) in scores.items()) + f"; aot bf16 "
            f"translates {len(scores['aot bf16'][1]) - same} of "
            f"{len(scores['aot bf16'][1])} sentences otherwise than eager bf16")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        pr, folder, threads, rows, repeats = sys.argv[2:]
        torch.set_num_threads(int(threads))
        print(json.dumps(worker(pr, folder, json.loads(rows), int(repeats))))
    else:
        main()
