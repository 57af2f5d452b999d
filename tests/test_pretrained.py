"""Model directories: `save_translator` (float32 and 16-bit) and `load_translator` from a
directory, from a URL and from the shipped model's name, with the download cache and its checks.

Nothing here reaches the network: the only web server is the test's own, on 127.0.0.1. The
model is untrained (random weights, a tokenizer trained in a second on 400 lines); the tests
check the plumbing, so its translations only need to be the same each time.
"""
import hashlib
import http.server
import json
import os
import stat
import threading
from pathlib import Path

import pytest
import torch

from annotated_transformer.data import load_tokenizer, train_tokenizer
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.cli import main
from annotated_transformer.run.hub import DownloadError, download_model, model_url
from annotated_transformer.translator import REPOSITORY_URL, SOURCE_REF, Translator
from annotated_transformer.run.pretrained import load_translator, save_translator

SENTENCES = ["A dog runs on the beach.", "", "Two men are playing chess in a park.",
             "A girl in a red coat.", "Three people sit on a bench near the water."]
GREEDY = dict(beam_size=1, max_len_b=8)
pytestmark = pytest.mark.multi30k      # the tokenizer trains on its lines (tests/conftest.py)


@pytest.fixture(scope="module")
def translator(tmp_path_factory, multi30k):
    "An untrained tiny model and a tokenizer of 200 pieces, on the CPU."
    tmp = tmp_path_factory.mktemp("tokenizer")
    lines = (multi30k / "train.en").read_text(encoding="utf-8").splitlines()[:400]
    sp = load_tokenizer(train_tokenizer({"train": {"en": lines}}, tmp, vocab_size=200, langs=("en",),
                                        name="tiny"))
    torch.manual_seed(0)
    config = TransformerConfig.preset("tiny", d_model=32, d_ff=64, n_heads=2, max_len=64)
    return Translator(make_model(200, 200, config).eval(), sp)


@pytest.fixture(scope="module")
def saved(translator, tmp_path_factory):
    return save_translator(translator, tmp_path_factory.mktemp("saved") / "model")


