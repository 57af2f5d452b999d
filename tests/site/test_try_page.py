"""The book's "Try it" page in a real browser (the test command's site stage, after the build).

Headless Chromium (Debian's, driven by Playwright) opens the built site from an HTTP server on
127.0.0.1 and types 20 sentences of test_2016_flickr into the page, once with each search. The page
must give, piece for piece, what Python gives: the source pieces of the Python tokenizer;
with greedy search, the output ids of Python's onnxruntime running the same graphs (part 11e's
`OnnxTranslator` search) and the text of our PyTorch `Translator`; with beam search, the ids
of chapter 9's `beam_search` on our PyTorch model and the text of `Translator` (beam 4, α =
0.6). It must ask no other host, log no error, draw
each layer's and head's cross-attention as the step graph computes it, stop at the length
limit and cut a long source as Python does, and say so in one line when a file cannot be
loaded or the browser has no WebAssembly.

Where the site was not built with the page's files, or there is no Chromium ($AT_CHROMIUM
names one), the tests skip, except on CI (CI=true), where they fail.
"""
import functools
import http.server
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("AT_SITE", ROOT / "book" / "_build" / "html"))
PAGE = "book/try.html"
N_SENTENCES = 20
FIRST_SENTENCE_S = 5.0     # bound on the first translation, click to text (measured: 0.2 s)
LOAD_S = 60.0              # bound on loading the page and the model (measured: 1.4 s)


