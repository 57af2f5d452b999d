"""Run stored runs of chapter 14's sweep again with the code as it is now, and keep the
new records for the chapter's "Reproduce" section, which compares them with the stored
ones:

    nice -n 10 python bench/rerun_table3.py --data ../shared/data/multi30k \\
        --only base_s0

A rerun is the sweep's own run (bench/sweep_table3.py: `run_variant` on one thread, in
float32, BLEU on every validation sentence, the tokenizer trained afresh as the sweep
trained it), of the variant of that name in --variants. Its record is the sweep's record
plus the code it ran: the commit of the checkout that holds the imported package, and
the package's files that differ from that commit (`uncommitted`, empty when none do),
and whether the control below was on (`attention_in_training`). Reruns
accumulate in --out, one record per run and code, so runs of the same variant on two
versions of the code sit side by side.

`--written-attention` is a control: training computes Eq. (1) written out (the scores, a
softmax, the weighted sum: `attention` of chapter 1), as the stored runs' code did, in
place of PyTorch's fused `scaled_dot_product_attention`, while evaluation and decoding
(which run without gradients) keep the fused kernel, as they did then. A difference from
the stored record that remains with it does not come from the kernel.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import annotated_transformer
from annotated_transformer.attention import attention
from annotated_transformer.lab.ablations import (ablation_data, expand_variants,
                                                 run_variant)
from annotated_transformer.run.durable import write_durably
from annotated_transformer.utils import hardware

HERE = Path(__file__).resolve().parent
CODE = Path(annotated_transformer.__file__).resolve().parent   # the package that runs


def git(*args: str) -> str:
    "Output of a git command in the checkout that holds the package ('' outside one)."
    try:
        return subprocess.run(["git", *args], cwd=CODE, capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


def code_state() -> dict:
    "The commit the package comes from, and its files that differ from that commit."
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return {"commit": git("rev-parse", "HEAD").strip() or "unknown",
            "uncommitted": sorted(line[3:] for line in changed.splitlines())}


def written_attention_in_training() -> None:
    "Route training's fused attention calls to Eq. (1) written out (the control)."
    fused = F.scaled_dot_product_attention

    def choose(query, key, value, attn_mask=None, dropout_p=0.0, **options):
        if torch.is_grad_enabled() and dropout_p == 0.0 and not options:
            return attention(query, key, value, mask=attn_mask)[0]
        return fused(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                     **options)

    F.scaled_dot_product_attention = choose


def save(out: Path, run: dict) -> None:
    "Append `run` to the reruns in `out` (written whole and durably: part 0d)."
    done = json.loads(out.read_text()) if out.exists() else {"about": __doc__.strip(),
                                                             "runs": []}
    done["runs"].append(run)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_durably(out, json.dumps(done, indent=1) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="folder of the Multi30k text files (else the Hub)")
    p.add_argument("--variants", type=Path, default=HERE / "table3_paired.json")
    p.add_argument("--only", nargs="+", default=["base_s0"],
                   help="names of the variants to run again (default: %(default)s)")
    p.add_argument("--out", type=Path, default=HERE / "results/table3_rerun.json")
    p.add_argument("--runs", type=Path, help="folder for the runs (default: temporary)")
    p.add_argument("--written-attention", action="store_true",
                   help="train with Eq. (1) written out, not fused (a control)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)                       # as the sweep ran
    if a.written_attention:
        written_attention_in_training()
    spec = json.loads(a.variants.read_text())
    variants = {v["name"]: v for v in expand_variants(spec)}
    unknown = [n for n in a.only if n not in variants]
    if unknown:
        p.error(f"not in {a.variants}: {', '.join(unknown)}")
    state = {**code_state(), "attention_in_training": "written out (control)"
             if a.written_attention else "as the code has it"}
    with tempfile.TemporaryDirectory() as tmp:
        runs = a.runs or Path(tmp)
        data = ablation_data(a.data, out_dir=runs)
        for name in a.only:
            cpu, wall = time.process_time(), time.perf_counter()
            result = run_variant(variants[name], data, runs / name, bleu_sentences=None)
            r = {**variants[name], **result, "cpu_s": time.process_time() - cpu,
                 "wall_s": time.perf_counter() - wall, "hardware": hardware(),
                 "torch": torch.__version__, **state,
                 "command": " ".join(["python", *sys.argv]),
                 "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            save(a.out, r)
            print(f"{name}: val NLL {r['val_nll']!r}, BLEU {r['val_bleu']!r}, "
                  f"{r['cpu_s']:.0f} s CPU; commit {state['commit'][:7]}"
                  + (f" + changes to {', '.join(state['uncommitted'])}"
                     if state["uncommitted"] else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