class Server:
    """A web server on 127.0.0.1 in a thread: serves `files` ({path: bytes}), logs each
    request in `requests`, and sends only half of the paths in `truncate`."""

    def __init__(self):
        self.files, self.requests, self.truncate = {}, [], set()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                cut = self.path in server.truncate
                self.wfile.write(body[:len(body) // 2] if cut else body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def serve(self, prefix: str, directory: Path) -> str:
        "Serve the files of `directory` under `/prefix/`; returns that URL."
        for p in directory.iterdir():
            self.files[f"/{prefix}/{p.name}"] = p.read_bytes()
        return f"{self.url}/{prefix}"


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1")          # a proxy must not see these
    monkeypatch.delenv("AT_MODEL_HOST", raising=False)
    s = Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_save_writes_hashes_dtype_and_readable_files(saved):
    meta = json.loads((saved / "config.json").read_text())
    assert meta["dtype"] == "float32"
    for name in ("model.safetensors", "tokenizer.model"):
        assert meta["files"][name] == hashlib.sha256((saved / name).read_bytes()).hexdigest()
    for name in ("config.json", "model.safetensors", "tokenizer.model"):
        assert mode(saved / name) == 0o644, name


def test_local_round_trip(translator, saved):
    loaded = load_translator(saved, device="cpu")
    for (name, a), b in zip(translator.model.state_dict().items(),
                            loaded.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert loaded.translate(SENTENCES, **GREEDY) == translator.translate(SENTENCES, **GREEDY)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_storage(translator, saved, tmp_path, dtype):
    half = save_translator(translator, tmp_path / "half", dtype=dtype)
    assert json.loads((half / "config.json").read_text())["dtype"] == str(dtype)[6:]
    full_size = (saved / "model.safetensors").stat().st_size
    assert (half / "model.safetensors").stat().st_size < 0.6 * full_size
    assert next(translator.model.parameters()).dtype == torch.float32  # not cast in place
    loaded = load_translator(half, device="cpu")
    for (name, a), b in zip(translator.model.state_dict().items(),
                            loaded.model.state_dict().values()):
        assert b.dtype == torch.float32, name
        torch.testing.assert_close(b, a.to(dtype).float(), rtol=0, atol=0)  # cast back


def test_float16_keeps_the_output(translator, tmp_path):
    """float16 rounds a weight to 11 significant bits, bfloat16 to 8: the float16 copy's
    outputs are closer to the float32 model's, and greedy search makes the same choices
    on these sentences. (The bfloat16 copy changes one of them: an untrained model's
    next-piece scores are nearly tied, and a rounding of 2^-8 flips the choice.)"""
    src = torch.tensor([translator.sp.encode(SENTENCES[4])])
    tgt = torch.tensor([[1] + translator.sp.encode("Three people on a bench.")])

    def logits(t: Translator):
        with torch.no_grad():
            return t.model(src, tgt)

    reference, error = logits(translator), {}
    for dtype in (torch.float16, torch.bfloat16):
        loaded = load_translator(
            save_translator(translator, tmp_path / str(dtype), dtype=dtype), device="cpu")
        error[dtype] = (logits(loaded) - reference).abs().max().item()
        if dtype == torch.float16:
            assert (loaded.translate(SENTENCES, **GREEDY)
                    == translator.translate(SENTENCES, **GREEDY))
    assert 0 < error[torch.float16] < error[torch.bfloat16] / 4, error


def test_16_bit_refuses_weights_out_of_range(translator, tmp_path):
    big = Translator(make_model(200, 200, translator.model.config), translator.sp)
    with torch.no_grad():
        big.model.src_embed.weight[0, 0] = 1e6                    # beyond float16's 65504
    with pytest.raises(ValueError, match="cannot hold"):
        save_translator(big, tmp_path / "big", dtype=torch.float16)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        save_translator(big, tmp_path / "big", dtype=torch.int8)


def test_download_equals_local_and_is_cached(translator, saved, server, tmp_path):
    url = server.serve("models/tiny", saved)
    cache = tmp_path / "cache"
    first = load_translator(url, device="cpu", cache_dir=cache)
    assert first.translate(SENTENCES, **GREEDY) == translator.translate(SENTENCES, **GREEDY)
    assert sorted(server.requests) == ["/models/tiny/config.json",
                                       "/models/tiny/model.safetensors",
                                       "/models/tiny/tokenizer.model"]
    (folder,) = cache.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors",
                                                        "tokenizer.model"]
    assert all(mode(p) == 0o644 for p in folder.iterdir())
    server.requests.clear()
    again = load_translator(url + "/", device="cpu", cache_dir=cache)
    assert server.requests == []                                  # from the cache
    assert again.translate(SENTENCES, **GREEDY) == first.translate(SENTENCES, **GREEDY)
    (folder / "tokenizer.model").unlink()                         # a damaged cache
    load_translator(url, device="cpu", cache_dir=cache)
    assert sorted(server.requests) == ["/models/tiny/config.json",
                                       "/models/tiny/tokenizer.model"]


def test_extra_files_are_listed_and_downloaded(translator, server, tmp_path):
    directory = tmp_path / "with_log"
    directory.mkdir()
    (directory / "training_log.jsonl").write_text('{"step": 1}\n')
    save_translator(translator, directory, extra_files=["training_log.jsonl"])
    files = json.loads((directory / "config.json").read_text())["files"]
    assert files["training_log.jsonl"] == hashlib.sha256(b'{"step": 1}\n').hexdigest()
    assert mode(directory / "training_log.jsonl") == 0o644
    folder = download_model(server.serve("log", directory), cache_dir=tmp_path / "cache")
    assert len(server.requests) == 4
    assert (folder / "training_log.jsonl").read_text() == '{"step": 1}\n'
    assert load_translator(folder).directory == folder


def test_listed_names_must_be_plain_file_names(translator, server, tmp_path):
    directory = save_translator(translator, tmp_path / "bad")
    config = json.loads((directory / "config.json").read_text())
    config["files"]["../escape.txt"] = "0" * 64
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(DownloadError, match="not plain file names"):
        download_model(server.serve("bad", directory), cache_dir=tmp_path / "cache")
    assert not (tmp_path / "escape.txt").exists()


def test_cache_dir_from_environment(saved, server, tmp_path, monkeypatch):
    url = server.serve("m", saved)
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path / "env_cache"))
    folder = download_model(url)
    assert folder.parent == tmp_path / "env_cache" and (folder / "config.json").is_file()


