"""The guard in tests/conftest.py: tests that need the Multi30k files run when the files are
there, a skip among them then fails the session, and without the files they skip quietly.

Each case runs pytest in a subprocess on a small test file beside a copy of the conftest,
with `$AT_SHARED_DATA` pointing at a folder that holds `multi30k/` or not.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = '''
import pytest

def test_reads(multi30k):
    assert (multi30k / "train.en").read_text() == "A dog.\\n"

@pytest.mark.multi30k
def test_marked():
    pass

@pytest.mark.skipif(True, reason="needs two GPUs")
def test_declared(multi30k):
    pass

def test_needs_nothing():
    pass
'''
SKIPS_ANYWAY = '''
def test_skips_anyway(multi30k):
    pytest.skip("skipped by hand")
'''


def run(tmp_path: Path, tests: str, with_data: bool) -> tuple[int, str]:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(Path(__file__).with_name("conftest.py"), work / "conftest.py")
    (work / "pytest.ini").write_text("[pytest]\n")
    (work / "test_inner.py").write_text(tests)
    shared = tmp_path / "shared"
    if with_data:
        (shared / "multi30k").mkdir(parents=True)
        (shared / "multi30k/train.en").write_text("A dog.\n")
    env = {k: v for k, v in os.environ.items() if k != "MULTI30K_DIR"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs",
                          str(work)], cwd=work, env={**env, "AT_SHARED_DATA": str(shared)},
                         capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout + out.stderr


def test_with_the_files_each_test_that_needs_them_runs(tmp_path):
    rc, out = run(tmp_path, TESTS, with_data=True)
    assert rc == 0, out
    assert ("3 tests need ../shared/data: 2 ran, 0 skipped, 1 skipped by their own skipif "
            f"mark ({tmp_path / 'shared/multi30k'})") in out
    assert "3 passed, 1 skipped" in out


def test_a_skip_with_the_files_there_fails_the_session(tmp_path):
    rc, out = run(tmp_path, TESTS + SKIPS_ANYWAY, with_data=True)
    assert rc == 1, out
    assert "4 tests need ../shared/data: 2 ran, 1 skipped, 1 skipped by their own" in out
    assert "test_inner.py::test_skips_anyway: skipped by hand" in out
    assert "FAILED: 1 of them skipped although the Multi30k files are at" in out


def test_without_the_files_they_skip_and_the_session_passes(tmp_path):
    rc, out = run(tmp_path, TESTS + SKIPS_ANYWAY, with_data=False)
    assert rc == 0, out
    assert "4 tests need ../shared/data: 0 ran, 3 skipped, 1 skipped by their own" in out
    assert "1 passed, 4 skipped" in out
    assert "FAILED" not in out
