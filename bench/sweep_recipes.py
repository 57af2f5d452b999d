"""Compare translation recipes (part 11c) side by side on one machine.

Each recipe is a `TranslationRecipe` given as overrides of the chapter's current defaults
(the recipe files here spell out the batch and schedule they used, since the defaults
have changed after the sweep). All run as parallel processes on the same device (a GPU
runs several small models at once), each into its own model directory, with validation
BLEU (greedy) every `--bleu-every` steps on the whole validation set. Then each selected
model (checkpoint averaging as in `train_translation`) is scored with beam 4, α = 0.6 on
the validation set. The test set is not touched: it is for the one recipe chosen.

    python bench/sweep_recipes.py --data ../shared/data/multi30k --out runs/sweep \\
        --recipes bench/recipes_multi30k.json --jobs 10
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _one(name: str, overrides: dict, data: str, out: Path, bleu_every: int) -> dict:
    import torch
    from annotated_transformer.data import load_multi30k
    from annotated_transformer.formats import CHECKPOINTS_DIR, METRICS_FILE
    from annotated_transformer.run.checkpoints import read_metrics
    from annotated_transformer.run.recipe import TranslationRecipe, train_translation
    from annotated_transformer.translator import corpus_bleu
    torch.set_num_threads(int(os.environ.get("SWEEP_THREADS", "2")))
    recipe = TranslationRecipe.from_dict(
        {"max_minutes": None, "bleu_every": bleu_every, "bleu_sentences": None,
         **overrides}, where=name)
    t0 = time.perf_counter()
    translator = train_translation(recipe, out / name, data=data)
    minutes = (time.perf_counter() - t0) / 60
    val = load_multi30k(data)["validation"]
    t1 = time.perf_counter()
    translator.use(precision=recipe.train.precision)
    hyps = translator.translate(list(val["en"]), beam_size=4, alpha=0.6, batch_size=200)
    bleu, signature = corpus_bleu(hyps, list(val["de"]))
    metrics = read_metrics(out / name / CHECKPOINTS_DIR / METRICS_FILE)
    curve = {key: [(m["step"], round(m[key], 3)) for m in metrics if key in m]
             for key in ("val_bleu", "eval_loss")}
    return {"curve": curve, "name": name, "overrides": overrides, "val_bleu_beam4": round(bleu.score, 2),
            "signature": signature, "train_minutes": round(minutes, 2),
            "beam_seconds": round(time.perf_counter() - t1, 1), **translator.notes}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="folder of the Multi30k text files")
    p.add_argument("--out", required=True, type=Path, help="folder for the runs")
    p.add_argument("--recipes", required=True, type=Path,
                   help="JSON object: name -> recipe overrides")
    p.add_argument("--jobs", type=int, default=4, help="recipes trained at once")
    p.add_argument("--bleu-every", type=int, default=250)
    p.add_argument("--one", help=argparse.SUPPRESS)      # internal: run one recipe
    a = p.parse_args(argv)
    recipes = json.loads(a.recipes.read_text())
    a.out.mkdir(parents=True, exist_ok=True)
    if a.one:
        result = _one(a.one, recipes[a.one], a.data, a.out, a.bleu_every)
        (a.out / f"{a.one}.result.json").write_text(json.dumps(result, indent=1))
        return 0
    pending, running, results = list(recipes), {}, []
    while pending or running:
        while pending and len(running) < a.jobs:
            name = pending.pop(0)
            log = open(a.out / f"{name}.log", "w")
            running[name] = subprocess.Popen(
                [sys.executable, __file__, "--data", a.data, "--out", str(a.out),
                 "--recipes", str(a.recipes), "--bleu-every", str(a.bleu_every),
                 "--one", name], stdout=log, stderr=subprocess.STDOUT)
        time.sleep(2)
        for name, proc in list(running.items()):
            if proc.poll() is None:
                continue
            del running[name]
            found = a.out / f"{name}.result.json"
            if proc.returncode or not found.exists():
                print(f"{name}: failed (exit {proc.returncode}), see {name}.log")
                continue
            results.append(json.loads(found.read_text()))
            r = results[-1]
            print(f"{name:>24}: val BLEU beam 4 {r['val_bleu_beam4']:5.2f} | greedy "
                  f"{r['val_bleu_greedy']:5.2f} | {r['steps']} steps, last "
                  f"{r['checkpoints_averaged']} averaged | {r['train_minutes']:.1f} min",
                  flush=True)
    (a.out / "results.json").write_text(json.dumps(results, indent=1))
    return 0 if len(results) == len(recipes) else 1


if __name__ == "__main__":
    sys.exit(main())