def corrupt_one_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 1])


@pytest.mark.parametrize("damage", ["corrupt", "truncate"])
def test_broken_download_is_refused_and_not_kept(saved, server, tmp_path, damage):
    url = server.serve("m", saved)
    weights = "/m/model.safetensors"
    if damage == "corrupt":
        server.files[weights] = corrupt_one_byte(server.files[weights])
    else:
        server.truncate.add(weights)
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError) as e:
        load_translator(url, device="cpu", cache_dir=cache)
    message = str(e.value)
    assert message.startswith(f"{url}/model.safetensors: ") and "not kept" in message
    if damage == "corrupt":
        expected = json.loads((saved / "config.json").read_text())["files"]
        actual = hashlib.sha256(server.files[weights]).hexdigest()
        assert expected["model.safetensors"] in message and actual in message
    else:
        assert "stopped after" in message and "bytes" in message
    left = [p.name for p in cache.rglob("*") if p.is_file()]
    assert left in ([], ["tokenizer.model"])   # no weights, no config.json: never whole
    server.files[weights] = (saved / "model.safetensors").read_bytes()  # repaired
    server.truncate.clear()
    load_translator(url, device="cpu", cache_dir=cache)


def test_unreachable_and_missing_give_clear_errors(saved, server, tmp_path, monkeypatch,
                                                  capsys):
    cache = tmp_path / "cache"
    with pytest.raises(DownloadError, match=r"/nothing/config.json: HTTP error 404"):
        download_model(f"{server.url}/nothing", cache_dir=cache)
    server.httpd.shutdown()
    server.httpd.server_close()                                 # nobody listens there now
    url = f"{server.url}/gone"
    monkeypatch.setenv("AT_CACHE_DIR", str(cache))              # the CLI's default cache
    assert main(["translate", "--model-dir", url, "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"annotated-transformer: error: {url}/config.json: cannot ")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert list(cache.iterdir()) == []          # nothing fetched, no empty folders left


def test_config_without_hashes_is_refused(saved, server, tmp_path):
    url = server.serve("old", saved)
    meta = json.loads(server.files["/old/config.json"])
    del meta["files"]
    server.files["/old/config.json"] = json.dumps(meta).encode()
    with pytest.raises(DownloadError, match="no sha256"):
        download_model(url, cache_dir=tmp_path)


def test_shipped_model_name(saved, server, tmp_path, monkeypatch, translator):
    assert REPOSITORY_URL == "https://github.com/annotated-transformer/annotated_transformer"
    assert model_url("multi30k_en_de") == (
        "https://raw.githubusercontent.com/annotated-transformer/annotated_transformer/"
        f"{SOURCE_REF}/models/multi30k_en_de")
    # the host is swapped, the path (organisation, repository, ref, folder) is not
    path = f"annotated-transformer/annotated_transformer/{SOURCE_REF}/models/multi30k_en_de"
    url = server.serve(path, saved)
    monkeypatch.setenv("AT_MODEL_HOST", server.url + "/")
    assert model_url("multi30k_en_de") == url
    loaded = load_translator("multi30k_en_de", device="cpu", cache_dir=tmp_path)
    assert loaded.translate(SENTENCES, **GREEDY) == translator.translate(SENTENCES, **GREEDY)
    assert server.requests and all(r.startswith(f"/{path}/") for r in server.requests)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        load_translator("multi30k_en_de_v2")        # neither a name nor a folder


def test_shipped_model_at_a_missing_ref_is_a_404(server, tmp_path, monkeypatch):
    "Nothing is served at the ref: the download fails with the URL and the HTTP status."
    monkeypatch.setenv("AT_MODEL_HOST", server.url)
    with pytest.raises(DownloadError, match=rf"{SOURCE_REF}/models/multi30k_en_de.*404"):
        load_translator("multi30k_en_de", device="cpu", cache_dir=tmp_path)


def test_cli_translates_from_a_url(saved, server, tmp_path, monkeypatch, capsys):
    url = server.serve("cli", saved)
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path))
    source = tmp_path / "in.en"
    source.write_text("A dog.\n\nA cat.\n")
    assert main(["translate", "--model-dir", url, "-i", str(source), "--device", "cpu",
                 "--beam-size", "1"]) == 0
    assert capsys.readouterr().out.count("\n") == 3
