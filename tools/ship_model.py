"""Make the shipped model directory (models/NAME) from a finished training run.

    python tools/ship_model.py runs/multi30k_en_de models/multi30k_en_de \
        --command "annotated-transformer train --model-dir runs/multi30k_en_de ..."

Writes the selected model in 16-bit safetensors with its tokenizer and training log, scores
the written files on test_2016_flickr (beam 4, alpha 0.6, sacreBLEU) and writes the model
card README.md with that score: every number in the card is measured here or read from the
run's own records.
"""
import argparse
import json
import shutil
import time
from pathlib import Path

import torch

from annotated_transformer.formats import CHECKPOINTS_DIR, METRICS_FILE, RECIPE_FILE
from annotated_transformer.translator import corpus_bleu
from annotated_transformer.run.pretrained import load_translator, save_translator
from annotated_transformer.utils import hardware

LOG_FILE = "training_log.jsonl"

CARD = """\
---
language: [en, de]
license: apache-2.0
library_name: annotated_transformer
tags: [translation, transformer, multi30k]
datasets: [multi30k]
metrics:
  test_2016_flickr_sacrebleu: {bleu:.2f}
  test_2016_flickr_signature: "{signature}"
---
# multi30k_en_de: the book's English→German Transformer

The model that part 11c of *The Annotated Transformer, tested* trains: a Post-LN
encoder–decoder Transformer (Vaswani et al., 2017) of {n_layers}+{n_layers} layers,
d_model {d_model}, d_ff {d_ff}, {n_heads} heads, {params:,} parameters, one shared
sentencepiece BPE vocabulary of {vocab:,} pieces, tied embeddings and output layer.

```python
from annotated_transformer.run.pretrained import load_translator
translator = load_translator("multi30k_en_de")  # this folder, downloaded once
translator.translate(["A dog runs in the snow."])
```

or `annotated-transformer translate --model-dir multi30k_en_de`.

## Result

| test set | decoding | sacreBLEU |
|---|---|---:|
| Multi30k test_2016_flickr (1,000 sentences) | beam 4, α 0.6, fp32 | **{bleu:.2f}** |

sacreBLEU signature: `{signature}` (detokenised, cased).

Computed from the files in this folder (16-bit weights, loaded as float32) by
`tools/ship_model.py`. To compute it again from them (a beam of 4 and α 0.6 are the
defaults):

```bash
annotated-transformer evaluate --model-dir multi30k_en_de --precision fp32 --engine eager \\
    --source test_2016_flickr.en --reference test_2016_flickr.de
```

Translating the 1,000 sentences took {seconds:.1f} s on {here}.
Validation BLEU (greedy, all 1,014 sentences) of the selected average: {val_bleu:.2f}.
{note}
## Training

- **Data:** Multi30k Task 1 English–German, the 29,000 training pairs; the 1,014 validation
  pairs choose the checkpoint average; the test set is used for the number above only.
- **Recipe** (chapter 11c, `TranslationRecipe()` defaults): {steps:,} updates of about
  {max_tokens:,} tokens, Adam (0.9, 0.98, 1e-9), warm-up {warmup:,} steps to a peak rate of
  {peak:.2e} then inverse square root decay, label smoothing {eps_ls}, dropout {p_drop}
  (plus {p_attn} on attention weights and {p_ff} inside the feed-forward layers), bfloat16
  autocast; the final weights average the last {averaged} checkpoints (written every
  {save_every} steps), chosen by validation BLEU.
- **Command:** `{command}`
- **Hardware and time:** {hardware}, PyTorch {torch}; {train_minutes} minutes of training
  and evaluation, {total_minutes} minutes in all. The budget is counted in steps, so the
  same command gives the same model on a slower or faster machine, only later or sooner.
- **Stored:** weights in {dtype} (`model.safetensors`), `tokenizer.model`, `config.json`
  (architecture, training notes, the SHA-256 of every file), `{log}` (the run's metrics).

## Limits

- **Domain:** short English descriptions of photographs (Flickr30k captions). Other text —
  news, dialogue, technical prose, names and numbers it has not seen — comes out poorly.
- **Length:** trained on sentences of at most {max_len} pieces; most training captions are
  under 20 words. Long inputs are truncated to the model's length and degrade well before.
- **Casing and form:** trained on cased, untokenised text; it expects a single sentence per
  line, and writes German with the captions' conventions.
- A teaching model: no safety filtering, no claims beyond the score above.

## Data terms and citation

Multi30k is partly derived from Flickr30k; its authors provide it for non-commercial
research and educational purposes only, and the images' use is subject to Flickr's terms.
This model inherits those terms: use it for research and teaching. Cite the data as:

> Desmond Elliott, Stella Frank, Khalil Sima'an, Lucia Specia. 2016. Multi30K: Multilingual
> English-German Image Descriptions. In *Proceedings of the 5th Workshop on Vision and
> Language*, pages 70–74. doi:10.18653/v1/W16-3210

The code that trained it is Apache-2.0 licensed.
"""


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"))
    ap.add_argument("--command", required=True, help="the command that trained the run")
    ap.add_argument("--note", default="", help="a paragraph for the card, under the result")
    a = ap.parse_args()

    run = load_translator(a.run_dir)
    if a.out_dir.exists():
        shutil.rmtree(a.out_dir)
    a.out_dir.mkdir(parents=True)
    shutil.copyfile(a.run_dir / CHECKPOINTS_DIR / METRICS_FILE, a.out_dir / LOG_FILE)
    save_translator(run, a.out_dir, dtype=torch.float16, extra_files=[LOG_FILE])
    shipped = load_translator(a.out_dir)

    src, ref = read(a.data / "test_2016_flickr.en"), read(a.data / "test_2016_flickr.de")
    t0 = time.perf_counter()
    hyps = shipped.use(precision="fp32").translate(src, beam_size=4, alpha=0.6, batch_size=64)
    seconds = time.perf_counter() - t0
    score, signature = corpus_bleu(hyps, ref)
    print(score, signature, sep="\n")

    recipe = json.loads((a.run_dir / RECIPE_FILE).read_text())
    m, t, notes = recipe["model"], recipe["train"], shipped.notes
    card = CARD.format(
        bleu=score.score, signature=signature, seconds=seconds,
        n_layers=m["n_layers"], d_model=m["d_model"], d_ff=m["d_ff"],
        n_heads=m["n_heads"], max_len=m["max_len"], p_drop=m["p_drop"],
        p_attn=m["p_attn_drop"], p_ff=m["p_ff_drop"],
        params=sum(p.numel() for p in shipped.model.parameters()),
        vocab=shipped.sp.get_piece_size(), steps=notes["steps"],
        max_tokens=t["max_tokens"], warmup=t["warmup"], eps_ls=t["eps_ls"],
        peak=t["lr_factor"] * m["d_model"] ** -0.5 * t["warmup"] ** -0.5,
        averaged=notes["checkpoints_averaged"], save_every=t["save_every"],
        val_bleu=notes["val_bleu_greedy"], command=a.command,
        hardware=notes["hardware"], torch=notes["torch"],
        train_minutes=notes["train_minutes"], total_minutes=notes["total_minutes"],
        dtype="float16", log=LOG_FILE, here=hardware(),
        note=f"\n{a.note}\n" if a.note else "")
    (a.out_dir / "README.md").write_text(card, encoding="utf-8")
    (a.out_dir / "README.md").chmod(0o644)
    size = sum(f.stat().st_size for f in a.out_dir.iterdir()) / 2**20
    print(f"wrote {a.out_dir} ({size:.1f} MiB)")


if __name__ == "__main__":
    main()
