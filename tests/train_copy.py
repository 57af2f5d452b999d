"""Train the copy task from the command line; torchrun runs this script once per process.

    python tests/train_copy.py --run-dir runs/copy --steps 300
    torchrun --standalone --nproc_per_node=2 tests/train_copy.py --run-dir runs/copy_ddp
"""
from annotated_transformer.training import training_cli

training_cli()
