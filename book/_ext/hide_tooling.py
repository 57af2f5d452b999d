"""Keep notebook tooling out of the rendered book.

Connected to Sphinx's ``source-read`` event, which fires before MyST-NB parses a notebook:
- ``#|`` lines (nbdev directives such as ``#| export``) are dropped from code cells;
- a cell whose directives include ``hide`` (nbdev's "not in the docs") is removed;
- a cell left empty by the stripping is removed.
nbval is driven by cell tags, which are not rendered as text.
"""
import json


def _strip(cell):
    lines = "".join(cell["source"]).splitlines(keepends=True)
    directives = [l[2:].split() for l in lines if l.startswith("#|")]
    if any(d and d[0] == "hide" for d in directives):
        return None
    body = "".join(l for l in lines if not l.startswith("#|"))
    if not body.strip():
        return None
    cell["source"] = body.rstrip("\n")
    return cell


def strip_tooling(app, docname, source):
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    nb = json.loads(source[0])
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell = _strip(cell)
        if cell is not None:
            cells.append(cell)
    nb["cells"] = cells
    source[0] = json.dumps(nb)


def drop_repeated_scripts(app, pagename, templatename, context, doctree):
    """Inline scripts reach a page twice with Sphinx 7.4, once with file name None and once
    with "", which Sphinx counts as different; sphinx-thebe's declares constants, and a
    browser refuses the second declaration with an error in the console."""
    scripts = context.get("script_files")
    if scripts:
        seen, kept = set(), []
        for js in scripts:
            key = (js.filename or None, js.attributes.get("body"))
            if key not in seen:
                seen.add(key)
                kept.append(js)
        context["script_files"] = kept


def setup(app):
    app.connect("source-read", strip_tooling)
    app.connect("html-page-context", drop_repeated_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
