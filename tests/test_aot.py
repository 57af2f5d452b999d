"""Part 9e's ahead-of-time step: a package built once per model gives the eager tokens and
is found by a new step; a damaged package, or weights changed in place, is built again; a
failed build decodes eagerly after one warning, kept if it will not change; the
translator's "aot" engine."""
import json
import shutil
import warnings

import pytest
import torch

from annotated_transformer import compiled, engines
from annotated_transformer.engines import AotStep, aot_package
from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.static import static_beam_search, static_greedy_decode
from test_static_decoding import padded_sources, small_model

LIMIT = dict(max_len_a=0, max_len_b=16, min_len=16)     # EOS forbidden until position 16


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    "A one-layer model 8 wide and its package, built once (the real build) in a folder."
    cache = tmp_path_factory.mktemp("aot")
    model = small_model(n_layers=1, d_model=8, d_ff=16, n_heads=2)
    step = AotStep(cache_dir=cache)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                # a failure is reported below
        ids, _ = static_greedy_decode(model, torch.tensor([[5, 6, 7]]), step=step, **LIMIT)
    if "C++ compile error" in step.why or "CppCompileError" in step.why:
        pytest.skip(f"no C++ compiler here: {step.why}")
    assert step.failed is None, step.why
    return model, ids, aot_package(model, step.folder)


def no_build(*args):
    raise AssertionError("built again")


def test_the_package_gives_the_eager_tokens_and_is_found_again(built, monkeypatch):
    """One sentence at its length limit, greedy; then a padded batch by beam search in a
    new step, as a new process would make: loaded from the folder, not built."""
    model, ids, package = built
    assert ids.size(1) == 16
    assert torch.equal(ids, greedy_decode(model, torch.tensor([[5, 6, 7]]), **LIMIT)[0])
    monkeypatch.setattr(engines, "run_child", no_build)
    step, src = AotStep(cache_dir=package.parents[2]), padded_sources(3)
    assert step.folder == package.parent
    beams, _ = static_beam_search(model, src, beam_size=2, max_len_b=8, step=step)
    assert torch.equal(beams, beam_search(model, src, beam_size=2, max_len_b=8)[0])
    assert step.failed is None and [p.name for p in step.folder.glob("aot-*")] == [
        package.name]                                 # no verdict, no leftover files


def test_a_damaged_package_is_built_again(built, tmp_path, monkeypatch):
    model, ids, good = built
    step = AotStep(cache_dir=tmp_path)
    package = aot_package(model, step.folder)
    package.parent.mkdir(parents=True)
    package.write_bytes(good.read_bytes()[:1000])          # a partial copy
    monkeypatch.setattr(engines, "_BUILD_CODE", "import shutil, sys; shutil.copy("
                        f"{str(good)!r}, sys.argv[2])")     # the build, quickly
    with pytest.warns(RuntimeWarning, match="could not be loaded .*building it again"):
        again, _ = static_greedy_decode(model, torch.tensor([[5, 6, 7]]), step=step,
                                        **LIMIT)
    assert torch.equal(again, ids) and package.read_bytes() == good.read_bytes()


def test_weights_changed_in_place_get_a_new_package(built, tmp_path, monkeypatch):
    model, _, good = built
    model = small_model(n_layers=1, d_model=8, d_ff=16, n_heads=2)    # a copy to change
    packages = []

    def build(m, package):
        packages.append(package)
        shutil.copy(good, package)

    monkeypatch.setattr(engines, "_build_package", build)
    step, src = AotStep(cache_dir=tmp_path), torch.tensor([[5, 6, 7]])
    step.folder.mkdir(parents=True)
    static_greedy_decode(model, src, max_len_b=4, step=step)
    static_greedy_decode(model, src, max_len_b=4, step=step)          # kept: not again
    with torch.no_grad():
        model.generator.bias.add_(1.0)                # as an optimiser step would
    static_greedy_decode(model, src, max_len_b=4, step=step)
    assert len(packages) == 2 and packages[0] != packages[1]


@pytest.mark.parametrize("code, kept", [
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", True),   # a crash
    ("raise SystemExit('no C++ compiler here')", False)])           # may be installed
def test_a_failed_build_decodes_eagerly(code, kept, tmp_path, monkeypatch):
    """One warning, eager tokens; a crash is kept (the next step does not build), an
    ordinary failure is tried again by the next process."""
    monkeypatch.setattr(engines, "_BUILD_CODE", code)
    model, src = small_model(), padded_sources(2)
    step = AotStep(cache_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="ahead-of-time step could not be had") as w:
        ids, _ = static_greedy_decode(model, src, max_len_b=6, step=step)
        static_greedy_decode(model, src, max_len_b=6, step=step)        # warned once
    assert len(w) == 1 and step.failed is not None
    assert torch.equal(ids, greedy_decode(model, src, max_len_b=6)[0])
    records = list(step.folder.glob("aot-*.json"))
    assert not list(step.folder.glob("aot-*.pt2")) and len(records) == kept
    if kept:
        assert "SIGSEGV" in step.why and not json.loads(records[0].read_text())["ok"]
        monkeypatch.setattr(engines, "run_child", no_build)
        with pytest.warns(RuntimeWarning, match="kept in"):
            static_greedy_decode(model, src, max_len_b=6, step=AotStep(cache_dir=tmp_path))


