"""A training run killed with SIGKILL and resumed ends exactly where an unbroken run ends.

Both runs train the copy task (chapter 7c) with tests/train_copy.py in a subprocess on the
CPU with the same seed.
One runs to the end; the other is killed mid-way (after a checkpoint, before the next)
with SIGKILL, which leaves it no chance to clean up, and is then started again with the
same command: it resumes from its latest checkpoint. The final weights, optimizer state,
RNG states and logged losses must be identical, bit for bit. Takes about 15 s.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from annotated_transformer.run.checkpoints import (checkpoint_dir, checkpoint_step,
                                               list_checkpoints)

SCRIPT = Path(__file__).with_name("train_copy.py")
STEPS, SAVE_EVERY, KILL_AFTER = 60, 10, 25
ARGS = ["--steps", str(STEPS), "--save-every", str(SAVE_EVERY), "--log-every", "1",
        "--eval-every", "20", "--max-tokens", "1024", "--d-model", "64", "--seed", "3"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def command(run_dir):
    return [sys.executable, str(SCRIPT), "--run-dir", str(run_dir), *ARGS]


def run_to_end(run_dir):
    subprocess.run(command(run_dir), check=True, env=ENV, timeout=120,
                   capture_output=True)


def last_logged_step(run_dir):
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return max((json.loads(x)["step"] for x in lines if x.endswith("}")), default=0)


def final_state(run_dir):
    ckpt = checkpoint_dir(run_dir, STEPS)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    losses = [r["loss"] for r in map(json.loads, lines) if "loss" in r]
    return (load_file(ckpt / "model.safetensors"),
            load_file(ckpt / "trainer.safetensors"), losses)


def test_sigkill_then_resume_matches_unbroken_run(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    run_to_end(whole)

    proc = subprocess.Popen(command(killed), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while last_logged_step(killed) < KILL_AFTER:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "the run did not reach the kill point"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = [checkpoint_step(p) for p in list_checkpoints(killed)]
    assert done and STEPS not in done, done                   # killed before the end
    assert last_logged_step(killed) > done[-1]                # and after a checkpoint

    run_to_end(killed)                                        # resumes
    (w1, t1, l1), (w2, t2, l2) = final_state(whole), final_state(killed)
    assert w1.keys() == w2.keys() and t1.keys() == t2.keys()
    for name in w1:
        assert torch.equal(w1[name], w2[name]), name
    for name in t1:                    # Adam moments, step counts, RNG states
        assert torch.equal(t1[name], t2[name]), name
    assert l1 == l2 and len(l1) == STEPS
