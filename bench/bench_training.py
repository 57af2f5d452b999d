"""Training speed: our Transformer against PyTorch's nn.Transformer, side by side.

Both models get the same configuration (post-norm, ReLU, dropout 0.1, tied embeddings
scaled by sqrt(d_model), sinusoidal positions, the same initialisation), the same batches
and dropout draws, and the same loss, optimizer and `train_step` (part 7c). One model per
(implementation, precision) is trained, and their steps are interleaved in one process, in
an order that rotates every step, so that any drift of the machine's speed affects all
alike. Score: target tokens per second (median over the measured steps), for fp32 and for
bf16 autocast. By default bf16 is measured only where the device computes it natively
(chapter 0's rule, the one `precision="auto"` follows); where it is emulated it is skipped,
with a line saying so and the slowdown of one matrix product, unless named in --precisions.
Not a test: the numbers depend on the machine.

    python bench/bench_training.py                 # both configs, a few minutes on a CPU
    python bench/bench_training.py --configs small --steps 10 --threads 1
    python bench/bench_training.py --before /tmp/old   # also an earlier checkout's model

`--before PATH` adds a third implementation to the same interleaved run: the package of an
earlier checkout at PATH (e.g. `git worktree add /tmp/old <commit>`), imported under another
name with its own `make_model` and `train_step`, so a change is measured against the code
before it on the same batches, dropout draws and machine state. `--out FILE` also writes the
table as JSON, with the commits and the machine (part 7c's page loads
bench/results/training_speed.json).
"""
import argparse
import importlib
import json
import importlib.util
import math
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

from annotated_transformer.utils import default_device
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.batching import make_batch
from annotated_transformer.training import make_optimizer, train_step
from annotated_transformer.precision import bf16_slowdown, native_bf16, resolve_precision

CONFIGS = {  # name: (n_layers, d_model, d_ff, n_heads, max_tokens per side, measured steps)
    "small": (3, 256, 1024, 4, 2048, 12),
    "base": (6, 512, 2048, 8, 2048, 4),
}


class Reference(nn.Module):
    """nn.Transformer with the embeddings, positions and generator of our model, called like
    ours: model(src, tgt, src_mask, tgt_mask) -> log-probabilities; masks True = may attend."""

    def __init__(self, vocab: int, config: TransformerConfig):
        super().__init__()
        c = self.config = config
        self.core = nn.Transformer(c.d_model, c.n_heads, c.n_layers, c.n_layers, c.d_ff,
                                   c.p_drop, activation="relu", batch_first=True,
                                   norm_first=c.norm_first)
        # post-norm: our model has no final LayerNorm after the stacks; nor does the paper
        if not c.norm_first:
            self.core.encoder.norm = self.core.decoder.norm = None
        self.core.encoder.enable_nested_tensor = False
        # our model drops out sub-layer outputs and embedding sums only (§5.4, p_attn_drop=0,
        # p_ff_drop=0); nn.Transformer also drops attention weights and the FFN's hidden layer
        for layer in [*self.core.encoder.layers, *self.core.decoder.layers]:
            layer.dropout = nn.Identity()                     # inside the feed-forward block
            for attn in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attn is not None:
                    attn.dropout = 0.0                        # on the attention weights
        self.embed = nn.Embedding(vocab, c.d_model)
        self.out = nn.Linear(c.d_model, vocab)
        self.out.weight = self.embed.weight
        pos = torch.arange(c.max_len)[:, None]
        freq = torch.exp(torch.arange(0, c.d_model, 2) * (-math.log(10000.0) / c.d_model))
        pe = torch.zeros(c.max_len, c.d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
        self.register_buffer("pe", pe)
        self.drop = nn.Dropout(c.p_drop)
        for name, p in self.named_parameters():    # the initialisation of our make_model
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def embed_seq(self, x):
        return self.drop(self.embed(x) * math.sqrt(self.config.d_model) + self.pe[:x.size(1)])

    def forward(self, src, tgt, src_mask, tgt_mask):
        src_pad = ~src_mask[:, 0]                                   # True = padding
        causal = ~torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool,
                             device=tgt.device).tril()              # True = blocked
        h = self.core(self.embed_seq(src), self.embed_seq(tgt), tgt_mask=causal,
                      src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
                      tgt_key_padding_mask=tgt == self.config.pad_id)
        return self.out(h).log_softmax(-1)


