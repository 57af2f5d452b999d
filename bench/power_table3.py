"""How many seeds chapter 14's Table 3 needs: a power analysis from the seeds already run.

Each row of the miniature Table 3 is compared with the base row by the paired difference
of validation NLL (row − base, one difference per seed). This script measures how much
those differences vary from seed to seed (the standard deviation pooled over the rows,
from the runs at 1,600 updates in bench/results/table3_paired.json) and, for the smallest
effects worth detecting, finds the seeds a two-sided paired t test needs to find them
with 80% power when its p value must pass Holm's first and strictest step over all rows
(0.05 / rows). Power comes from simulation: the t statistic of `seeds` normal differences
with that mean and spread, 200,000 times. The result goes to
bench/results/table3_power.json, written before the runs it sized (bench/table3_seeds.json):

    python bench/power_table3.py
"""
import argparse
import json
import math
import subprocess
import time
from pathlib import Path

import torch

from annotated_transformer.lab.ablations import t_quantile

ROWS = ["A_h1", "A_h16", "B_dk8", "C_N1", "C_N3", "C_d64", "D_pdrop0", "D_pdrop0.2",
        "D_ls0", "E_learned", "gelu"]          # chapter 14's PAPER rows, base left out


def pooled_sd(runs: dict, steps: int) -> tuple[float, int]:
    "Pooled sd of the paired NLL differences row − base over ROWS, and its df."
    base = {r["train"]["seed"]: r["val_nll"] for r in runs.values()
            if r["name"].startswith("base_s") and r["steps"] == steps}
    ss, df = 0.0, 0
    for row in ROWS:
        d = torch.tensor([r["val_nll"] - base[r["train"]["seed"]] for r in runs.values()
                          if r["name"].rsplit("_s", 1)[0] == row and r["steps"] == steps
                          and r["train"]["seed"] in base], dtype=torch.float64)
        if len(d) >= 2:
            ss, df = ss + float(((d - d.mean()) ** 2).sum()), df + len(d) - 1
    return math.sqrt(ss / df), df


def power(effect: float, sd: float, seeds: int, alpha: float, sims: int = 200_000,
          seed: int = 0) -> float:
    "Chance that a two-sided paired t test at `alpha` finds a true mean `effect`."
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(sims, generator=gen, dtype=torch.float64) + effect / sd * seeds ** 0.5
    chi = torch.randn(sims, seeds - 1, generator=gen, dtype=torch.float64).pow(2).sum(1)
    t = z / (chi / (seeds - 1)).sqrt()
    return float((t.abs() > t_quantile(1 - alpha / 2, seeds - 1)).double().mean())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path,
                   default=Path("bench/results/table3_paired.json"))
    p.add_argument("--out", type=Path, default=Path("bench/results/table3_power.json"))
    p.add_argument("--steps", type=int, default=1600)
    p.add_argument("--effects", type=float, nargs="+", default=[0.05, 0.1],
                   help="smallest differences worth detecting, in nats of NLL")
    a = p.parse_args(argv)
    runs = {r["name"]: r for r in json.loads(a.results.read_text())["runs"]}
    sd, df = pooled_sd(runs, a.steps)
    alpha = 0.05 / len(ROWS)
    table = {str(e): {n: power(e, sd, n, alpha) for n in range(3, 41)}
             for e in a.effects}
    needed = {e: next((n for n, pw in t.items() if pw >= 0.8), None)
              for e, t in table.items()}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out = {"about": __doc__.split("\n\n")[0], "steps": a.steps, "rows": ROWS,
           "pooled_sd": sd, "df": df, "alpha": alpha, "power": table,
           "seeds_for_80": needed, "commit": commit,
           "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"pooled sd of paired differences: {sd:.4f} nat ({df} df); "
          f"alpha per test {alpha:.4f}")
    for e, n in needed.items():
        print(f"effect {e} nat: 80% power at {n} seeds; "
              + ", ".join(f"{k}: {table[e][k]:.2f}" for k in (3, 5, 8, 10, 12, 16)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
