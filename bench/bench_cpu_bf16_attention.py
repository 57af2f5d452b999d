"""Training in bf16 on a CPU: Eq. (1) written out against PyTorch's fused kernel.

Chapter 2's `MultiHeadAttention` runs Eq. (1) as `F.scaled_dot_product_attention` whenever
no weights are kept, except while training in bf16 on a CPU, where it writes the equation
out (chapter 1's `attention`). This script measures why: one training step (forward,
backward, Adam) of the model under bf16 autocast, with dropout on the attention weights,
timed with each form. Each (form, round) runs in a fresh process of its own and the forms
take turns, so a drift of the machine's speed hits both alike; the score is the median step
time of each process, and the ratio fused / written out per round is printed with its
median. Not a test: the numbers depend on the machine (its name and PyTorch's kernels are
printed). Needs a CPU that computes bf16 natively to mean anything.

    python bench/bench_cpu_bf16_attention.py --configs small base --rounds 3 --steps 6
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

CONFIGS = {"small": dict(n_layers=3, d_model=256, d_ff=1024, n_heads=4),  # the multi30k size
           "base": dict()}                                                 # Table 3's base


def child(config: str, fused: bool, steps: int, threads: int) -> None:
    "Time `steps` training steps in this process; print the median as JSON."
    from annotated_transformer import multihead
    from annotated_transformer.batching import make_batch
    from annotated_transformer.model import TransformerConfig, make_model
    from annotated_transformer.training import make_optimizer, train_step

    torch.set_num_threads(threads)
    written_out = multihead.MultiHeadAttention.forward

    def always_fused(self, *, query, key, value, mask=None, cache=None):
        q, k, v = multihead._project_heads(self, query, key, value, cache)
        if mask is not None and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             dropout_p=self.dropout.p if self.training else 0)
        return self.out_proj(out.transpose(1, 2).flatten(2))

    multihead.MultiHeadAttention.forward = always_fused if fused else written_out
    torch.manual_seed(0)
    c = TransformerConfig(p_drop=0.1, p_attn_drop=0.1, **CONFIGS[config])
    model = make_model(8000, 8000, c)
    optimizer, scheduler = make_optimizer(model, c.d_model)
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(10, 30, (100,), generator=g).tolist()
    batch = make_batch([(torch.randint(4, 8000, (n,), generator=g).tolist(),
                         torch.randint(4, 8000, (n,), generator=g).tolist()) for n in lengths])
    times = []
    for _ in range(steps + 2):                         # two warm-up steps, not counted
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            train_step(model, batch, optimizer, scheduler)
        times.append(time.perf_counter() - start)
    print(json.dumps({"median_s": statistics.median(times[2:])}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", nargs="+", default=["small", "base"], choices=CONFIGS)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--child", nargs=2, metavar=("CONFIG", "FORM"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child[0], a.child[1] == "fused", a.steps, a.threads)
        return
    from annotated_transformer.utils import hardware
    print(f"{hardware()}; PyTorch kernels {torch.backends.cpu.get_cpu_capability()}; "
          f"{a.threads} threads; torch {torch.__version__}")
    for config in a.configs:
        ratios = []
        for r in range(a.rounds):
            got = {}
            for form in (("fused", "written") if r % 2 else ("written", "fused")):
                out = subprocess.run([sys.executable, __file__, "--child", config, form,
                                      "--steps", str(a.steps), "--threads", str(a.threads)],
                                     capture_output=True, text=True, check=True)
                got[form] = json.loads(out.stdout.splitlines()[-1])["median_s"]
            ratios.append(got["fused"] / got["written"])
            print(f"{config} round {r + 1}: written out {got['written'] * 1000:.0f} ms, "
                  f"fused {got['fused'] * 1000:.0f} ms a step, fused/written "
                  f"{ratios[-1]:.3f}")
        print(f"{config}: fused / written out, median of {a.rounds} rounds: "
              f"{statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
