"""Distributed data parallel gives the update of one process with the same global batch.

`torchrun --nproc_per_node=2` runs tests/train_copy.py, which trains the copy task
(chapter 7c) on the CPU with the gloo backend, one micro-batch per process per update. One
process trains the same model on the same data with two accumulated micro-batches per
update: the same two micro-batches, so the same global batch. Dropout is off (each process would draw its own masks).

The runs may differ only by the order of floating-point additions (gloo adds the two
processes' gradients; the single process accumulates them), so we allow an absolute 1e-5 on
the weights after STEPS Adam updates and 1e-5 relative on the logged losses. On our CPU the
two runs agree exactly (difference 0.0): a + b is commutative, and the scalings by the world
size are powers of two. Takes about 10 s (two torch start-ups and a process group).

Where CUDA is available the processes use NCCL, one GPU each (rank 1 takes cuda:1), so the test
needs two visible GPUs and is skipped with fewer; without CUDA it always runs on the CPU (gloo).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from annotated_transformer.run.checkpoints import checkpoint_dir

SCRIPT = Path(__file__).with_name("train_copy.py")
STEPS = 8
WEIGHTS_ATOL = 1e-5
ARGS = ["--steps", str(STEPS), "--save-every", str(STEPS), "--log-every", "1",
        "--eval-every", str(STEPS), "--max-tokens", "512", "--d-model", "32",
        "--d-ff", "64", "--p-drop", "0", "--seed", "0"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def run(cmd):
    out = subprocess.run(cmd, env=ENV, timeout=120, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def results(run_dir):
    weights = load_file(checkpoint_dir(run_dir, STEPS) / "model.safetensors")
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return weights, [r["loss"] for r in map(json.loads, lines) if "loss" in r]


@pytest.mark.skipif(GPUS == 1, reason="CUDA is available but only 1 GPU is visible: the "
                    "two-process NCCL run needs 2 (rank 1 uses cuda:1); without CUDA the "
                    "test runs on the CPU with gloo")
def test_ddp_two_processes_match_one_process_with_accumulation(tmp_path):
    run([sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc_per_node=2", str(SCRIPT), "--run-dir", str(tmp_path / "ddp"),
         "--accum-steps", "1", *ARGS])
    run([sys.executable, str(SCRIPT), "--run-dir", str(tmp_path / "single"),
         "--accum-steps", "2", *ARGS])
    w_ddp, l_ddp = results(tmp_path / "ddp")
    w_one, l_one = results(tmp_path / "single")
    assert w_ddp.keys() == w_one.keys()
    worst = max((w_ddp[k] - w_one[k]).abs().max().item() for k in w_ddp)
    print(f"largest weight difference after {STEPS} updates: {worst:.2e}")
    for k in w_ddp:
        torch.testing.assert_close(w_ddp[k], w_one[k], rtol=0, atol=WEIGHTS_ATOL, msg=k)
    assert len(l_ddp) == len(l_one) == STEPS
    torch.testing.assert_close(torch.tensor(l_ddp), torch.tensor(l_one), rtol=1e-5,
                               atol=0)
    assert l_one[-1] < l_one[0]          # it trained: not two untouched models compared
