"""`annotated-transformer train` under torchrun gives the model of one process with the same
global batch, and a run started under torchrun resumes under torchrun.

Two CPU processes on gloo (`torchrun --standalone --nproc_per_node=2 -m annotated_transformer
train`) with one micro-batch each per update, against one process with two accumulated
micro-batches per update: the same micro-batches, so the same update (part 7c's `train`
gives rank r the r-th micro-batches of every update). Dropout is off everywhere, since each
process would draw its own masks. Both runs share one tokenizer: the single process trains
it, and it is copied into the other run's directory, which `train_translation` then reuses.
The runs may differ only by the order of floating-point additions, so the final checkpoints
must agree within an absolute 1e-5. Then the torchrun run is extended by one more stretch of
steps under torchrun. About 30 s: three runs, each with two torch start-ups at most.

With CUDA the processes would use NCCL, one GPU each, so the test needs two visible GPUs and
is skipped with one; without CUDA it always runs on the CPU (gloo).
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

STEPS, MORE = 6, 9
TINY = {
    "model": {"n_layers": 1, "d_model": 32, "d_ff": 64, "n_heads": 2, "p_drop": 0.0,
              "p_attn_drop": 0.0, "p_ff_drop": 0.0, "max_len": 128},
    "train": {"steps": STEPS, "max_tokens": 512, "warmup": 5, "lr_factor": 1.0,
              "precision": "fp32", "log_every": 1, "eval_every": 3, "save_every": 3,
              "keep_last": 5},
    "vocab_size": 300, "bleu_every": 3, "bleu_sentences": 4, "average": [1],
    "select_sentences": 4, "train_pairs": 2000}
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
       "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node=2", "-m", "annotated_transformer"]
pytestmark = pytest.mark.skipif(GPUS == 1, reason="CUDA is available but only 1 GPU is "
                                "visible: the two-process NCCL run needs 2")


def train(launcher: list, data: Path, model_dir: Path, accum_steps: int, *extra: str) -> None:
    config = model_dir.parent / f"{model_dir.name}.json"
    config.write_text(json.dumps({**TINY, "train": {**TINY["train"],
                                                    "accum_steps": accum_steps}}))
    out = subprocess.run([*launcher, "train", "--model-dir", str(model_dir), "--data",
                          str(data), "--config", str(config), "--quiet", *extra],
                         env=ENV, timeout=180, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def weights(model_dir: Path, step: int) -> dict:
    return load_file(model_dir / f"checkpoints/step_{step:08d}/model.safetensors")


def losses(model_dir: Path) -> list[float]:
    lines = (model_dir / "checkpoints/metrics.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if "loss" in r]


def test_torchrun_matches_one_process_and_resumes(multi30k, tmp_path):
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    train([sys.executable, "-m", "annotated_transformer"], multi30k, single, 2)
    ddp.mkdir()
    shutil.copy(single / "tokenizer.model", ddp / "tokenizer.model")
    train(TORCHRUN, multi30k, ddp, 1)

    w_one, w_ddp = weights(single, STEPS), weights(ddp, STEPS)
    assert w_one.keys() == w_ddp.keys()
    worst = max((w_ddp[k] - w_one[k]).abs().max().item() for k in w_one)
    print(f"largest weight difference after {STEPS} updates: {worst:.2e}")
    for k in w_one:
        torch.testing.assert_close(w_ddp[k], w_one[k], rtol=0, atol=1e-5, msg=k)
    # rank 0 alone logged: one loss per update, the same as the single process's
    assert len(losses(ddp)) == len(losses(single)) == STEPS
    torch.testing.assert_close(torch.tensor(losses(ddp)), torch.tensor(losses(single)),
                               rtol=1e-5, atol=0)
    assert losses(single)[-1] < losses(single)[0]       # it trained
    assert json.loads((ddp / "config.json").read_text())["notes"]["steps"] == STEPS

    train(TORCHRUN, multi30k, ddp, 1, "--steps", str(MORE))       # one more stretch: resumes
    notes = json.loads((ddp / "config.json").read_text())["notes"]
    assert notes["steps"] == MORE and notes["hardware"].startswith("2 × ")
    assert len(losses(ddp)) == MORE
    assert (ddp / f"checkpoints/step_{MORE:08d}").is_dir()
