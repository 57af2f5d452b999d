"""Where one sentence's decoding step spends its time: the matrix products in context, and the
same products run alone.

On the shipped model (chapter 11), one test sentence is encoded and 15 cached greedy steps are
profiled with torch.profiler: the share of the step spent in `aten::addmm`, and each product's
average time. Then the decoder's own matrix products of one step are timed alone, back to back,
and a matrix-vector product's rate is measured against the bytes of weights it cycles through:
the rate falls once the weights no longer stay in the processor's cache, which is where a step
that reads all of the decoder's matrices stands. The model is stored as the translator decodes
in float32 on a CPU (`column_major`, chapter 9a), unless --layout rows.

    python bench/profile_step.py --threads 2
"""
import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from annotated_transformer.attention import padding_mask
from annotated_transformer.decoding import decode_step, init_cache
from annotated_transformer.engines.quantization import column_major
from annotated_transformer.run.pretrained import load_translator
from annotated_transformer.utils import hardware

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "A man in a blue shirt is standing on a ladder cleaning windows."


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=str(ROOT / "models" / "multi30k_en_de"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--layout", choices=("columns", "rows"), default="columns")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    translator = load_translator(a.model_dir, device="cpu")
    model, sp = translator.model.eval(), translator.sp
    if a.layout == "columns":
        model = column_major(model)
    src = torch.tensor([sp.encode(SENTENCE)])
    with torch.inference_mode():
        mask = padding_mask(src, 0)
        memory = model.encode(src, src_mask=mask)

        def steps() -> None:
            cache, tokens = init_cache(model), torch.ones(1, 1, dtype=torch.long)
            for _ in range(a.steps):
                logp = decode_step(model, memory, mask, tokens, cache)
                tokens = torch.cat([tokens, logp.argmax(-1, keepdim=True)], 1)

        for _ in range(3):
            steps()
        t0 = time.perf_counter()
        for _ in range(20):
            steps()
        per_step = (time.perf_counter() - t0) / 20 / a.steps
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            steps()
        events = prof.key_averages(group_by_input_shape=True)
        total = sum(e.self_cpu_time_total for e in events)
        mm = [e for e in events if e.key == "aten::addmm"]
        share = sum(e.self_cpu_time_total for e in mm) / total
        linears = []
        for layer in model.decoder.layers:
            d = model.config.d_model
            cross = layer.cross_attn.in_proj
            linears += [(layer.self_attn.in_proj.weight, layer.self_attn.in_proj.bias),
                        (layer.self_attn.out_proj.weight, layer.self_attn.out_proj.bias),
                        (cross.weight[:d], cross.bias[:d]),
                        (layer.cross_attn.out_proj.weight, layer.cross_attn.out_proj.bias),
                        (layer.feed_forward.linear1.weight, layer.feed_forward.linear1.bias),
                        (layer.feed_forward.linear2.weight, layer.feed_forward.linear2.bias)]
        linears.append((model.generator.weight, model.generator.bias))
        alone = {}
        for w, b in linears:
            x = torch.randn(1, w.size(1))
            for _ in range(20):
                F.linear(x, w, b)
            t0 = time.perf_counter()
            for _ in range(200):
                F.linear(x, w, b)
            alone[tuple(w.shape)] = (time.perf_counter() - t0) / 200
        inputs = [torch.randn(1, w.size(1)) for w, _ in linears]
        t0 = time.perf_counter()
        for _ in range(50):
            for (w, b), x in zip(linears, inputs):
                F.linear(x, w, b)
        in_sequence = (time.perf_counter() - t0) / 50
        step_mb = sum(w.numel() * w.element_size() for w, _ in linears) / 2**20
        rates = {mb: gemv_rate(mb, a.layout) for mb in (2, 4, 8, 16, 24, 32, 64)}
    print(f"{hardware()}, PyTorch kernels {torch.backends.cpu.get_cpu_capability()}, "
          f"{a.threads} threads")
    print(f"one cached greedy step: {1e3 * per_step:.2f} ms; in aten::addmm: {share:.0%}")
    print(f"the step's {len(linears)} matrix products back to back, alone: "
          f"{1e3 * in_sequence:.2f} ms for {step_mb:.1f} MiB of float32 weights "
          f"({step_mb * 2**20 / in_sequence / 1e9:.0f} GB/s)")
    print("matrix-vector products cycling through N MiB of (1024, 256) weights, "
          f"{a.layout}: " + ", ".join(f"{mb} MiB {r:.0f} GB/s" for mb, r in rates.items()))
    print("| product (weight shape) | µs in the step | µs alone, same weight repeated |")
    print("|---|---:|---:|")
    for e in mm:
        shape = tuple(reversed(e.input_shapes[2]))          # (in, out) -> (out, in)
        print(f"| {shape} | {e.self_cpu_time_total / e.count:.0f} "
              f"| {1e6 * alone.get(shape, float('nan')):.0f} |")


def gemv_rate(mib: int, layout: str, rounds: int = 30) -> float:
    "Bytes per second of one-row products cycling through `mib` MiB of weights."
    n = mib * 2**20 // (1024 * 256 * 4)
    weights = [torch.randn(1024, 256) for _ in range(n)]
    if layout == "columns":
        weights = [w.t().contiguous().t() for w in weights]
    x, times = torch.randn(1, 256), []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for w in weights:
            F.linear(x, w)
        times.append(time.perf_counter() - t0)
    return n * 1024 * 256 * 4 / sorted(times)[len(times) // 2] / 1e9


if __name__ == "__main__":
    main()
