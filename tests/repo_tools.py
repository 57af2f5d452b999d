"""The repository's scripts (tools/, bench/) loaded as modules, for the tests that check them."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_tool(name: str, relpath: str):
    "Import the script at ROOT/`relpath` as module `name` (registered in sys.modules)."
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