def _missing(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _chromium() -> str | None:
    """$AT_CHROMIUM, else Debian's browser binary (its /usr/bin/chromium is a wrapper
    script), else a Chromium or Chrome on the PATH."""
    for path in (os.environ.get("AT_CHROMIUM"), "/usr/lib/chromium/chromium",
                 *map(shutil.which, ("chromium", "google-chrome", "chromium-browser"))):
        if path and Path(path).exists():
            return path
    return None


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        "A page closed mid-download (the failure tests) is no error of the server's."
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def server():
    if not (SITE / "_static/try/model/decoder_step.onnx").exists():
        _missing(f"no Try it page in {SITE}: run `make book` (tools/build_try.sh)")
    httpd = _Server(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    path = _chromium()
    if path is None:
        _missing("no Chromium (Debian: apt-get install chromium)")
    try:
        from playwright import sync_api
    except ImportError:
        _missing("no Playwright (pip install playwright; it drives the installed browser)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield b
        b.close()


def _open(browser, url: str, before=None):
    "A fresh page at `url`, with its console errors and requested URLs recorded."
    page = browser.new_page()
    seen = {"errors": [], "urls": []}
    page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("request", lambda r: seen["urls"].append(r.url))
    if before:
        before(page)
    page.goto(url)
    page.wait_for_function(
        "['ready', 'error'].includes(document.getElementById('try-it').dataset.state)",
        timeout=LOAD_S * 1000)
    return page, seen


def _translate(page, sentence: str, beam_size: int = 1) -> dict:
    done = int(page.get_attribute("#try-it", "data-done"))
    page.fill("#try-source", sentence)
    page.select_option("#try-search", str(beam_size))
    t0 = time.perf_counter()
    page.click("#try-translate")
    page.wait_for_function(
        f"document.getElementById('try-it').dataset.done === '{done + 1}'", timeout=60_000)
    wall = time.perf_counter() - t0
    out = page.locator("#try-output")
    return {"text": out.inner_text(), "ids": json.loads(out.get_attribute("data-ids")),
            "src": json.loads(out.get_attribute("data-src-ids")), "wall": wall,
            "ms": float(page.get_attribute("#try-it", "data-ms")),
            "state": page.get_attribute("#try-it", "data-state")}


def _times(found: list[dict]) -> str:
    later = sorted(f["wall"] for f in found[1:])
    return (f"first {found[0]['wall']:.2f} s ({found[0]['ms']:.0f} ms in the page), the next "
            f"{len(later)}: median {later[len(later) // 2] * 1e3:.0f} ms, slowest "
            f"{later[-1] * 1e3:.0f} ms")


@pytest.fixture(scope="module")
def sources(multi30k):
    lines = (multi30k / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    return lines[:N_SENTENCES]


def test_page_translates_as_python_does(server, browser, sources):
    import torch
    from annotated_transformer.exports.onnx import OnnxTranslator
    from annotated_transformer.run.pretrained import load_translator
    from annotated_transformer.data import normalize_line
    from annotated_transformer.decoding import beam_search
    from annotated_transformer.exports.onnx import _onnx_greedy
    from annotated_transformer.decoding import MAX_LEN_B
    from annotated_transformer.formats import EOS_ID

    t0 = time.perf_counter()
    page, seen = _open(browser, f"{server}/{PAGE}")
    load = time.perf_counter() - t0
    assert page.get_attribute("#try-it", "data-state") == "ready", page.inner_text("#try-status")
    greedy = [_translate(page, s, 1) for s in sources]
    beam = [_translate(page, s, 4) for s in sources]
    page.close()

    engine = OnnxTranslator(SITE / "_static/try/model")
    ours = load_translator(ROOT / "models/multi30k_en_de", precision="fp32")
    texts = {k: ours.translate(sources, beam_size=k) for k in (1, 4)}
    for i, s in enumerate(sources):
        src = engine.sp.encode(normalize_line(s))
        ids = {1: _onnx_greedy(engine, [src], MAX_LEN_B)[0]}
        with torch.no_grad():
            tokens, _ = beam_search(ours.model.eval(), torch.tensor([src]))
        ids[4] = tokens[0, 0].tolist()
        ids[4] = ids[4][:ids[4].index(EOS_ID)] if EOS_ID in ids[4] else ids[4]
        for k, got in ((1, greedy[i]), (4, beam[i])):
            assert got["state"] == "ready"
            assert got["src"] == src, s
            assert got["ids"] == ids[k], (k, s)
            assert got["text"] == texts[k][i], (k, s)
    hosts = {u.split("/")[2] for u in seen["urls"] if u.startswith("http")}
    assert hosts == {server.split("/")[2]}, hosts
    assert not seen["errors"], seen["errors"]
    print(f"\nTry it page: loaded in {load:.2f} s; greedy: {_times(greedy)}; beam 4: "
          f"{_times(beam)}; {N_SENTENCES} of {N_SENTENCES} identical to Python with each")
    assert greedy[0]["wall"] < FIRST_SENTENCE_S


def _heatmap(page) -> list[list[float]]:
    "The weights the page drew: one row per output piece, one value per source piece."
    return page.evaluate("""() => [...document.querySelectorAll('#try-heatmap tbody tr')]
        .map(tr => [...tr.querySelectorAll('td')].map(td => Number(td.title.split(': ').pop())))""")


def test_attention_heatmap_is_the_graphs(server, browser):
    """Greedy: every layer and head the page draws is the step graph's cross-attention for
    the page's own output. Beam: one row per piece and one for the end, each summing to 1."""
    import numpy as np
    from annotated_transformer.exports.onnx import OnnxTranslator

    engine = OnnxTranslator(SITE / "_static/try/model")
    c = engine.config
    page, seen = _open(browser, f"{server}/{PAGE}")
    got = _translate(page, "Two dogs play in the snow.", 1)
    mask, cross, past = engine.start([got["src"]])
    weights = []                                        # per step: (layers, heads, S)
    for token in [c["bos_id"], *got["ids"]]:
        _, past, attn = engine.next(np.array([[token]]), mask, cross, past)
        weights.append(np.stack([a[0] for a in attn]))
    weights = np.stack(weights, axis=1)                 # (layers, steps, heads, S)
    buttons = page.locator("#try-layers button")
    assert buttons.count() == c["model"]["n_layers"]
    for layer in range(c["model"]["n_layers"]):
        buttons.nth(layer).click()
        assert buttons.nth(layer).get_attribute("aria-pressed") == "true"
        for head in range(-1, c["model"]["n_heads"]):
            page.select_option("#try-head", str(head))
            want = weights[layer].mean(1) if head < 0 else weights[layer][:, head]
            np.testing.assert_allclose(_heatmap(page), want, atol=1e-3)   # shown to 3 places
    beam = _translate(page, "Two dogs play in the snow.", 4)
    rows = _heatmap(page)
    assert len(rows) == len(beam["ids"]) + 1                      # the end symbol's row
    assert all(len(r) == len(beam["src"]) and abs(sum(r) - 1) < 0.01 for r in rows)
    assert not seen["errors"], seen["errors"]
    page.close()


def test_length_limit_and_cut_source_as_python(server, browser, sources):
    """With max_len_b = 0 (the config the page reads, changed in flight) outputs stop at
    the source's length, and a source longer than the positional table is cut to fit: both
    searches still give Python's pieces."""
    import torch
    from annotated_transformer.decoding import beam_search
    from annotated_transformer.exports.onnx import OnnxTranslator, _onnx_greedy
    from annotated_transformer.formats import EOS_ID
    from annotated_transformer.run.pretrained import load_translator
    from annotated_transformer.translator import encode_sources

    engine = OnnxTranslator(SITE / "_static/try/model")
    config = dict(engine.config, max_len_b=0)

    def no_slack(page):
        page.route("**/model/onnx.json", lambda route: route.fulfill(
            status=200, content_type="application/json", body=json.dumps(config)))

    page, seen = _open(browser, f"{server}/{PAGE}", before=no_slack)
    texts = [*sources[:6], " ".join(sources[:25])]      # the last: about 300 pieces
    with pytest.warns(UserWarning, match="truncated to 256"):
        rows = encode_sources(engine.sp, texts, max_len=config["model"]["max_len"],
                              max_len_b=0)
    assert len(rows[-1]) == config["model"]["max_len"]            # it was cut
    model = load_translator(ROOT / "models/multi30k_en_de").model.eval()
    at_limit = 0
    for text, src in zip(texts, rows):
        greedy, beam = _translate(page, text, 1), _translate(page, text, 4)
        assert greedy["src"] == beam["src"] == src
        assert greedy["ids"] == _onnx_greedy(engine, [src], 0)[0]
        with torch.no_grad():
            ids = beam_search(model, torch.tensor([src]), max_len_b=0)[0][0, 0].tolist()
        assert beam["ids"] == (ids[:ids.index(EOS_ID)] if EOS_ID in ids else ids)
        at_limit += len(greedy["ids"]) == len(src)
    assert at_limit, "no output reached the length limit: the case is not exercised"
    assert page.locator("#try-time").inner_text().endswith(
        f"the source was cut to {len(rows[-1])} pieces to fit the model")
    assert not seen["errors"], seen["errors"]
    page.close()


@pytest.mark.parametrize("lost, said", [
    ("model/decoder_step.onnx", "model/decoder_step.onnx: HTTP 404"),
    ("ort/ort.wasm.bundle.min.mjs", "Failed to fetch dynamically imported module"),
])
def test_load_failure_says_so_in_one_line(server, browser, lost, said):
    def lose(page):
        page.route(f"**/{lost}", lambda route: route.fulfill(status=404))

    page, _ = _open(browser, f"{server}/{PAGE}", before=lose)
    assert page.get_attribute("#try-it", "data-state") == "error"
    status = page.inner_text("#try-status")
    assert status.startswith(f"The model could not be loaded ({said}"), status
    assert "\n" not in status and page.locator("#try-translate").is_disabled()
    page.close()


def test_without_webassembly_says_so_in_one_line(server, browser):
    page, _ = _open(browser, f"{server}/{PAGE}",
                    before=lambda p: p.add_init_script("delete window.WebAssembly"))
    assert page.get_attribute("#try-it", "data-state") == "error"
    assert page.inner_text("#try-status") == (
        "This browser cannot run WebAssembly, so it cannot translate here.")
    page.close()
