"""Execute every notebook's code cells top to bottom, one fresh process per notebook.

Like `pytest --nbval-lax` (every cell runs, every assertion holds, stored outputs are not
compared) for a machine without Jupyter, such as a GPU machine with only PyTorch:
cells tagged `nbval-skip` and shell or magic lines (`!`, `%`) are skipped.

    AT_QUICK=1 python bench/run_notebooks.py            # from the repository root

With AT_QUICK set, each chapter runs shrunk: the code tools/shrunk.json gives it runs right
after its cell tagged `parameters` (tools/shrunk.py); the file in nbs/ is not changed.
"""
import glob
import json
import os
import subprocess
import sys
import time


def run_one(path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    nb = json.load(open(path, encoding="utf-8"))
    if os.environ.get("AT_QUICK"):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "tools"))
        from shrunk import inject
        nb = inject(nb, os.path.splitext(os.path.basename(path))[0])
    cells = nb["cells"]
    namespace = {"__name__": "__main__"}
    os.chdir(os.path.dirname(os.path.abspath(path)))        # notebooks run in nbs/
    for i, cell in enumerate(cells):
        if (cell["cell_type"] != "code"
                or "nbval-skip" in cell.get("metadata", {}).get("tags", [])):
            continue
        source = "".join(cell["source"])
        if source.lstrip().startswith(("!", "%")):
            continue
        source = "\n".join(line for line in source.splitlines()
                           if not line.lstrip().startswith("#|"))
        try:
            exec(compile(source, f"{path}#cell{i}", "exec"), namespace)
        except Exception as e:
            print(f"CELL {i} FAILED: {type(e).__name__}: {e}")
            raise
    import torch
    if torch.cuda.is_available():
        print(f"cuda peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")


if __name__ == "__main__":
    if len(sys.argv) == 2:
        run_one(sys.argv[1])
        sys.exit(0)
    failed = 0
    for path in sorted(glob.glob("nbs/*.ipynb")):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, path], capture_output=True,
                           text=True)
        failed += p.returncode != 0
        tail = " / ".join((p.stdout + p.stderr).strip().splitlines()[-3:])[-400:]
        print(f"{path}: {'ok' if p.returncode == 0 else 'FAILED'} in "
              f"{time.perf_counter() - t0:.0f} s | {tail}", flush=True)
    sys.exit(1 if failed else 0)