def make_batches(n, vocab, max_tokens, seed=0):
    "Copy-task pairs of 10-50 tokens (something to learn), in batches of ~max_tokens per side."
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(10, 50)
        seqs = [[rng.randrange(3, vocab) for _ in range(length + rng.randint(-2, 2))]
                for _ in range(max_tokens // (length + 3))]
        out.append(make_batch([(s, s) for s in seqs]))
    return out


def load_before(path):
    "The `model` and `training` modules of the package in the checkout at `path`."
    folder = Path(path).resolve() / "annotated_transformer"
    spec = importlib.util.spec_from_file_location(
        "annotated_transformer_before", folder / "__init__.py",
        submodule_search_locations=[str(folder)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return (importlib.import_module(f"{spec.name}.model"),
            importlib.import_module(f"{spec.name}.training"))


def bench(name, vocab, precisions, warmup_steps, steps, device, before=None):
    "Tokens/s and mean loss of each (model, precision), all steps interleaved."
    n_layers, d_model, d_ff, n_heads, max_tokens, default_steps = CONFIGS[name]
    steps = steps or default_steps
    fields = dict(n_layers=n_layers, d_model=d_model, d_ff=d_ff, n_heads=n_heads,
                  p_drop=0.1, max_len=128)
    config = TransformerConfig(**fields)
    builders = {"ours": lambda: make_model(vocab, vocab, config),
                "reference": lambda: Reference(vocab, config)}
    step_of = {"ours": train_step, "reference": train_step}
    if before:
        old_model, old_training = before
        old_config = old_model.TransformerConfig(**fields)
        builders["before"] = lambda: old_model.make_model(vocab, vocab, old_config)
        step_of["before"] = old_training.train_step
    runs = {}
    for precision in precisions:
        for kind, build in builders.items():
            torch.manual_seed(0)                   # same initial weights per kind
            model = build().to(device)
            # a short warm-up so that the loss moves within the few measured steps
            runs[kind, precision] = (model, make_optimizer(model, d_model, warmup=100))
    batches = [b.to(device) for b in make_batches(warmup_steps + steps, vocab, max_tokens)]
    speed = {k: [] for k in runs}
    losses = {k: [] for k in runs}
    keys = list(runs)
    for i, batch in enumerate(batches):
        for k in keys[i % len(keys):] + keys[:i % len(keys)]:     # rotate the order
            model, (optimizer, scheduler) = runs[k]
            torch.manual_seed(i)                   # the same dropout masks for all
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = step_of[k[0]](model, [batch], optimizer, scheduler, precision=k[1])
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= warmup_steps:
                speed[k].append(batch.n_tgt_tokens / (time.perf_counter() - t0))
                losses[k].append(float(out["loss"]))
    params = {k: sum(p.numel() for p in runs[k, precisions[0]][0].parameters())
              for k in builders}
    return {k: {"tok_s": statistics.median(speed[k]), "loss": statistics.mean(losses[k])}
            for k in runs}, params


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="small,base")
    p.add_argument("--precisions", default=None,
                   help="comma-separated (default: fp32, and bf16 where it is native)")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--steps", type=int, default=0, help="measured steps (default: per config)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--before", default=None,
                   help="an earlier checkout whose model also runs, as 'before'")
    p.add_argument("--out", default=None, help="also write the results as JSON here")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    # nn.MultiheadAttention's fused fast path fails under CPU bf16 autocast in eval mode
    torch.backends.mha.set_fastpath_enabled(False)
    device = default_device()
    print(f"device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"vocab {a.vocab}")
    if a.precisions:
        precisions = a.precisions.split(",")
    elif native_bf16(device):
        precisions = ["fp32", "bf16"]
    else:
        precisions = ["fp32"]
        print(f"bf16 skipped: {resolve_precision('auto', device)[1]}; a 256x256 "
              f"product takes {bf16_slowdown(device):.1f}x as long in bf16 here "
              "(--precisions fp32,bf16 to measure it anyway)")
    results = {}
    for name in a.configs.split(","):
        t0 = time.perf_counter()
        results[name], params = bench(name, a.vocab, precisions, a.warmup_steps, a.steps,
                                      device, load_before(a.before) if a.before else None)
        print(f"  {name}: {time.perf_counter() - t0:.0f} s, parameters {params}", flush=True)
    header = (f"{'config':7s} {'precision':9s} {'reference tok/s':>15s} {'ours tok/s':>11s} "
              f"{'ours/ref':>8s} {'ours/ref fp32':>13s} {'loss ref':>8s} {'loss ours':>9s}")
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        ref32 = r.get(("reference", "fp32"), r["reference", precisions[0]])["tok_s"]
        for precision in precisions:
            ref, ours = r["reference", precision], r["ours", precision]
            print(f"{name:7s} {precision:9s} {ref['tok_s']:15.0f} {ours['tok_s']:11.0f} "
                  f"{ours['tok_s'] / ref['tok_s']:8.2f} {ours['tok_s'] / ref32:13.2f} "
                  f"{ref['loss']:8.3f} {ours['loss']:9.3f}")
            if ("before", precision) in r:
                old = r["before", precision]
                print(f"{'':7s} {'':9s} before: {old['tok_s']:.0f} tok/s, ours/before "
                      f"{ours['tok_s'] / old['tok_s']:.2f}, loss {old['loss']:.3f}")
        if ("ours", "fp32") in r and ("ours", "bf16") in r:
            l32, l16 = r["ours", "fp32"]["loss"], r["ours", "bf16"]["loss"]
            print(f"{'':7s} our mean loss, bf16 vs fp32 (same weights, batches, dropout): "
                  f"{l16:.4f} vs {l32:.4f} ({(l16 - l32) / l32:+.2%})")
    print("tok/s: median over the measured steps of target tokens / step time")
    if a.out:
        write_results(a, results, precisions)


def write_results(a, results: dict, precisions: list) -> None:
    "The table as JSON at `a.out`: each row's tokens a second, the commits, the machine."
    from bench_complexity import commit, machine      # this folder's helpers
    before = a.before and subprocess.run(["git", "-C", a.before, "rev-parse", "HEAD"],
                                         capture_output=True, text=True).stdout.strip()
    rows = [{"config": name, "precision": p, "steps": a.steps or CONFIGS[name][-1],
             **{f"{kind}_tok_s": r[kind, p]["tok_s"] for kind, _ in r if _ == p},
             **{f"{kind}_loss": r[kind, p]["loss"] for kind, _ in r if _ == p}}
            for name, r in results.items() for p in precisions]
    out = {"command": "python bench/bench_training.py " + " ".join(sys.argv[1:]),
           "commit": commit(), "before_commit": before,
           "machine": machine(torch.get_num_threads()), "rows": rows}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
