"""Checks of the CUDA-only code paths, for a machine with a GPU (CI has none).

fp16 with loss scaling, bf16 and fp32 training on the copy task (chapter 8, part 7c); cached ==
uncached beam search and greedy decoding (chapter 9); our attention against
`nn.MultiheadAttention` (chapter 2); with a model directory and a source file, the time
to translate the file with beam 4 (chapter 11).

    python bench/cuda_checks.py [MODEL_DIR SOURCE_FILE]
"""
import sys
import tempfile
import time
from pathlib import Path

import torch

from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.formats import (BOS_ID, EOS_ID, FIRST_WORD_ID,
                                           METRICS_FILE, PAD_ID)
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.multihead import MultiHeadAttention
from annotated_transformer.run.checkpoints import read_metrics
from annotated_transformer.lab.copying import copy_task
from annotated_transformer.run.trainer import TrainConfig, train

print(torch.__version__, torch.cuda.get_device_name())
for precision in ["fp16", "bf16", "fp32"]:
    run_dir, t0 = tempfile.mkdtemp(), time.perf_counter()
    torch.manual_seed(0)
    copy_net = make_model(16, 16, TransformerConfig.preset("copy")).to("cuda")
    train(copy_net, copy_task(20_000, 16, seed=1), run_dir=run_dir,
          config=TrainConfig.preset("copy", precision=precision, steps=400),
          valid_pairs=copy_task(200, 16, seed=2))
    metrics = read_metrics(Path(run_dir) / METRICS_FILE)
    losses = [x["loss"] for x in metrics if "loss" in x]
    last_eval = [x for x in metrics if "eval_loss" in x][-1]
    print(f"copy task {precision}: {time.perf_counter() - t0:.1f} s, loss "
          f"{losses[0]:.3f} -> {losses[-1]:.3f}, eval {last_eval}, "
          f"finite={all(v == v for v in losses)}", flush=True)

torch.manual_seed(0)
dev = torch.device("cuda")
model = make_model(50, 50, TransformerConfig(n_layers=2, d_model=64, d_ff=128,
                                             n_heads=4)).to(dev).eval()
src = torch.randint(FIRST_WORD_ID, 50, (6, 9), device=dev)
src[2, 6:] = PAD_ID                                           # a padded source
beam, greedy = {}, {}
for cache in (True, False):
    beam[cache] = beam_search(model, src, beam_size=4, alpha=0.6, max_len_b=12, bos_id=BOS_ID, eos_id=EOS_ID,
                              use_cache=cache)
    greedy[cache] = greedy_decode(model, src, bos_id=BOS_ID, eos_id=EOS_ID, max_len_b=12,
                                  use_cache=cache)
print("beam cached == uncached tokens:", torch.equal(beam[True][0], beam[False][0]),
      "max score diff", (beam[True][1] - beam[False][1]).abs().max().item())
print("greedy cached == uncached tokens:", torch.equal(greedy[True][0], greedy[False][0]))

mha = MultiHeadAttention(64, 4).to(dev).eval()
ref = torch.nn.MultiheadAttention(64, 4, batch_first=True).to(dev).eval()
with torch.no_grad():
    ref.in_proj_weight.copy_(mha.in_proj.weight)
    ref.in_proj_bias.copy_(mha.in_proj.bias)
    ref.out_proj.weight.copy_(mha.out_proj.weight)
    ref.out_proj.bias.copy_(mha.out_proj.bias)
    x = torch.randn(3, 7, 64, device=dev)
    keep = torch.ones(3, 1, 7, dtype=torch.bool, device=dev)
    keep[1, :, 5:] = False                                     # padding in sentence 2
    ours = mha(query=x, key=x, value=x, mask=keep)
    theirs = ref(x, x, x, key_padding_mask=~keep[:, 0], need_weights=False)[0]
    print("MHA vs nn.MultiheadAttention on CUDA, max diff",
          (ours - theirs).abs().max().item())

if len(sys.argv) > 2:
    from annotated_transformer.run.pretrained import load_translator
    translator = load_translator(sys.argv[1], device="cuda")
    sources = [line.strip() for line in open(sys.argv[2], encoding="utf-8")]
    for precision, batch_size in [("fp32", 200), ("bf16", 200), ("bf16", 1000)]:
        translator.use(precision=precision)
        translator.translate(sources[:50], beam_size=4, batch_size=batch_size)   # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        translator.translate(sources, beam_size=4, alpha=0.6, batch_size=batch_size)
        torch.cuda.synchronize()
        print(f"GPU translate {len(sources)} sentences beam 4 {precision} batch "
              f"{batch_size}: {time.perf_counter() - t0:.2f} s", flush=True)
