"""Part I stands alone (issue 56, item 5): every name a Part I page takes from the package is
public and defined on a Part I page.

Part I is the part of _toc.yml whose caption starts with "Part I:", with nbs/00_start first
(tools/reading_path.py's `part_one`). Every code cell of those notebooks is read, exported or
not, hidden or not: its `from annotated_transformer... import x` and `import
annotated_transformer...` statements, and the attributes it reads of a module so imported
(`batching.pair_lengths`). A name is defined on the page whose exported cell (`#| export`,
`#| exports`, `#| exporti`, to its own `#| default_exp` or to the module it names) defines it
at the top level (def, class, assignment); a name an exported cell imports from another of
the package's modules is followed there; a module is defined on the page that holds its
`#| default_exp`. A page fails for a private name (`_x`) and for a name defined outside
Part I; the message lists page -> names -> defining page.
"""
import ast
import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "annotated_transformer"
spec = importlib.util.spec_from_file_location("reading_path", ROOT / "tools/reading_path.py")
rp = importlib.util.module_from_spec(spec)
sys.modules.setdefault("reading_path", rp)
spec.loader.exec_module(rp)

EXPORTS = {"export", "exports", "exporti"}


def cells(nb_path: Path):
    "Each code cell of a notebook as (its `#|` directives, its Python tree or None)."
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        directives = [l[2:].split() for l in lines if l.startswith("#|")]
        code = "\n".join("" if l.lstrip().startswith(("%", "!")) else l for l in lines)
        try:
            tree = ast.parse(code)
        except SyntaxError:
            tree = None
        yield [d for d in directives if d], tree


def module_key(dotted: str) -> str:
    "`lab.figures` for `lab.figures`, `lab` for `lab.__init__`, '' for the package."
    parts = [p for p in dotted.split(".") if p and p != "__init__"]
    return ".".join(parts)


def package_module(node) -> str | None:
    "The package's module an `ImportFrom` reads ('' for the package), or None."
    m = node.module or ""
    if node.level == 0 and (m == PACKAGE or m.startswith(PACKAGE + ".")):
        return module_key(m[len(PACKAGE) + 1:])
    return None


def definitions(nbs: Path) -> tuple[dict, dict, dict]:
    """(module -> owner page, (module, name) -> defining page, (module, name) -> the
    (module, name) an exported import brings in), from the exported cells of `nbs`."""
    owners, defined, brought = {}, {}, {}
    for path in sorted(nbs.glob("*.ipynb")):
        page, default = path.stem, None
        for directives, tree in cells(path):
            for d in directives:
                if d[0] == "default_exp" and len(d) > 1:
                    default = module_key(d[1])
                    owners[default] = page
            target = next((d[1] if len(d) > 1 else default for d in directives
                           if d[0] in EXPORTS), None)
            if target is None or tree is None:
                continue
            target = module_key(target)
            for node in tree.body:
                names = []
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names = [node.name]
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        names += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
                elif isinstance(node, ast.ImportFrom) and package_module(node) is not None:
                    for a in node.names:
                        brought[target, a.asname or a.name] = (package_module(node), a.name)
                for name in names:
                    defined.setdefault((target, name), page)
    return owners, defined, brought


def defining_page(module: str, name: str, tables) -> str | None:
    "The page that defines `name` of `module` (a submodule: its owner), following imports."
    owners, defined, brought = tables
    seen = set()
    while (module, name) not in seen:
        seen.add((module, name))
        sub = module_key(f"{module}.{name}")
        if sub in owners:
            return owners[sub]
        if (module, name) in defined:
            return defined[module, name]
        if (module, name) not in brought:
            return None
        module, name = brought[module, name]
    return None


def taken_names(tree) -> list[tuple[str, str]]:
    "The (module, name) pairs a cell takes from the package, attributes of modules included."
    taken, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and package_module(node) is not None:
            module = package_module(node)
            for a in node.names:
                taken.append((module, a.name))
                aliases[a.asname or a.name] = module_key(f"{module}.{a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == PACKAGE or a.name.startswith(PACKAGE + "."):
                    inner = module_key(a.name[len(PACKAGE) + 1:])
                    if inner:
                        taken.append(tuple(inner.rsplit(".", 1)) if "." in inner
                                     else ("", inner))
                    if a.asname:
                        aliases[a.asname] = inner
                    else:
                        aliases[PACKAGE] = ""
    for node in ast.walk(tree):                  # `alias.name`: a module's attribute
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases:
            taken.append((aliases[node.value.id], node.attr))
    return taken


def findings(root: Path = ROOT) -> list[str]:
    "One line per (page, defining page): the names a Part I page should not take."
    pages = [Path(f).name for f in rp_part_one(root)]
    tables = definitions(root / "nbs")
    bad = defaultdict(set)
    for page in pages:
        for _, tree in cells(root / "nbs" / f"{page}.ipynb"):
            for module, name in taken_names(tree) if tree else []:
                where = defining_page(module, name, tables)
                private = name.startswith("_") and not name.startswith("__")
                if private or where not in pages:
                    why = ("private, " if private else "") + (where or "not found")
                    bad[page, why].add(name)
    return [f"{page}: {', '.join(sorted(names))} -> {why}"
            for (page, why), names in sorted(bad.items())]


def rp_part_one(root: Path) -> list[str]:
    "tools/reading_path.py's Part I, read under `root`."
    saved = rp.ROOT
    rp.ROOT = root
    try:
        return rp.part_one()
    finally:
        rp.ROOT = saved


def test_part_one_takes_only_public_names_defined_in_part_one():
    found = findings()
    assert not found, ("Part I pages take names that are private or defined outside "
                       "Part I (page: names -> defining page):\n" + "\n".join(found))


def test_the_scan_reads_part_one_and_its_definitions():
    pages = rp_part_one(ROOT)
    assert len(pages) >= 12 and pages[0] == "nbs/00_start"
    tables = definitions(ROOT / "nbs")
    assert defining_page("attention", "attention", tables) == "01_attention"
    assert defining_page("", "model", tables) == "05_model"        # a module: its owner
    assert defining_page("", "make_model", tables) == "05_model"   # via the package


def notebook(*sources: str) -> dict:
    return {"cells": [{"cell_type": "code", "source": s, "metadata": {}, "outputs": [],
                       "execution_count": None} for s in sources],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_the_scan_would_catch_one(tmp_path):
    (tmp_path / "nbs").mkdir()
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: intro\nparts:\n"
        "  - caption: \"Part I: the paper\"\n    chapters:\n"
        "      - file: nbs/01_a\n      - file: nbs/02_c\n"
        "  - caption: \"Part II: more\"\n    chapters:\n      - file: nbs/01b_b\n")
    pages = {
        "01_a": notebook("#| default_exp a", "#| export\ndef f(): pass\n_g = 1"),
        "01b_b": notebook("#| default_exp b", "#| export\nclass B: pass",
                          "#| export a\ndef h(): pass",
                          "#| export a\nfrom annotated_transformer.b import B"),
        "02_c": notebook("#| default_exp c",
                         "from annotated_transformer.a import f, _g, h, B\n"
                         "from annotated_transformer import b, a\nb.B\na.f",
                         "#| hide\nimport annotated_transformer.b as bee\nbee.nothing"),
    }
    for name, nb in pages.items():
        (tmp_path / "nbs" / f"{name}.ipynb").write_text(json.dumps(nb))
    assert findings(tmp_path) == ["02_c: B, b, h -> 01b_b",
                                  "02_c: nothing -> not found",
                                  "02_c: _g -> private, 01_a"]
