"""tools/fetch_multi30k.py writes the text files the tests read, from the hub copy's layout.

No network: `AT_MULTI30K_HUB` points the data module at a stand-in for the hub copy (built by
tests/make_hub_standin.py from the first lines of the local files), and the script must write
those lines back byte for byte, then leave the files alone on a second run. Skipped without
the local Multi30k files (the `multi30k` fixture, tests/conftest.py).
"""
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FILES = [f"{stem}.{lang}" for stem in ("train", "val", "test_2016_flickr") for lang in ("en", "de")]
N = 40


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_lines(data: Path, name: str) -> str:
    lines = (data / name).read_text(encoding="utf-8").split("\n")[:N]
    return "".join(line + "\n" for line in lines)


@pytest.fixture
def hub(multi30k, tmp_path, monkeypatch):
    "A stand-in hub folder with the first N lines of each split; the hub itself switched off."
    small = tmp_path / "small"
    small.mkdir()
    for name in FILES:
        (small / name).write_text(first_lines(multi30k, name), encoding="utf-8")
    folder = load(REPO / "tests/make_hub_standin.py").make_hub_standin(small, tmp_path / "hub")
    monkeypatch.setenv("AT_MULTI30K_HUB", str(folder))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    return folder


def test_writes_the_six_files_then_leaves_them_alone(hub, multi30k, tmp_path, capsys):
    script = load(REPO / "tools/fetch_multi30k.py")
    target = tmp_path / "multi30k"
    assert script.main([str(target), "--source", "hub"]) == 0
    assert sorted(p.name for p in target.iterdir()) == sorted(FILES)   # no temporary files left
    for name in FILES:
        assert (target / name).read_text(encoding="utf-8") == first_lines(multi30k, name), name

    for f in hub.iterdir():          # a second run must not even read the hub
        f.unlink()
    capsys.readouterr()
    assert script.main([str(target)]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_official_files_checked_by_hash(multi30k, tmp_path):
    """The default source: gzipped official files, served here from 127.0.0.1; each text's
    SHA-256 must be the listed one, and a wrong file leaves nothing behind."""
    import gzip
    import http.server
    import threading
    from functools import partial

    served = tmp_path / "served"
    served.mkdir()
    for name in FILES:
        (served / f"{name}.gz").write_bytes(gzip.compress((multi30k / name).read_bytes()))
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    script = load(REPO / "tools/fetch_multi30k.py")
    try:
        target = tmp_path / "multi30k"
        script.fetch_official(target, base)
        for name in FILES:
            assert (target / name).read_bytes() == (multi30k / name).read_bytes(), name
        (served / "val.de.gz").write_bytes(gzip.compress(b"not the file\n"))
        with pytest.raises(OSError, match="SHA-256"):
            script.fetch_official(tmp_path / "other", base)
        assert list((tmp_path / "other").iterdir()) == []
    finally:
        server.shutdown()
