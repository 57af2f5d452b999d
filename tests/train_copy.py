"""The tests' own driver: train the copy task (chapter 8) in one process or under torchrun.

    python tests/train_copy.py --run-dir RUN --steps 60
    torchrun --standalone --nproc_per_node=2 tests/train_copy.py --run-dir RUN

test_resume.py and test_ddp.py run it; it is not part of the package. A script of the
same shape is shown in chapter 7c, and the package's own command line is
`python -m annotated_transformer train` (part 11h).
"""
import argparse

import torch
import torch.distributed as dist

from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.run.processes import init_distributed
from annotated_transformer.run.trainer import TrainConfig, train
from annotated_transformer.lab.copying import copy_task

VOCAB_SIZE = 16


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train a Transformer on the copy task.")
    p.add_argument("--run-dir", required=True)
    for name, default in [("steps", 300), ("max-tokens", 1024), ("accum-steps", 1),
                          ("warmup", 200), ("log-every", 10), ("eval-every", 100),
                          ("save-every", 100), ("seed", 0), ("d-model", 64),
                          ("d-ff", 256)]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--p-drop", type=float, default=0.1)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    return p.parse_args(argv)


def main(argv=None) -> None:
    a = parse(argv)
    config = TransformerConfig.preset("copy", d_model=a.d_model, d_ff=a.d_ff,
                                      p_drop=a.p_drop)
    settings = TrainConfig(steps=a.steps, max_tokens=a.max_tokens,
                           accum_steps=a.accum_steps, warmup=a.warmup,
                           precision=a.precision, seed=a.seed, log_every=a.log_every,
                           eval_every=a.eval_every, save_every=a.save_every,
                           progress=False)
    device = init_distributed()
    torch.manual_seed(a.seed)
    model = make_model(VOCAB_SIZE, VOCAB_SIZE, config).to(device)
    train(model, copy_task(20_000, VOCAB_SIZE, seed=a.seed + 1), config=settings,
          valid_pairs=copy_task(200, VOCAB_SIZE, seed=a.seed + 2), run_dir=a.run_dir)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
