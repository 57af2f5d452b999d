"""Say at the top of each chapter what running it costs, from measurements, never typed.

Connected to Sphinx's ``source-read`` event (before ``hide_tooling`` removes the install
cell): right after the markdown cell that holds a notebook's title it inserts a short note:
- the time, from bench/results/chapter_times.json (written by ``bench/run_all.py``): the
  CPU it was measured on, and a GPU's time where the file has one for the chapter;
- what the page installs: the extras its install cell names (the ``#| hide`` cell whose
  ``SPEC`` names ``annotated_transformer[...]``, written by tools/nbclean.py);
- what it downloads where nothing is local, with the sizes, from the same file's
  ``downloads`` section.
A page the file does not time gets no note.
"""
import hashlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench/results/chapter_times.json"


def load_results(path=RESULTS) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8")) if Path(path).exists() else {}


def install_spec(nb: dict) -> str | None:
    "The requirement the page's install cell installs: `annotated_transformer[...]`."
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "code" and text.startswith("#| hide") and "SPEC =" in text:
            m = re.search(r'SPEC = \(?\s*"(annotated_transformer(\[[^\]]*\])?)',
                          text)
            return m.group(1) if m else None
    return None


def duration(seconds: float) -> str:
    "About how long: seconds under a minute and a half, else minutes."
    if seconds < 90:
        return f"{max(5, 5 * round(seconds / 5)):.0f} seconds"
    return f"{seconds / 60:.1f} minutes" if seconds < 600 else f"{seconds / 60:.0f} minutes"


def megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def note(stem: str, nb: dict, results: dict) -> str | None:
    "The note for the chapter `stem`, or None where the file has no time for it."
    run = results.get("chapters", {}).get(stem)
    if not run or run.get("status") != "ok":
        return None
    m = results["machine"]
    said = f"About {duration(run['seconds'])} on {m['hardware']} ({m['isa']})"
    gpu = results.get("gpu", {})
    if gpu.get("chapters", {}).get(stem, {}).get("status") == "ok":
        said += (f"; about {duration(gpu['chapters'][stem]['seconds'])} on "
                 f"{gpu['machine']['gpu'] or gpu['machine']['hardware']}")
    said += "."
    spec = install_spec(nb)
    if spec:
        said += f" Its first cell installs `{spec}` where the package is missing."
    items = results.get("downloads", {}).get("items", {})
    fetched = [items[k] for k in results.get("downloads", {}).get("chapters", {}).get(stem, [])
               if items.get(k, {}).get("bytes")]
    if fetched:
        said += (" Without local copies it downloads "
                 + " and ".join(f"{i['what']} ({megabytes(i['bytes'])})" for i in fetched)
                 + ".")
    return f"```{{admonition}} Running this page\n:class: note running-cost\n{said}\n```"


def _title_index(cells: list) -> int | None:
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and re.search(r"^# ", "".join(cell["source"]), re.M):
            return i
    return None


def add_running_cost(app, docname, source):
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    nb = json.loads(source[0])
    text = note(Path(docname).name, nb, load_results())
    at = _title_index(nb["cells"])
    if text is None or at is None:
        return
    cell = {"cell_type": "markdown", "id": "running-cost", "metadata": {},
            "source": text}
    nb["cells"].insert(at + 1, cell)
    source[0] = json.dumps(nb)


def _digest() -> str:
    return hashlib.sha256(RESULTS.read_bytes()).hexdigest() if RESULTS.exists() else ""


def outdated_when_results_change(app, env, added, changed, removed):
    "Re-read every notebook when the results file changed since the last build."
    digest, seen = _digest(), getattr(env, "running_cost_digest", None)
    env.running_cost_digest = digest
    if seen is None or seen == digest:
        return []
    return [d for d in env.found_docs if str(env.doc2path(d)).endswith(".ipynb")]


def setup(app):
    # before hide_tooling (priority 500), which removes the install cell this reads
    app.connect("source-read", add_running_cost, priority=400)
    app.connect("env-get-outdated", outdated_when_results_change)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
