"""Shrunk runs (tools/shrunk.py, tools/shrunk.json, the root conftest.py): the sizes of a
shrunk run come from the tooling, after a chapter's `parameters` cell, and no cell a reader
sees speaks of the harness (tools/nbclean.py --check).

- `inject` puts the file's code right after the `parameters` cell, in a copy; a notebook named
  in the file without that cell, or any notebook with two, is an error;
- the file names notebooks that exist, each with one `parameters` cell;
- with AT_QUICK set, nbval in the checkout runs the injected code (a small notebook whose
  stored output is the shrunk value passes, and fails at full size), the notebook on disk
  unchanged; the fresh runtime's command injects into its copy and refuses nbs/;
- nbclean drops nbval's comment lines into cell tags and names harness words in code cells.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo_tools import load_tool

ROOT = Path(__file__).resolve().parents[1]


shrunk = load_tool("shrunk", "tools/shrunk.py")
nbclean = load_tool("nbclean", "tools/nbclean.py")


def _code(source: str, *, tags=(), count=None, outputs=()) -> dict:
    return {"cell_type": "code", "execution_count": count, "id": f"c{abs(hash(source))}",
            "metadata": {"tags": list(tags)} if tags else {}, "outputs": list(outputs),
            "source": source}


def _page(*cells) -> dict:
    return {"cells": list(cells), "metadata": {"kernelspec": nbclean.KERNELSPEC},
            "nbformat": 4, "nbformat_minor": 5}


def test_inject_puts_the_code_after_the_parameters_cell():
    nb = _page(_code("import math"), _code("N = 10  # sizes", tags=["parameters"]),
               _code("print(N)"))
    before = json.dumps(nb)
    got = shrunk.inject(nb, "page", {"page": "N = 2"})
    assert json.dumps(nb) == before, "the notebook given is not changed"
    sources = ["".join(c["source"]) for c in got["cells"]]
    assert sources == ["import math", "N = 10  # sizes", "N = 2",
                       "print(N)"]
    assert "nbval-ignore-output" in got["cells"][2]["metadata"]["tags"]
    assert shrunk.inject(nb, "other", {"page": "N = 2"}) is nb, "no entry: unchanged"


def test_a_missing_or_second_parameters_cell_fails_loudly():
    plain = _page(_code("N = 10"))
    with pytest.raises(shrunk.ShrunkError, match="no code cell tagged 'parameters'"):
        shrunk.inject(plain, "page", {"page": "N = 2"})
    two = _page(_code("N = 10", tags=["parameters"]), _code("M = 3", tags=["parameters"]))
    for table in ({"page": "N = 2"}, {}):          # named in the file or not
        with pytest.raises(shrunk.ShrunkError, match="2 cells tagged 'parameters'"):
            shrunk.inject(two, "page", table)
    found = nbclean.problems("nbs/page.ipynb", two)
    assert any("2 cells tagged" in p for p in found)


def test_the_file_names_notebooks_each_with_one_parameters_cell():
    table = shrunk.table()
    assert table, "tools/shrunk.json is missing or empty"
    assert not shrunk.problems(), shrunk.problems()
    for stem, code in table.items():
        compile(code, f"tools/shrunk.json:{stem}", "exec")   # Python, at least


def test_unknown_names_are_reported(tmp_path):
    (tmp_path / "real.ipynb").write_text(json.dumps(_page(_code("x = 1"))))
    found = shrunk.problems(tmp_path, {"gone": "x = 0"})
    assert found == ["tools/shrunk.json: gone: no notebook nbs/gone.ipynb"]


def _tiny_repo(tmp_path: Path) -> Path:
    "A repository of one notebook: N is 10 at full size, 2 shrunk; its stored output 2."
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "nbs").mkdir()
    shutil.copy(ROOT / "conftest.py", repo / "conftest.py")
    shutil.copy(ROOT / "tools/shrunk.py", repo / "tools/shrunk.py")
    (repo / "tools/shrunk.json").write_text(json.dumps({"tiny": "N = 2"}))
    out = {"name": "stdout", "output_type": "stream", "text": "2\n"}
    nb = _page(_code("N = 10  # the size", tags=["parameters"], count=1),
               _code("print(N)", count=2, outputs=[out]))
    (repo / "nbs/tiny.ipynb").write_text(json.dumps(nb, indent=1))
    return repo


def _nbval(repo: Path, quick: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "AT_QUICK"}
    if quick:
        env["AT_QUICK"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
         "--nbval-current-env", "--rootdir", str(repo), "nbs/tiny.ipynb"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def test_nbval_runs_the_shrunk_sizes_in_memory(tmp_path):
    repo = _tiny_repo(tmp_path)
    before = (repo / "nbs/tiny.ipynb").read_text()
    quick = _nbval(repo, quick=True)
    assert quick.returncode == 0, quick.stdout + quick.stderr
    assert "3 passed" in quick.stdout, quick.stdout      # the inserted cell ran too
    full = _nbval(repo, quick=False)
    assert full.returncode != 0 and "10" in full.stdout, full.stdout
    assert (repo / "nbs/tiny.ipynb").read_text() == before, "never written on disk"


def test_the_fresh_runtimes_command_injects_into_its_copy_only(tmp_path):
    repo = _tiny_repo(tmp_path)
    copy = tmp_path / "run" / "tiny.ipynb"
    copy.parent.mkdir()
    shutil.copy(repo / "nbs/tiny.ipynb", copy)
    script = repo / "tools/shrunk.py"
    p = subprocess.run([sys.executable, str(script), str(copy)], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    cells = json.loads(copy.read_text())["cells"]
    assert ["".join(c["source"]) for c in cells] == ["N = 10  # the size", "N = 2",
                                                      "print(N)"]
    p = subprocess.run([sys.executable, str(script), str(repo / "nbs/tiny.ipynb")],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "a copy, not the notebook in nbs/" in p.stderr


def test_nbclean_turns_nbval_comment_lines_into_tags():
    nb = _page(_code("#| nbval-ignore-output\nx = 1", count=1),
               _code("# NBVAL_SKIP\ny = 2", count=2, tags=["tie:y"]),
               _code("#| export\nz = 3", count=3))
    text = json.dumps(nb)
    cells = nbclean.clean(nb)["cells"]
    assert ["".join(c["source"]) for c in cells] == ["x = 1", "y = 2", "#| export\nz = 3"]
    assert cells[0]["metadata"]["tags"] == ["nbval-ignore-output"]
    assert cells[1]["metadata"]["tags"] == ["tie:y", "nbval-skip"]
    assert [c["execution_count"] for c in cells] == [1, 2, 3]
    again = nbclean.clean(json.loads(nbclean.dump(nbclean.clean(json.loads(text)))))
    assert nbclean.dump(again) == nbclean.dump(nbclean.clean(json.loads(text)))


@pytest.mark.parametrize("line, flagged", [
    ('if os.environ.get("AT_QUICK"):', True),
    ("# Shrunk run: 40 sentences", True),
    ('COPY_DIR = RUNS / "copy_model_quick"', True),
    ("def train(quick: bool = False):", True),
    ("# the CI runs this", True),
    ("# nbval compares this output", True),
    ("# the test command sets it", True),
    ("max_len=32)       # small: quick to compile", False),
    ("n_test = 1000                     # the whole 2016 test set", False),
    ('print("A quick brown dog runs.")', False),
])
def test_nbclean_names_harness_words_in_code(line, flagged):
    assert bool(nbclean.harness_words(line)) == flagged


def test_the_converted_pages_speak_of_no_harness():
    "Converted pages: no code cell names the harness, no `#| nbval` line, one parameters cell."
    for stem in ("09a_quantization", "11b_translator_details", "11d_export", "11e_onnx",
                 "12_why_attention"):
        path = ROOT / "nbs" / f"{stem}.ipynb"
        nb = json.loads(path.read_text(encoding="utf-8"))
        said = [w for c in nb["cells"] if c["cell_type"] == "code"
                for w in nbclean.harness_words("".join(c["source"]))]
        assert not said, (stem, said)
        assert shrunk.parameters_index(nb, stem) is not None, stem
