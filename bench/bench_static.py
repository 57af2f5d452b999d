"""Part 9b's static-shape step, eager and compiled (part 9d), against chapter 9's cached step.

Engines, on the shipped model (chapter 11) and the first --sentences of test_2016_flickr,
greedy, one sentence at a time (batch 1):
  - "eager cached": chapter 9's `greedy_decode` (its cache grows by torch.cat);
  - "static eager": `static_greedy_decode` with `static_step` (buffers allocated once);
  - "static compiled": the same with `compiled_step(**options)`, torch.compile(dynamic=False)
    and the Inductor --options (JSON, e.g. '{"freezing": true}').
Each engine runs in a fresh process of its own in every round, the engines taking turns, so
that a slow moment of a shared machine hits all alike; the best round counts. A process
first decodes every sentence once (for the compiled engine: compiling each shape that the
sentences need, `bucket`ed), then --passes times; the compile time is the first pass minus
a timed one. Every engine must return the same tokens.

    python bench/bench_static.py --threads 2
    python bench/bench_static.py --threads 2 --options '{"freezing": true}'
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("eager cached", "static eager", "static compiled")


def worker(name: str, a) -> dict:
    "In a process of its own: load, decode every sentence once, then time --passes."
    import warnings

    from annotated_transformer.decoding import greedy_decode
    from annotated_transformer.engines.quantization import column_major
    from annotated_transformer.engines.compiling import compiled_step
    from annotated_transformer.engines.static import bucket, static_greedy_decode, static_step
    from annotated_transformer.translator import MAX_LEN_B, encode_sources
    from annotated_transformer.run.pretrained import load_translator
    torch.set_num_threads(a.threads)
    translator = load_translator(a.model_dir, device="cpu")
    model = translator.model.eval()
    if a.layout == "columns":                 # as the Translator decodes fp32 on a CPU
        model = column_major(model)
    lines = Path(a.data, "test_2016_flickr.en").read_text().splitlines()[:a.sentences]
    rows = encode_sources(translator.sp, lines, max_len=model.config.max_len,
                          max_len_b=MAX_LEN_B)
    step = compiled_step(**json.loads(a.options)) if name == "static compiled" else None
    if name == "eager cached":
        run = lambda src: greedy_decode(model, src)[0]
    else:
        run = lambda src: static_greedy_decode(model, src, step=step or static_step)[0]

    def one_pass() -> tuple[float, list]:
        out, t0 = [], time.perf_counter()
        for r in rows:
            out.append(run(torch.tensor([r]))[0].tolist())
        return time.perf_counter() - t0, out

    with torch.inference_mode(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, tokens = one_pass()
        times = [one_pass()[0] for _ in range(a.passes)]
    shapes = {(bucket(len(r) + MAX_LEN_B), bucket(len(r))) for r in rows}
    return {"first": first, "best": min(times), "tokens": tokens,
            "steps": sum(len(t) for t in tokens), "shapes": len(shapes),
            "warnings": [str(w.message) for w in caught],
            "failed": None if step is None or step.failed is None else repr(step.failed)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=str(ROOT / "models" / "multi30k_en_de"))
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sentences", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--passes", type=int, default=3, help="timed passes per process")
    p.add_argument("--options", default="{}", help="Inductor options, JSON")
    p.add_argument("--layout", choices=("columns", "rows"), default="columns")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(a.worker, a)))
        return
    from annotated_transformer.utils import hardware
    torch.set_num_threads(a.threads)
    engines = a.engines.split(",")
    results = {e: [] for e in engines}
    for _ in range(a.rounds):
        for e in engines:
            cmd = [sys.executable, __file__, "--worker", e] + [
                x for k in ("model_dir", "data", "threads", "sentences", "passes",
                            "options", "layout")
                for x in (f"--{k.replace('_', '-')}", str(getattr(a, k)))]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{e} failed:\n{done.stderr[-3000:]}")
            results[e].append(json.loads(done.stdout.splitlines()[-1]))
    print(f"{hardware()}; PyTorch kernels {torch.backends.cpu.get_cpu_capability()}; "
          f"{a.threads} threads; torch {torch.__version__}; one fresh process per engine "
          f"and round, {a.rounds} rounds, best of {a.passes} passes each")
    print(f"greedy, batch 1, {a.sentences} sentences of test_2016_flickr; weights "
          f"{a.layout}; Inductor options {a.options}")
    ref = results[engines[0]][0]["tokens"]
    print("| engine | ms per step | ms per sentence | vs eager cached | first pass s |")
    print("|---|---:|---:|---:|---:|")
    best = {e: min(r["best"] for r in results[e]) for e in engines}
    for e in engines:
        r = results[e][0]
        assert all(x["tokens"] == ref for x in results[e]), f"{e} changed an output"
        print(f"| {e} | {1e3 * best[e] / r['steps']:.3f} | "
              f"{1e3 * best[e] / a.sentences:.1f} | "
              f"{best[engines[0]] / best[e]:.2f}× | "
              f"{min(x['first'] for x in results[e]):.1f} |")
    for e in engines:
        r = results[e][0]
        if e == "static compiled":
            compile_s = [x["first"] - x["best"] for x in results[e]]
            print(f"compiling: {r['shapes']} shapes (bucketed lengths), first pass minus "
                  f"a timed one: {min(compile_s):.1f}-{max(compile_s):.1f} s; "
                  f"fell back to eager: {r['failed'] or 'no'}")
        for w in sorted({w for x in results[e] for w in x["warnings"]}):
            print(f"{e} warned: {w[:300]}")
    print("outputs identical across engines:", all(results[e][0]["tokens"] == ref
                                                   for e in engines))


if __name__ == "__main__":
    main()