def test_the_translator_s_aot_engine(tmp_path, monkeypatch):
    """engine="aot" decodes through the shared `AotStep` (a failing build here: eager
    tokens after one warning); fp32 is its precision; elsewhere it says why not."""
    from small_models import SHIPPED, small_translator
    from annotated_transformer.data import load_tokenizer
    from annotated_transformer.translator import decoding_precision
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(engines, "_AOT", {})
    monkeypatch.setattr(engines, "_BUILD_CODE", "raise SystemExit('no compiler')")
    tr = small_translator(load_tokenizer(SHIPPED / "tokenizer.model"), 0)
    sentences = ["A dog runs.", "", "Two men are playing chess in a park by the river."]
    eager = tr.translate(sentences, beam_size=2, precision="fp32")
    with pytest.warns(RuntimeWarning, match="could not be had .*no compiler"):
        assert tr.translate(sentences, beam_size=2, engine="aot") == eager
    assert engines.aot_step().failed is not None
    assert decoding_precision("auto", torch.device("cpu"), engine="aot") == (
        "fp32", "precision fp32, the aot engine's")
    with pytest.warns(RuntimeWarning, match="aot engine decodes fp32 on the CPU"):
        tr.translate(sentences, engine="aot", precision="int8")


def test_weights_that_cannot_be_written_decode_eagerly(tmp_path, monkeypatch):
    """A full disk while the weights are written for the build (safetensors' own error,
    not an OSError): one warning, eager tokens, no file left behind."""
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: No space left on device")

    monkeypatch.setattr(engines, "save_file", full)
    model, src = small_model(), padded_sources(2)
    step = AotStep(cache_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="SafetensorError: .*No space left"):
        ids, _ = static_greedy_decode(model, src, max_len_b=6, step=step)
    assert torch.equal(ids, greedy_decode(model, src, max_len_b=6)[0])
    assert list(step.folder.iterdir()) == []


def test_only_float32_weights_on_the_cpu_get_a_package(tmp_path, monkeypatch):
    monkeypatch.setattr(engines, "run_child", no_build)
    model, src = small_model().to(torch.bfloat16), padded_sources(2)
    step = AotStep(cache_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="float32 weights on the CPU"):
        ids, _ = static_greedy_decode(model, src, max_len_b=6, step=step)
    assert torch.equal(ids, static_greedy_decode(model, src, max_len_b=6)[0])


def test_the_translator_decodes_through_the_package(tmp_path, monkeypatch):
    """engine="aot" runs every step through the package's `run` (a stand-in here that
    records its calls and runs the eager step; the real build is tested above)."""
    from small_models import SHIPPED, small_translator
    from annotated_transformer.data import load_tokenizer
    from annotated_transformer.static import StaticCache, static_step
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(engines, "_AOT", {})
    built, calls = {}, []

    def build(model, package):                   # what the child would leave
        built[package] = model
        package.parent.mkdir(parents=True, exist_ok=True)
        package.write_bytes(b"")

    class Package:                               # the loader's `run`, by the eager step
        def __init__(self, path):
            self.model = built[path]

        def run(self, inputs):
            calls.append(len(inputs))
            token, t, *buffers, src_mask = inputs
            n = len(buffers) // 4
            cache = StaticCache.__new__(StaticCache)
            cache.self_k, cache.self_v, cache.cross_k, cache.cross_v = (
                buffers[i * n:(i + 1) * n] for i in range(4))
            cache.src_mask = src_mask
            return [static_step(self.model, token, t, cache)]

    monkeypatch.setattr(engines, "_build_package", build)
    monkeypatch.setattr(engines, "_load_package", lambda path: Package(path))
    tr = small_translator(load_tokenizer(SHIPPED / "tokenizer.model"), 0)
    sentences = ["A dog runs.", "", "Two men are playing chess in a park by the river."]
    for k in (1, 3):
        eager = tr.translate(sentences, beam_size=k, precision="fp32")
        assert tr.translate(sentences, beam_size=k, engine="aot") == eager
    assert len(built) == 1 and calls and engines.aot_step().failed is None


def test_another_version_or_setup_names_another_package(tmp_path, monkeypatch):
    """A package is never loaded by another version of the library (its name changes)
    or under another setup (`compile_dir` changes): there it is built anew."""
    import sys
    model = small_model()
    package = aot_package(model, compiled.compile_dir(tmp_path))
    monkeypatch.setattr(sys.modules["annotated_transformer"], "__version__", "0.0.1")
    assert aot_package(model, compiled.compile_dir(tmp_path)) != package
    monkeypatch.undo()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert compiled.compile_dir(tmp_path) != package.parent
    assert aot_package(model, compiled.compile_dir(tmp_path)).name == package.name
