"""Part 9f's results file: the decoding step before and after compiling, the first call's
cost, and the compiled engines' translations of the whole test set against the eager ones.

On the shipped model (chapter 11), in float32 with the weights as the Translator decodes them
on a CPU (`decoding_model`, chapter 9a):
  - step: one test sentence decoded greedily, token by token, by chapter 9's cached step
    ("eager cached"), part 9b's static step run eagerly ("static eager"), compiled by part
    9d ("static compiled") and compiled ahead of time into a package ("static aot"), the
    static steps' buffers made as part 9b's decoders make them (the compiled step's at the
    full length limit, its shapes fixed; the others' short, grown when full): milliseconds
    per step (median of --repeats passes over the sentence's steps) and PyTorch operator
    calls per step (top-level `aten::` calls under torch.profiler: an operator called
    inside another is not counted again; the loops Inductor generates and the calls inside
    the package are not operator calls). Each engine in a fresh process of its own,
    --rounds rounds, engines taking turns; the best round counts, and each round's ratio
    of chapter 9's step to each compiled one is kept (the spread between rounds).
  - first call: `Translator.use(precision="fp32", engine=...)` then
    `translate(sentence, beam_size=1)` in a fresh process: eager; compiled with an empty cache folder (the
    trial and the compilation), then in a new process with that folder kept; aot the
    same way (the package's build, then loading it).
  - same: every sentence of test_2016_flickr, greedy and beam 4, by each engine, with
    BLEU and the number of lines identical to the eager ones (one process: these times
    are not a benchmark);
  - rows: a step of each of the model's two packages ("few" and "many" rows) at 1 to 256
    rows, in one process, the packages taking turns; then the encoder with the
    cross-attention keys and values, eager and each package's, for one sentence and for a
    batch of BATCH_SIZE test sentences.
Writes bench/results/static_step.json, which part 9f loads.

    python bench/static_results.py --threads 2
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
SENTENCE = "A man in a blue shirt is standing on a ladder cleaning windows."
STEP_ENGINES = ("eager cached", "static eager", "static compiled", "static aot")
ENGINES = ("eager", "compiled", "aot")


def _translator(a):
    from annotated_transformer.run.pretrained import load_translator
    torch.set_num_threads(a.threads)
    return load_translator(a.model_dir, device="cpu")


def weight_bytes(model) -> int:
    """Bytes of weights one decoding step reads: the decoder's, less the encoder-side
    keys' and values' projections (computed once per sentence), and the output layer."""
    total = 0
    for name, p in model.decoder.named_parameters():
        share = 1 / 3 if "cross_attn.in_proj" in name else 1     # W^Q of [W^Q W^K W^V]
        total += share * p.numel() * p.element_size()
    return int(total + sum(p.numel() * p.element_size()
                           for p in model.generator.parameters()))


def top_level_ops(prof) -> int:
    "aten:: calls not made inside another aten:: call."
    count = 0
    for e in prof.events():
        parent, nested = e.cpu_parent, False
        while parent is not None and not nested:
            nested, parent = parent.name.startswith("aten::"), parent.cpu_parent
        count += e.name.startswith("aten::") and not nested
    return count


def step_worker(engine: str, a) -> dict:
    "One sentence's steps, fed its own greedy output: time and operators per step."
    from torch.profiler import ProfilerActivity, profile

    from annotated_transformer.decoding import (
        MAX_LEN_A, MAX_LEN_B, decode_step, greedy_decode, init_cache, prepare_decoding)
    from annotated_transformer.engines.quantization import decoding_model
    from annotated_transformer.engines.compiling import compiled_step
    from annotated_transformer.engines import aot_step
    from annotated_transformer.engines.static import StaticCache, bucket, static_step
    from annotated_transformer.translator import encode_sources
    tr = _translator(a)
    model = decoding_model(tr.model, "fp32", torch.device("cpu")).eval()
    src = torch.tensor(encode_sources(tr.sp, [SENTENCE], max_len=model.config.max_len,
                                      max_len_b=MAX_LEN_B))
    with torch.inference_mode():
        out = greedy_decode(model, src)[0]                        # (1, n): BOS ... EOS
        memory, src_mask, limit = prepare_decoding(model, src, None, MAX_LEN_A, MAX_LEN_B)
        n = out.size(1) - 1                                       # steps that made it
        step = {"static compiled": compiled_step, "static aot": aot_step}.get(
            engine, lambda: static_step)()

        def one_pass():
            if engine == "eager cached":
                cache = init_cache(model)
                for i in range(n):
                    decode_step(model, memory, src_mask, out[:, :i + 1], cache)
                return
            fixed = getattr(step, "fixed_shapes", False)     # as part 9b's decoders
            length = int(limit.max()) if fixed else 1
            cache = StaticCache(model, 1, bucket(length), bucket(src.size(1)))
            cache.fill_source(model, memory, src_mask)
            for i in range(n):
                cache.grow(i + 1)
                step(model, out[:, i:i + 1].clone(), torch.tensor([i]), cache)

        one_pass()                      # compiles the compiled step, loads the package
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            one_pass()
            times.append((time.perf_counter() - t0) / n)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            one_pass()
    failed = getattr(step, "failed", None)            # the compiled step fell back
    return {"ms_per_step": 1e3 * statistics.median(times), "ops_per_step":
            top_level_ops(prof) / n, "steps": n, "weight_bytes": weight_bytes(model),
            "failed": repr(failed) if failed else None}


def first_worker(engine: str, a) -> dict:
    "Seconds of the first translate call of a fresh process."
    from annotated_transformer import engines
    tr = _translator(a)
    t0 = time.perf_counter()                    # the engine decides, then translates
    tr.use(precision="fp32", engine=engines.ENGINES[engine], say=False)
    out = tr.translate(SENTENCE, beam_size=1)
    return {"seconds": time.perf_counter() - t0, "out": out}


def same_worker(_, a) -> dict:
    """The whole test set, greedy and beam 4, by each engine: lines identical to the
    eager ones, BLEU, seconds (compiled: including compiling each new batch shape; aot:
    its two packages built before), and whether a compiled step fell back to eager."""
    from annotated_transformer import engines
    from annotated_transformer.translator import corpus_bleu
    tr = _translator(a)
    src = Path(a.data, "test_2016_flickr.en").read_text().splitlines()[:a.sentences or None]
    ref = Path(a.data, "test_2016_flickr.de").read_text().splitlines()[:len(src)]
    result = {"sentences": len(src)}
    # packages are built once per model and kept: build the many-rows one before timing
    # (the few-rows one came with the first-call processes, which share the folder)
    decided = {e: tr.use(precision="fp32", engine=engines.ENGINES[e], say=False).decoding
               for e in ENGINES}                   # aot: both packages, built here
    for k in (1, 4):
        runs = {}
        for engine in ENGINES:
            tr.decoding = decided[engine]
            t0 = time.perf_counter()
            out = tr.translate(src, beam_size=k)
            runs[engine] = {"seconds": time.perf_counter() - t0, "out": out,
                            "bleu": corpus_bleu(out, ref)[0].score}
        outs = {e: r.pop("out") for e, r in runs.items()}
        result[f"beam{k}"] = {e: {"identical": sum(x == y for x, y in zip(
            outs["eager"], outs[e])), **r} for e, r in runs.items()}
    result["fell_back"] = {e: decided[e].step.why or None for e in ENGINES[1:]}
    return result


ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def rows_worker(_, a) -> dict:
    """A step of each of the model's two packages at each number of rows in ROWS (buffers
    of 32 output and 32 source positions), the packages taking turns call by call:
    milliseconds, the median of --repeats calls. Then the encoder with the decoder's
    cross-attention keys and values (what a package's encoder program computes), eager
    (`model.encode`, then `source_keys_values`) and each package's, taking turns, for
    SENTENCE alone and for the first BATCH_SIZE test sentences padded into one batch."""
    from annotated_transformer.engines.compiling import compile_dir
    from annotated_transformer.decoding import MAX_LEN_B, padding_mask
    from annotated_transformer.engines import _package_run
    from annotated_transformer.engines.packages import FEW_ROWS, step_inputs
    from annotated_transformer.engines.quantization import decoding_model
    from annotated_transformer.engines.static import StaticCache, source_keys_values
    from annotated_transformer.translator import BATCH_SIZE, encode_sources
    tr = _translator(a)
    model = decoding_model(tr.model, "fp32", torch.device("cpu")).eval()
    runs = {kind: _package_run(model, compile_dir(), kind) for kind in ("few", "many")}

    def turns(calls: dict) -> dict:            # name -> median ms, calls taking turns
        times = {name: [] for name in calls}
        for _ in range(a.repeats):
            for name, call in calls.items():
                t0 = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - t0)
        return {name: 1e3 * statistics.median(t) for name, t in times.items()}
    ms = {kind: [] for kind in runs}
    with torch.inference_mode():
        for r in ROWS:
            cache = StaticCache(model, r, 32, 32)
            inputs = step_inputs(torch.full((r, 1), 5), torch.tensor([3]), cache)
            for kind, t in turns({k: (lambda run=run: run[0](inputs))
                                  for k, run in runs.items()}).items():
                ms[kind].append(t)
        lines = Path(a.data, "test_2016_flickr.en").read_text().splitlines()
        encoder = {"sentences": [1, BATCH_SIZE], "ms": {}}
        for batch in ([SENTENCE], lines[:BATCH_SIZE]):
            ids = encode_sources(tr.sp, batch, max_len=model.config.max_len,
                                 max_len_b=MAX_LEN_B)
            src = torch.nn.utils.rnn.pad_sequence(
                [torch.tensor(i) for i in ids], batch_first=True,
                padding_value=model.config.pad_id)
            mask = padding_mask(src, model.config.pad_id)
            calls = {"eager": lambda: source_keys_values(
                         model, model.encode(src, src_mask=mask)),
                     **{k: (lambda run=run: run[1]([src, mask])) for k, run in runs.items()}}
            for name, t in turns(calls).items():
                encoder["ms"].setdefault(name, []).append(t)
    return {"rows": list(ROWS), "ms_per_step": ms, "few_rows": FEW_ROWS,
            "encoder": encoder}


WORKERS = {"step": step_worker, "first": first_worker, "same": same_worker,
           "rows": rows_worker}


def spawn(kind: str, engine: str, a, env=None) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, engine, "--model-dir", a.model_dir,
           "--data", a.data, "--threads", str(a.threads), "--repeats", str(a.repeats),
           "--sentences", str(a.sentences)]
    done = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if done.returncode:
        sys.exit(f"{kind} {engine} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=str(ROOT / "models" / "multi30k_en_de"))
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--repeats", type=int, default=20, help="timed passes per process")
    p.add_argument("--sentences", type=int, default=0, help="same: first N (0: all)")
    p.add_argument("--out", type=Path, default=ROOT / "bench/results/static_step.json")
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(WORKERS[a.worker[0]](a.worker[1], a)))
        return
    from annotated_transformer.run.durable import write_durably
    from annotated_transformer.utils import hardware
    kept_dir = tempfile.TemporaryDirectory()  # one cache folder for every compiled run,
    kept = kept_dir.name                      # removed at the end
    env = {"AT_CACHE_DIR": kept}
    first = {"eager": spawn("first", "eager", a),
             "compiled, nothing kept": spawn("first", "compiled", a, env),
             "compiled, kept": spawn("first", "compiled", a, env),
             "aot, nothing kept": spawn("first", "aot", a, env),
             "aot, kept": spawn("first", "aot", a, env)}
    rounds = [{e: spawn("step", e, a, env) for e in STEP_ENGINES} for _ in range(a.rounds)]
    step = {e: min((r[e] for r in rounds), key=lambda x: x["ms_per_step"])
            for e in STEP_ENGINES}
    result = {"hardware": hardware(), "isa": torch.backends.cpu.get_cpu_capability(),
              "threads": a.threads, "torch": torch.__version__, "sentence": SENTENCE,
              "rounds": a.rounds, "repeats": a.repeats,
              "commit": subprocess.run(["git", "describe", "--always", "--dirty"],
                                       cwd=ROOT, capture_output=True,
                                       text=True).stdout.strip(),
              "date": time.strftime("%Y-%m-%d"), "step": step, "first_call": first,
              "round_ratios": {e: [r["eager cached"]["ms_per_step"] / r[e]["ms_per_step"]
                                   for r in rounds] for e in STEP_ENGINES[2:]},
              "same": spawn("same", "-", a, env), "rows": spawn("rows", "-", a, env)}
    write_durably(a.out, json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
