"""The running costs the book states agree with bench/results/chapter_times.json.

- the introduction's table is what bench/run_all.py writes from the file;
- no time statement in book/intro.md or README.md outside that block contradicts the file;
- the file's downloads section is what run_all.py computes now (which chapters fetch what,
  the sizes measured from the real files);
- the note book/_ext/running_cost.py puts at the top of each page states the file's time,
  the page's install cell's requirement and the file's downloads, and no other number;
  every Part I page has a time to state.
"""
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = json.loads((ROOT / "bench/results/chapter_times.json").read_text(encoding="utf-8"))
GENERATED = [("<!-- chapter-times: begin -->", "<!-- chapter-times: end -->"),
             ("<!-- reading-path: begin -->", "<!-- reading-path: end -->")]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


run_all = _load("run_all", ROOT / "bench/run_all.py")
running_cost = _load("running_cost", ROOT / "book/_ext/running_cost.py")


def _block(text: str, begin: str, end: str) -> str:
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def _outside_blocks(text: str) -> str:
    for begin, end in GENERATED:
        if begin in text:
            head, rest = text.split(begin, 1)
            text = head + rest.split(end, 1)[1]
    return text


def test_intro_table_is_generated_from_the_file():
    intro = (ROOT / "book/intro.md").read_text(encoding="utf-8")
    assert _block(intro, run_all.BEGIN, run_all.END) == run_all.table(RESULTS), \
        "run python bench/run_all.py --table-only"


def test_table_lists_part_one_first_with_its_total():
    rows = run_all.table(RESULTS).splitlines()
    parts = [r for r in rows if r.startswith("| **")]
    assert parts[0].startswith("| **Part I:")
    assert any(r.startswith("| Part I in all |") for r in rows)


@pytest.mark.parametrize("doc", ["book/intro.md", "README.md"])
def test_time_statements_agree_with_the_file(doc):
    """Outside the generated blocks, the only time a document may state about the
    chapters is run_all's limit ("at most N minutes"), and it must be the file's."""
    text = _outside_blocks((ROOT / doc).read_text(encoding="utf-8"))
    flat = re.sub(r"\s+", " ", text)
    assert "takes about" not in flat, f"{doc}: a time stated outside the generated block"
    for m in re.finditer(r"(\S+ \S+) (\d[\d.,]*) (minutes?|mins?)\b", flat):
        assert m.group(1).endswith("at most"), f"{doc}: {m.group(0)!r} is not generated"
        assert float(m.group(2)) == RESULTS["limit_s"] / 60, \
            f"{doc}: {m.group(0)!r}, but the file's limit is {RESULTS['limit_s']} s"
    assert not re.search(r"\bnone takes more than\b", flat)


def test_downloads_section_is_computed_from_the_real_files(multi30k):
    assert RESULTS["downloads"] == run_all.downloads(data_dir=multi30k), \
        "run python bench/run_all.py --table-only"


def test_model_size_is_the_shipped_files():
    model = ROOT / "models/multi30k_en_de"
    listed = json.loads((model / "config.json").read_text())["files"]
    size = sum((model / n).stat().st_size for n in ["config.json", *listed])
    assert RESULTS["downloads"]["items"]["model"]["bytes"] == size


def _notebooks():
    return sorted((ROOT / "nbs").glob("*.ipynb"))


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.stem)
def test_running_cost_note_agrees_with_the_file(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    note = running_cost.note(path.stem, nb, RESULTS)
    run = RESULTS["chapters"].get(path.stem)
    if not run or run["status"] != "ok":
        assert note is None, "a page the file does not time says nothing"
        return
    m = RESULTS["machine"]
    said = [running_cost.duration(run["seconds"]), m["hardware"], m["isa"]]
    spec = running_cost.install_spec(nb)
    assert spec and spec.startswith("annotated_transformer")
    said.append(spec)
    for item in RESULTS["downloads"]["chapters"].get(path.stem, []):
        got = RESULTS["downloads"]["items"][item]
        said += [got["what"], running_cost.megabytes(got["bytes"])]
    for part in said:
        assert part in note, f"{part!r} missing from {note!r}"
    rest = note
    for part in said:
        rest = rest.replace(part, "")
    assert not re.search(r"\d", rest), f"a number in the note that no file gave: {rest!r}"


def test_install_spec_is_the_cells_requirement():
    nb = json.loads((ROOT / "nbs/10_data.ipynb").read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) for c in nb["cells"]]
    cell = next(s for s in sources if s.startswith("#| hide") and "SPEC =" in s)
    assert running_cost.install_spec(nb) in cell
    assert running_cost.install_spec({"cells": []}) is None


def test_every_part_one_page_has_a_time():
    part_one = next(stems for caption, stems in run_all.parts()
                    if caption.startswith("Part I:"))
    missing = [s for s in part_one if s not in RESULTS["chapters"]]
    assert not missing, f"no time for {missing}: run python bench/run_all.py " + \
        " ".join(f"nbs/{s}.ipynb" for s in missing)


def test_note_goes_after_the_title():
    nb = {"cells": [{"cell_type": "markdown", "source": "# 1. Title\n\nIntro.",
                     "metadata": {}},
                    {"cell_type": "code", "source": "x = 1", "metadata": {}, "outputs": []}]}
    stem = next(iter(RESULTS["chapters"]))

    class Env:
        def doc2path(self, docname):
            return f"{docname}.ipynb"

    class App:
        env = Env()

    source = [json.dumps(nb)]
    running_cost.add_running_cost(App(), f"nbs/{stem}", source)
    cells = json.loads(source[0])["cells"]
    assert [c["cell_type"] for c in cells] == ["markdown", "markdown", "code"]
    assert "Running this page" in cells[1]["source"]


def test_extension_is_registered():
    import yaml
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["sphinx"]["local_extensions"].get("running_cost") == "book/_ext"
