"""Shared by the tests: where the local Multi30k text files are, and a count of the tests
that need them.

A test needs the files if it asks for the `multi30k` fixture (the folder, a `Path`), itself
or through another fixture, or carries the `multi30k` mark. The folder is the one
`annotated_transformer.data.multi30k_dir` finds: `$MULTI30K_DIR`, else `multi30k/` in
`$AT_SHARED_DATA`, else in `../shared/data` beside the repository. Without it those tests
are skipped; with it, each of them must run: one that skips anyway fails the session,
unless a `skipif` mark of its own (another condition, e.g. a GPU count) says why. The run
ends with the line "N tests need ../shared/data: R ran, K skipped".
"""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA_ENV = "AT_SHARED_DATA"    # the folder holding multi30k/; hide it: a bad path
MARK = "multi30k"


def shared_data() -> Path:
    return Path(os.environ.get(SHARED_DATA_ENV) or ROOT.parent / "shared" / "data")


def find_multi30k() -> Path | None:
    "The local Multi30k folder, or None."
    from annotated_transformer.data import multi30k_dir
    return multi30k_dir(default=shared_data() / "multi30k")


class Multi30kGuard:
    "A plugin: notes the tests that need the files, counts how they ended, reports."

    def __init__(self):
        self.folder = find_multi30k()
        self.items = {}           # nodeid -> reasons of the item's own true skipif marks
        self.ran, self.skipped, self.excused = set(), {}, {}

    def failing(self) -> bool:
        return self.folder is not None and bool(self.skipped)

    def pytest_collection_finish(self, session):
        "After deselection: note the tests that need the files; skip them without any."
        for item in session.items:       # notebook cells (nbval) have no fixturenames
            if MARK in getattr(item, "fixturenames", ()) or item.get_closest_marker(MARK):
                self.items[item.nodeid] = _declared_skips(item)
                if self.folder is None:
                    item.add_marker(pytest.mark.skip(
                        reason=f"no Multi30k files in {shared_data()} (or $MULTI30K_DIR)"))

    def pytest_runtest_logreport(self, report):
        if report.nodeid not in self.items:
            return
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            reason = reason.removeprefix("Skipped: ")
            if reason in self.items[report.nodeid]:
                self.excused[report.nodeid] = reason
            else:
                self.skipped[report.nodeid] = reason
        elif report.when == "call":
            self.ran.add(report.nodeid)

    def pytest_sessionfinish(self, session):
        if self.failing() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.items:
            return
        line = (f"{len(self.items)} tests need ../shared/data: {len(self.ran)} ran, "
                f"{len(self.skipped)} skipped")
        if self.excused:
            line += f", {len(self.excused)} skipped by their own skipif mark"
        where = self.folder or f"no Multi30k files in {shared_data()}"
        terminalreporter.write_sep("-", "tests that need ../shared/data")
        terminalreporter.write_line(f"{line} ({where})")
        listed = {**self.excused, **self.skipped} if self.folder else self.excused
        for nodeid, reason in listed.items():      # without the files: the count only
            terminalreporter.write_line(f"  skipped: {nodeid}: {reason}")
        if self.failing():
            terminalreporter.write_line(
                f"FAILED: {len(self.skipped)} of them skipped although the Multi30k files "
                f"are at {self.folder}", red=True, bold=True)


def _declared_skips(item) -> set:
    "Reasons of the item's skipif marks whose condition holds (boolean conditions only)."
    reasons = set()
    for mark in item.iter_markers("skipif"):
        conditions = mark.args or (mark.kwargs.get("condition"),)
        if all(isinstance(c, bool) for c in conditions) and any(conditions):
            reasons.add(mark.kwargs.get("reason", ""))
    return reasons


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{MARK}: needs the local Multi30k text files (the `multi30k` fixture "
        "implies it); skipped without them, and a skip with them fails the session")
    config.pluginmanager.register(Multi30kGuard(), "multi30k_guard")


@pytest.fixture(scope="session")
def multi30k(pytestconfig) -> Path:
    "The local Multi30k folder (tests that ask for it are skipped without one)."
    folder = pytestconfig.pluginmanager.get_plugin("multi30k_guard").folder
    if folder is None:                  # not reached: collection already marked the skip
        pytest.skip(f"no Multi30k files in {shared_data()}")
    return folder


@pytest.fixture(scope="session")
def sp():
    "The shipped model's sentencepiece tokenizer (a test module may define its own `sp`)."
    from annotated_transformer.data import load_tokenizer
    return load_tokenizer(Path(__file__).resolve().parents[1] / "models" / "multi30k_en_de"
                          / "tokenizer.model")


@pytest.fixture(autouse=True)
def _packages_of_the_tests_only(tmp_path_factory, monkeypatch):
    """Part 9e's packages in a folder of the session's unless a test names one: packages
    that earlier runs kept in the user's cache never choose the default engine ("auto")."""
    from annotated_transformer import engines
    from annotated_transformer.engines import compiling
    from annotated_transformer.utils import CACHE_ENV
    folder, real = tmp_path_factory.getbasetemp() / "cache", compiling.compile_dir
    monkeypatch.setattr(engines, "compile_dir", lambda cache_dir=None: real(
        cache_dir or os.environ.get(CACHE_ENV) or folder))
