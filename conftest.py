"""pytest, for every path of the repository: shrunk runs of the notebooks.

With AT_QUICK set (the test command sets it), a notebook that nbval runs gets the code that
tools/shrunk.json names for it as one more cell right after its cell tagged `parameters`,
in memory: the notebook on disk is never written (tools/shrunk.py says why and how).
Without AT_QUICK, nbval runs the notebook as it is, at full size.
"""
import importlib.util
import os
from collections import defaultdict
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "at_tools_shrunk", Path(__file__).resolve().parent / "tools/shrunk.py")
shrunk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shrunk)
QUICK_ENV = "AT_QUICK"


def _nbval_file_class():
    try:
        from nbval.plugin import IPyNbCell, IPyNbFile, find_metadata_tags
    except ImportError:                       # no nbval: nothing to wrap
        return None
    import nbformat

    class ShrunkNotebook(IPyNbFile):
        "nbval's notebook, its shrunk sizes inserted after the `parameters` cell."

        def collect(self):
            items = list(super().collect())          # reads self.nb from disk
            stem = Path(str(self.fspath)).stem
            at = shrunk.parameters_index(self.nb, str(self.fspath))
            code = shrunk.code_for(stem)
            if code is None:
                return items
            if at is None:
                raise shrunk.ShrunkError(
                    f"tools/shrunk.json has sizes for {stem}, which has no code cell "
                    f"tagged {shrunk.TAG!r}")
            cell = nbformat.from_dict(shrunk.shrunk_cell(code))
            self.nb.cells.insert(at + 1, cell)
            k = next(i for i, item in enumerate(items) if item.cell is self.nb.cells[at])
            options = defaultdict(bool, find_metadata_tags(cell.metadata))
            options.setdefault("check", self.compare_outputs)
            items.insert(k + 1, IPyNbCell.from_parent(
                self, name=f"{items[k].name} (shrunk sizes)", cell_num=items[k].cell_num,
                cell=cell, options=options))
            return items

    return IPyNbFile, ShrunkNotebook


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    "nbval's collector for a notebook, replaced by the shrunk one under AT_QUICK."
    found = yield
    classes = _nbval_file_class() if os.environ.get(QUICK_ENV) else None
    if not classes or file_path.suffix != ".ipynb":
        return found
    plain, shrinking = classes
    return [shrinking.from_parent(parent, path=file_path) if type(node) is plain else node
            for node in found]
