"""Decoding speed with and without the key-value cache (chapter 9), side by side.

Greedy decoding and beam search (beam 4, alpha 0.6) on one randomly initialised model and
the same random sources, each run with the cache and without. Every output is forced to
exactly --steps tokens (EOS is forbidden until the length limit), so both variants take the
same number of steps; the script checks that they return the same tokens and scores.
By default the model's matrices are stored column after column (`column_major`, chapter 9a),
as the translator decodes in float32 on a CPU; --layout rows keeps nn.Linear's own layout.

    python bench/bench_decoding.py                         # base width, 6+6 layers
    python bench/bench_decoding.py --d-model 256 --layers 3 --quick
"""
import argparse
import os
import platform
import sys
import time

import torch

from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.formats import BOS_ID, EOS_ID
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.engines.quantization import column_major


def best_time(fn, repeats: int):
    "Shortest wall-clock time of `repeats` calls of `fn`, and the last result."
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=6, help="layers in each stack")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--steps", type=int, default=64, help="output tokens per sentence")
    p.add_argument("--repeats", type=int, default=2, help="best of this many runs")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--quick", action="store_true", help="one run each, smaller batches")
    p.add_argument("--layout", choices=("columns", "rows"), default="columns",
                   help="how the matrices are stored (default: %(default)s, the translator's)")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    repeats = 1 if a.quick else a.repeats
    torch.manual_seed(0)
    config = TransformerConfig.preset("base", n_layers=a.layers, d_model=a.d_model,
                                      d_ff=4 * a.d_model, n_heads=max(1, a.d_model // 64),
                                      max_len=max(512, a.steps))
    model = make_model(a.vocab, a.vocab, config).eval()
    if a.layout == "columns":
        model = column_major(model)
    n_params = sum(t.numel() for t in model.parameters())
    force = dict(max_len_a=0, max_len_b=a.steps, min_len=a.steps)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print("command: python bench/bench_decoding.py " + " ".join(sys.argv[1:] if argv is None
                                                                 else argv))
    print(f"model:   {a.layers}+{a.layers} layers, d_model {a.d_model}, d_ff {4 * a.d_model}, "
          f"{config.n_heads} heads, vocab {a.vocab}: {n_params / 1e6:.1f}M parameters "
          f"(random weights, stored by {a.layout})")
    print(f"input:   random sources of {a.src_len} tokens; {a.steps} output tokens each")
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs, kernels "
          f"{torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} torch "
          f"threads, load average {load:.1f}; torch {torch.__version__}")
    cases = [("greedy", 1), ("greedy", 64), ("beam 4", 1), ("beam 4", 8)]
    if a.quick:
        cases = [("greedy", 1), ("greedy", 8), ("beam 4", 1)]
    greedy_decode(model, torch.randint(3, a.vocab, (1, 4)), bos_id=BOS_ID, eos_id=EOS_ID,
                  max_len_b=4)                                       # warm-up
    print()
    print("| search | batch | uncached tokens/s | cached tokens/s | speed-up | same output |")
    print("|---|---:|---:|---:|---:|---|")
    for search, batch in cases:
        gen = torch.Generator().manual_seed(batch)
        src = torch.randint(3, a.vocab, (batch, a.src_len), generator=gen)

        def run(use_cache: bool):
            if search == "greedy":
                return greedy_decode(model, src, bos_id=BOS_ID, eos_id=EOS_ID,
                                     use_cache=use_cache, **force)
            return beam_search(model, src, beam_size=4, alpha=0.6, bos_id=BOS_ID, eos_id=EOS_ID,
                               use_cache=use_cache, **force)

        t_plain, (tok_plain, score_plain) = best_time(lambda: run(False), repeats)
        t_cache, (tok_cache, score_cache) = best_time(lambda: run(True), repeats)
        assert tok_cache.size(-1) == a.steps, tok_cache.shape
        # scores are sums of 64 log-probabilities (about -500 here): compare relatively
        same = torch.equal(tok_cache, tok_plain) and torch.allclose(
            score_cache, score_plain, rtol=1e-5, atol=1e-5)
        n = batch * a.steps                                   # output tokens produced
        print(f"| {search} | {batch} | {n / t_plain:,.0f} | {n / t_cache:,.0f} "
              f"| {t_plain / t_cache:.1f}× | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
