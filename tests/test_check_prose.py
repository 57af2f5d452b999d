"""tools/check_prose.py: the book's prose states only numbers its pages computed, and never
narrates how the book was made. Planted cases prove the check fails where it should."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import check_prose  # noqa: E402


def page(tmp_path, markdown, output="1200 steps in 18.8 min\n", tags=("tie:run",),
         code="print(steps, minutes)"):
    nb = {"cells": [
        {"cell_type": "code", "id": "a", "metadata": {"tags": list(tags)}, "source": code,
         "execution_count": 1,
         "outputs": [{"output_type": "stream", "name": "stdout", "text": output}]},
        {"cell_type": "markdown", "id": "b", "metadata": {}, "source": markdown}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "page.ipynb"
    path.write_text(json.dumps(nb))
    return path


def problems(path):
    return check_prose.check_page(path, check_prose.allow_phrases())


def test_tied_number_passes(tmp_path):
    assert problems(page(tmp_path, "It took 18.8<!--tie:run--> minutes for "
                                   "1,200<!--tie:run--> steps.")) == []


def test_planted_bare_number_fails(tmp_path):
    found = problems(page(tmp_path, "It took 18.8 minutes."))
    assert len(found) == 1 and "18.8: bare number" in found[0]


def test_planted_mismatch_fails(tmp_path):
    found = problems(page(tmp_path, "It took about a minute: 1.3<!--tie:run--> min."))
    assert len(found) == 1 and "not in the output of tie:run" in found[0]
    assert "18.8" in found[0]                     # says what the cell prints


def test_tie_to_a_missing_cell_fails(tmp_path):
    found = problems(page(tmp_path, "18.8<!--tie:other--> minutes", tags=()))
    assert len(found) == 1 and "no code cell is tagged tie:other" in found[0]


@pytest.mark.parametrize("text", [
    "Eq. 1 and §3.2.1, Table 3 and Figure 11.5, chapters 12–14 and part 7c.",
    "The paper (Vaswani et al., 2017) reports 27.3 BLEU on newstest2014.",
    "Inside math $d_{model} = 512$ and code `steps=1200`, bf16 and AVX-512 and fp32.",
    "# 7c. The training loop\n\n1. first item\n2. second item",
    "mean 0 and variance 1; see [7b. Checkpoints](07b_checkpoints.ipynb).",
])
def test_references_math_code_years_and_allowlist_pass(tmp_path, text):
    assert problems(page(tmp_path, text)) == []


@pytest.mark.parametrize("text, what", [
    ("The tests run it in quick mode.", "quick mode"),
    ("We were lent a machine with a GPU.", "a lent machine"),
    ("It slowed while this chapter was written.", "the writing of the book"),
    ("In CI the chapter runs on fewer sentences.", "CI"),
])
def test_planted_harness_words_fail(tmp_path, text, what):
    assert any(f"narrates {what}" in p for p in problems(page(tmp_path, text)))


def test_statistics_and_data_words_pass(tmp_path):
    text = "A paired t-test and a rank test on the test set; the test sentences."
    assert problems(page(tmp_path, text)) == []


def test_harness_words_in_code_comments_fail(tmp_path):
    path = page(tmp_path, "No numbers.", code="x = 1  # shorter in the book's test runs")
    assert any("code comment" in p and "the tests" in p for p in problems(path))


def test_allowlist_entries_have_sources():
    lines = [l for l in check_prose.ALLOWLIST.read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    assert len(lines) < 60
    assert all(" | " in l and l.split(" | ", 1)[1].strip() for l in lines)


def test_every_page_of_the_book_passes():
    found = []
    for p in check_prose.pages():
        found += check_prose.check_page(p, check_prose.allow_phrases())
    assert found == [], "\n".join(found[:40])


def test_pending_pages_exist_and_are_few():
    "The pending list names real pages, and only a few: it only shrinks."
    pending = check_prose.pending()
    assert all(p.exists() for p in pending) and len(pending) <= 2
