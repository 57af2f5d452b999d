"""The chapters' install cell (written by tools/nbclean.py): what a reader sees when pip fails.

The cell runs here as a script with two facts changed: the book's version is one no
installed package has (so it must install), and the source is a folder that does not exist (so
pip fails at once, offline). It must show pip's own last lines, then stop with the command to
run, and never go on to the chapter's imports.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def install_cell(chapter: str) -> str:
    cells = json.loads((ROOT / "nbs" / chapter).read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return next(c for c in code if c.startswith("#| hide") and "BOOK_VERSION" in c)


def test_every_chapter_has_the_same_install_cell_but_its_extras():
    cells = {p.name: install_cell(p.name) for p in sorted((ROOT / "nbs").glob("*.ipynb"))}
    assert len(cells) >= 20
    extras = r"annotated_transformer(\[[a-z,]*\])? @"
    shapes = {re.sub(r"NEEDS = \(.*?\)\.split\(\)", "NEEDS = ...",
                     re.sub(extras, "PKG @", c), flags=re.S)
              for c in cells.values()}
    assert len(shapes) == 1, "install cells differ beyond their extras: run make clean-nbs"


def test_a_failed_pip_shows_its_lines_and_stops(tmp_path):
    cell = install_cell("01_attention.ipynb")
    missing = tmp_path / "no_such_folder"
    cell = re.sub(r'BOOK_VERSION = "[^"]+"', 'BOOK_VERSION = "999.0.0"', cell)
    cell = re.sub(r"SPEC = \(.*?\)\n", f'SPEC = "annotated_transformer @ file://{missing}"\n',
                  cell, flags=re.S)
    assert "999.0.0" in cell and str(missing) in cell
    script = tmp_path / "cell.py"
    script.write_text(cell + "\nprint('the chapter went on')\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, env={"PATH": "/usr/bin:/bin", "PIP_NO_INDEX": "1"})
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert "the chapter went on" not in p.stdout
    lines = p.stderr.strip().splitlines()
    assert lines[-1].startswith("pip could not install the book's package")
    assert f"pip install 'annotated_transformer @ file://{missing}'" in lines[-1]
    # pip's own words come first: its error names the missing folder
    assert any(str(missing) in line or "ERROR" in line for line in lines[:-1]), lines


def test_a_missing_extra_module_installs_even_at_the_right_version():
    "A reader with the base package who opens a page needing `data` gets the extra."
    cell = install_cell("10_data.ipynb")
    needs = re.search(r"NEEDS = (\(.*?\)\.split\(\))", cell, re.S).group(1)
    assert "sentencepiece" in needs and "sacrebleu" in needs and "datasets" in needs
    probe = cell.split("if _have is None")[0].replace(
        "import importlib, importlib.metadata", "import importlib, importlib.metadata")
    probe = re.sub(r"NEEDS = \(.*?\)\.split\(\)", 'NEEDS = ["no_such_module_at_all"]',
                   probe, flags=re.S)
    script = probe + "\nprint(_missing)\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.stdout.strip() == "['no_such_module_at_all']", out.stderr


def test_a_code_cell_over_forty_lines_is_reported():
    "tools/nbclean.py --check names a code cell longer than 40 lines (`#|` lines aside)."
    import importlib.util
    spec = importlib.util.spec_from_file_location("nbclean", ROOT / "tools/nbclean.py")
    nbclean = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nbclean)

    def nb(n_lines):
        source = "#| export\n" + "\n".join(f"x{i} = {i}" for i in range(n_lines))
        return {"cells": [{"cell_type": "code", "id": "c1", "execution_count": 1,
                           "source": source, "outputs": []}]}
    assert not nbclean.problems("page.ipynb", nb(40))
    found = nbclean.problems("page.ipynb", nb(41))
    assert len(found) == 1 and "41 lines > 40" in found[0]


def test_the_install_cell_reads_the_pages_imports_not_its_own_list():
    sys.path.insert(0, str(ROOT / "tools"))
    import nbclean
    old = install_cell("01_attention.ipynb").replace('annotated_transformer[viz] @',
                                                     'annotated_transformer[data,viz] @')
    old = re.sub(r"NEEDS = \(.*?\)", 'NEEDS = ("sentencepiece datasets sacrebleu matplotlib")',
                 old)
    assert "sentencepiece" in old                   # what the cell itself lists
    code = lambda text: {"cell_type": "code", "source": text.splitlines(keepends=True)}
    nb = {"cells": [code(old), code("import matplotlib.pyplot as plt")]}
    nbclean._set_install_cell(nb)
    cell = "".join(nb["cells"][0]["source"])
    assert "annotated_transformer[viz] @" in cell and "sentencepiece" not in cell
