"""The running costs the book states agree with bench/results/chapter_times.json.

- the introduction's table is what bench/run_all.py writes from the file;
- no time statement in book/intro.md or README.md outside that block contradicts the file;
- the file's downloads section is what run_all.py computes now (which chapters fetch what,
  the sizes measured from the real files);
- the file's trains section is what run_all.py computes now (which chapters train chapter
  8's copy model first where none is found, and that training's time);
- the running-cost cell tools/nbclean.py writes at the top of each notebook (after the
  title cell, tagged `running-cost`) states the file's time, the page's install cell's
  requirement, the file's downloads and what the page trains first, and no other number; each
  notebook holds the cell as the file has it now, and the site adds nothing of its own;
  every Part I page has a time to state.
"""
import json
import re
from pathlib import Path

import pytest

from repo_tools import load_tool

ROOT = Path(__file__).resolve().parents[1]
RESULTS = json.loads((ROOT / "bench/results/chapter_times.json").read_text(encoding="utf-8"))
GENERATED = [("<!-- chapter-times: begin -->", "<!-- chapter-times: end -->"),
             ("<!-- reading-path: begin -->", "<!-- reading-path: end -->")]


run_all = load_tool("run_all", "bench/run_all.py")
nbclean = load_tool("nbclean", "tools/nbclean.py")


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


def test_trains_section_is_computed_from_the_notebooks_and_the_run():
    now = run_all.trains(RESULTS.get("trains"))
    assert RESULTS.get("trains") == now, "run python bench/run_all.py --table-only"
    assert {"09_decoding", "09a_quantization"} <= set(now["chapters"]), now["chapters"]
    assert "08_copy" not in now["chapters"], "chapter 8 trains it on purpose, timed as such"


def test_training_seconds_is_the_runs_own_clock(tmp_path):
    import torch
    saved, metrics = tmp_path / "copy_16_1200.pt", tmp_path / "metrics.jsonl"
    assert run_all._training_seconds(saved) is None
    torch.save({"weights": {}, "history": [{"step": 50, "seconds": 4.0},
                                           {"step": 1200, "seconds": 65.04}]}, saved)
    assert run_all._training_seconds(saved) == 65.0
    metrics.write_text('{"step": 25, "elapsed": 3.0}\n{"step": 50, "elapsed": 61.24}\n'
                       '{"step": 50, "eval_loss": 0.6}\n')
    assert run_all._training_seconds(metrics) == 61.2
    got = run_all.trains(runs=(tmp_path / "none.pt", saved, metrics))["items"]["copy_model"]
    assert got["seconds"] == 65.0 and str(saved) in got["measured"]
    kept = {"items": {"copy_model": {"seconds": 42.0, "measured": "earlier"}}}
    got = run_all.trains(kept, runs=(tmp_path / "none.pt",))["items"]["copy_model"]
    assert (got["seconds"], got["measured"]) == (42.0, "earlier")


def _running_cost_cells(nb: dict) -> list:
    return [c for c in nb["cells"] if nbclean.RUNNING_COST in c["metadata"].get("tags", [])]


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.stem)
def test_running_cost_note_agrees_with_the_file(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    note = nbclean.running_cost(path.stem, nb, RESULTS)
    run = RESULTS["chapters"].get(path.stem)
    if not run or run["status"] != "ok":
        assert note is None, "a page the file does not time says nothing"
        return
    m = RESULTS["machine"]
    said = [nbclean.duration(run["seconds"]), m["hardware"], m["isa"]]
    spec = nbclean.install_spec(nb)
    assert spec and spec.startswith("annotated_transformer")
    said.append(spec)
    for item in RESULTS["downloads"]["chapters"].get(path.stem, []):
        got = RESULTS["downloads"]["items"][item]
        said += [got["what"], nbclean.megabytes(got["bytes"])]
    for item in RESULTS.get("trains", {}).get("chapters", {}).get(path.stem, []):
        got = RESULTS["trains"]["items"][item]
        said += [got["what"], nbclean.duration(got["seconds"])]
    for part in said:
        assert part in note, f"{part!r} missing from {note!r}"
    rest = note.replace(nbclean.BEGIN, "").replace(nbclean.END, "")
    for part in said:
        rest = rest.replace(part, "")
    assert not re.search(r"\d", rest), f"a number in the note that no file gave: {rest!r}"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.stem)
def test_each_notebook_states_its_running_cost_at_its_top(path):
    "The notebook itself holds the note (Colab shows it), right after its title cell."
    nb = json.loads(path.read_text(encoding="utf-8"))
    note = nbclean.running_cost(path.stem, nb, RESULTS)
    cells = _running_cost_cells(nb)
    if note is None:
        assert not cells
        return
    assert len(cells) == 1, "run python tools/nbclean.py " + str(path.relative_to(ROOT))
    at = nb["cells"].index(cells[0])
    assert at == nbclean._title_index(nb["cells"]) + 1
    assert "".join(cells[0]["source"]) == note, \
        "run python tools/nbclean.py " + str(path.relative_to(ROOT))


