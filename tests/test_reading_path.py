"""tools/reading_path.py: what it counts, and the blocks in README.md and book/intro.md
that show its output for the current pages."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("reading_path", ROOT / "tools/reading_path.py")
rp = importlib.util.module_from_spec(spec)
sys.modules["reading_path"] = rp
spec.loader.exec_module(rp)


@pytest.fixture(scope="module")
def measured():
    return rp.measure()


@pytest.mark.parametrize("doc", rp.DOCS, ids=lambda d: d.name)
def test_block_is_the_scripts_output(doc, measured):
    text = doc.read_text(encoding="utf-8")
    assert rp.BEGIN in text and rp.END in text
    block = text.split(rp.BEGIN, 1)[1].split(rp.END, 1)[0].strip("\n")
    assert block == rp.table(measured), "run python tools/reading_path.py --write"


def test_results_file_is_the_scripts_output(measured):
    assert json.loads(rp.OUT.read_text(encoding="utf-8")) == measured, \
        "run python tools/reading_path.py --write"


def test_pages_are_part_one_in_order():
    import yaml
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    assert toc["parts"][0]["caption"].startswith("Part I:")
    listed = [c["file"] for c in toc["parts"][0]["chapters"]
              if (ROOT / f"{c['file']}.ipynb").exists()]
    pages = rp.part_one()
    assert pages[-len(listed):] == listed
    if (ROOT / "nbs/00_start.ipynb").exists():
        assert pages[0] == "nbs/00_start"


def test_prose_words():
    md = ("# 2. A title\n\nThe map $f(x)$ uses `attention` ([chapter 1](../nbs/01_attention))."
          "\n\n$$\nQ K^T\n$$\n\n```python\nx = 1\n```\n<!-- note -->\n| a | b |\n|---|---|")
    # "2." "A" "title" "The" "map" MATH "uses" CODE "([chapter" "1])." "a" "b"
    assert rp.prose_words(md) == 12


def test_shown_code_lines():
    def cell(src, tags=()):
        return {"cell_type": "code", "source": src, "metadata": {"tags": list(tags)}}
    assert rp.shown_code_lines(cell("#| export\ndef f():\n\n    return 1\n")) == (2, False)
    assert rp.shown_code_lines(cell("#| hide\nimport os")) is None
    assert rp.shown_code_lines(cell("x = 1", ["remove-cell"])) is None
    assert rp.shown_code_lines(cell("x = 1", ["remove-input"])) is None
    assert rp.shown_code_lines(cell("x = 1\ny = 2", ["hide-input"])) == (2, True)


def test_totals_add_up(measured):
    for key in ("words", "code_lines", "folded_code_lines"):
        assert measured["total"][key] == sum(p[key] for p in measured["pages"].values())


def test_intro_first_screen_links_the_on_ramp_and_try_it():
    intro = (ROOT / "book/intro.md").read_text(encoding="utf-8")
    first_screen = "\n\n".join(intro.split("\n\n")[:3])   # the title and two paragraphs
    assert "[Start here](../nbs/00_start.ipynb)" in first_screen
    assert "[Try it](try.md)" in first_screen


def test_running_cost_note_is_not_counted(tmp_path):
    "The note on what running a page costs is left out; the same words elsewhere count."
    note = {"cell_type": "markdown", "metadata": {"tags": ["running-cost"]},
            "source": ["**Running this page** takes about 10 seconds."]}
    prose = {"cell_type": "markdown", "metadata": {}, "source": ["Attention is a weighted sum."]}
    path = tmp_path / "p.ipynb"
    path.write_text(json.dumps({"cells": [note, prose]}), encoding="utf-8")
    assert rp.page(path)["words"] == 5
    path.write_text(json.dumps({"cells": [dict(note, metadata={}), prose]}), encoding="utf-8")
    assert rp.page(path)["words"] == 5 + 7