def test_copy_model_training_is_stated_where_a_chapter_trains_it_first():
    results = dict(RESULTS, trains={"items": {"copy_model": {
        "what": "chapter 8's copy model", "seconds": 65.0}},
        "chapters": {"09_decoding": ["copy_model"]}})
    nb = json.loads((ROOT / "nbs/09_decoding.ipynb").read_text(encoding="utf-8"))
    note = nbclean.running_cost("09_decoding", nb, results)
    assert "chapter 8's copy model" in note and "about 65 seconds more" in note


def test_install_spec_is_the_cells_requirement():
    nb = json.loads((ROOT / "nbs/10_data.ipynb").read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) for c in nb["cells"]]
    cell = next(s for s in sources if s.startswith("#| hide") and "SPEC =" in s)
    assert nbclean.install_spec(nb) in cell
    assert nbclean.install_spec({"cells": []}) is None


def test_every_part_one_page_has_a_time():
    part_one = next(stems for caption, stems in run_all.parts()
                    if caption.startswith("Part I:"))
    missing = [s for s in part_one if s not in RESULTS["chapters"]]
    assert not missing, f"no time for {missing}: run python bench/run_all.py " + \
        " ".join(f"nbs/{s}.ipynb" for s in missing)


def _page(*cells) -> dict:
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _md(text, **kw):
    return {"cell_type": "markdown", "id": kw.get("id", "m"), "metadata": kw.get("meta", {}),
            "source": text}


def _code(text, count, id="c"):
    return {"cell_type": "code", "id": id, "execution_count": count, "metadata": {},
            "outputs": [], "source": text}


def test_note_goes_after_the_title_and_cleaning_again_changes_nothing():
    stem = next(s for s, r in RESULTS["chapters"].items() if r["status"] == "ok")
    nb = _page(_md("# 1. Title\n\nIntro.", id="t"), _code("x = 1", 1))
    once = nbclean.dump(nbclean.clean(json.loads(json.dumps(nb)), stem, RESULTS))
    cells = json.loads(once)["cells"]
    assert [c["cell_type"] for c in cells] == ["markdown", "markdown", "code"]
    assert "Running this page" in "".join(cells[1]["source"])
    assert cells[1]["metadata"]["tags"] == [nbclean.RUNNING_COST]
    assert cells[2]["execution_count"] == 1, "the code cells keep their counts"
    assert nbclean.dump(nbclean.clean(json.loads(once), stem, RESULTS)) == once
    # a note in the wrong place, or stale, is moved and rewritten; an untimed page loses it
    moved = json.loads(once)
    moved["cells"] = [moved["cells"][0], moved["cells"][2], moved["cells"][1]]
    moved["cells"][2]["source"] = "stale"
    assert nbclean.dump(nbclean.clean(moved, stem, RESULTS)) == once
    gone = json.loads(nbclean.dump(nbclean.clean(json.loads(once), "no_such_page", RESULTS)))
    assert [c["cell_type"] for c in gone["cells"]] == ["markdown", "code"]


def test_the_site_adds_no_running_cost_of_its_own():
    "One home: the note is in the notebooks, not added by a Sphinx extension."
    import yaml
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert "running_cost" not in config["sphinx"]["local_extensions"]
    assert not (ROOT / "book/_ext/running_cost.py").exists()


def test_a_run_keeps_the_records_another_wrote_meanwhile():
    """Two runs of named chapters at once: each save merges its chapters into the file as it
    is then, so neither loses the other's; a run of every chapter replaces them all."""
    now = {"commit": "a", "limit_s": 3000.0,
           "chapters": {"08_copy": {"seconds": 50.0}, "11g_cli": {"seconds": 20.0}}}
    mine = {"commit": "b", "machine": {}, "limit_s": 3000.0,
            "chapters": {"13_inside": {"seconds": 800.0}}}
    kept = run_all.merged(now, mine, gpu=False, named=True)
    assert list(kept["chapters"]) == ["08_copy", "11g_cli", "13_inside"]
    assert kept["commit"] == "b"
    assert list(run_all.merged(now, mine, gpu=False, named=False)["chapters"]) == ["13_inside"]
    on_gpu = run_all.merged({**now, "gpu": {"chapters": {"01_attention": {}}}}, mine,
                            gpu=True, named=True)
    assert on_gpu["chapters"] == now["chapters"]                  # CPU records untouched
    assert list(on_gpu["gpu"]["chapters"]) == ["01_attention", "13_inside"]
