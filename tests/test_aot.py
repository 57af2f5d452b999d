"""Part 9e's ahead-of-time step around its package: found again by a new step, built again
when damaged or when the weights change in place, a failed build decoding eagerly after
one warning (kept if it will not change), the translator's "aot" engine. The real build
(export, AOTInductor, the C++ compiler: tens of seconds) runs on page 9e, which checks its
tokens against chapter 9's decoders; here a stand-in package runs the eager step."""
import json
import os
import sys
import tempfile
import types
from pathlib import Path

import pytest
import torch
from functools import partial

from annotated_transformer import engines
from annotated_transformer.engines import compiling, packages, static
from annotated_transformer.engines import AotStep
from annotated_transformer.engines.packages import aot_package
from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.engines.static import (source_keys_values, static_beam_search,
                                          static_greedy_decode)
from test_static_decoding import eager_step, padded_sources, small_model


def eager_run(model, inputs):
    """What a package's `run` gives for its flat inputs: the log-probs of the module it
    exports, run eagerly."""
    token, t, *buffers, src_mask = inputs
    n = len(buffers) // 4
    return packages._StepModule(model)(token, t, *(buffers[i * n:(i + 1) * n]
                                                  for i in range(4)), src_mask)


class StandIn:
    """`build_package` and `load_package` replaced: a build writes the model's name into
    the package file; loading gives a `run` that decodes by the eager step, and fails on a
    file it did not write."""

    def __init__(self, monkeypatch):
        self.models, self.built, self.calls, self.ran, self.encoded = {}, [], 0, [], []
        monkeypatch.setattr(engines, "build_package", self.build)
        monkeypatch.setattr(engines, "load_package", self.load)

    def build(self, model, package, kind):
        assert package.stem.endswith(kind)
        self.built.append(package)
        self.models[package.name] = model
        package.parent.mkdir(parents=True, exist_ok=True)
        package.write_text(package.name)

    def load(self, path):
        if path.read_text() != path.name:
            raise RuntimeError("PytorchStreamReader failed reading zip archive")
        model = self.models[path.name]

        def run(inputs):                         # the flat inputs, as the loader's
            self.calls += 1
            self.ran.append(path.stem.rsplit("-", 1)[1])       # the package's kind
            return [eager_run(model, inputs)]

        def encoder(inputs):                     # ids and mask, as the loader's
            self.encoded.append(path.stem.rsplit("-", 1)[1])
            return encoded(model, inputs)
        return run, encoder


def encoded(model, inputs):
    "What a package's encoder gives: the memory and each layer's keys and values."
    memory = model.encode(inputs[0], src_mask=inputs[1])
    return memory, source_keys_values(model, memory)


def no_build(*args):
    raise AssertionError("built again")


def test_a_package_is_built_once_and_found_by_a_new_step(tmp_path, monkeypatch):
    package = StandIn(monkeypatch)
    model, src = small_model(), padded_sources(3)
    ids, _ = static_greedy_decode(model, src, max_len_b=6, step=AotStep(cache_dir=tmp_path))
    monkeypatch.setattr(package, "build", no_build)
    again, _ = static_greedy_decode(model, src, max_len_b=6,
                                    step=AotStep(cache_dir=tmp_path))   # a new process
    assert torch.equal(ids, greedy_decode(model, src, max_len_b=6)[0])
    assert torch.equal(again, ids) and len(package.built) == 1 and package.calls


def test_the_package_encodes_the_source_of_every_decode(tmp_path, monkeypatch):
    """The encoder of the package whose kind the decode's first steps run encodes the
    source (a one-token source and one sentence too) and gives the cross-attention keys
    and values, which the search does not project again; ids out of range are refused
    as `model.encode` refuses them; a mask of another shape is encoded by the model."""
    package = StandIn(monkeypatch)
    monkeypatch.setattr(engines, "FEW_ROWS", 4)
    def projected_again(*args):
        raise AssertionError("fill_source projected the memory again")
    monkeypatch.setattr(static, "source_keys_values", projected_again)
    model, step = small_model(), AotStep(cache_dir=tmp_path)
    for src, kw, kind in ((padded_sources(2), {}, "few"),             # 2 rows
                          (torch.tensor([[5]]), {}, "few"),            # one token
                          (padded_sources(2), {"beam_size": 3}, "many")):   # 6 rows
        package.encoded.clear()
        search, eager = ((static_beam_search, beam_search) if kw
                         else (static_greedy_decode, greedy_decode))
        ids = search(model, src, max_len_b=5, step=step, **kw)[0]
        assert package.encoded == [kind]
        assert torch.equal(ids, eager(model, src, max_len_b=5, **kw)[0])
    with pytest.raises(ValueError, match="src"):
        step.encode(model, torch.tensor([[10 ** 6]]), torch.ones(1, 1, 1, dtype=bool))
    package.encoded.clear()
    src = padded_sources(2)
    square = (src != 0)[:, None, :] & (src != 0)[:, :, None]      # (sentences, S, S)
    memory, kv = step.encode(model, src, square)
    assert package.encoded == [] and kv is None
    assert torch.equal(memory, model.encode(src, src_mask=square))


def test_a_damaged_package_is_built_again(tmp_path, monkeypatch):
    package = StandIn(monkeypatch)
    model, step = small_model(), AotStep(cache_dir=tmp_path)
    path = aot_package(model, step.folder, "few")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PK\x03\x04")                       # a partial copy
    with pytest.warns(RuntimeWarning, match="could not be loaded .*building it again"):
        ids, _ = static_greedy_decode(model, padded_sources(2), max_len_b=6, step=step)
    assert package.built == [path] and step.failed is None and package.calls
    assert torch.equal(ids, greedy_decode(model, padded_sources(2), max_len_b=6)[0])


def test_weights_changed_in_place_get_a_new_package(tmp_path, monkeypatch):
    package = StandIn(monkeypatch)
    model, src = small_model(), torch.tensor([[5, 6, 7]])
    step = AotStep(cache_dir=tmp_path)
    static_greedy_decode(model, src, max_len_b=4, step=step)
    static_greedy_decode(model, src, max_len_b=4, step=step)          # kept: not again
    with torch.no_grad():
        model.generator.bias.add_(1.0)                # as an optimiser step would
    ids, _ = static_greedy_decode(model, src, max_len_b=4, step=step)
    assert len(package.built) == 2 and package.built[0] != package.built[1]
    assert torch.equal(ids, greedy_decode(model, src, max_len_b=4)[0])


@pytest.mark.parametrize("code, kept", [
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", True),   # a crash
    ("raise SystemExit('no C++ compiler here')", False)])           # may be installed
def test_a_failed_build_decodes_eagerly(code, kept, tmp_path, monkeypatch):
    """One warning, eager tokens; a crash is kept (the next step does not build), an
    ordinary failure is tried again by the next process. No file is left behind."""
    monkeypatch.setattr(packages, "_BUILD_CODE", code)
    model, src = small_model(), padded_sources(2)
    step = AotStep(cache_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="ahead-of-time step could not be had") as w:
        ids, _ = static_greedy_decode(model, src, max_len_b=6, step=step)
        static_greedy_decode(model, src, max_len_b=6, step=step)        # warned once
    assert len(w) == 1 and step.failed is not None
    assert torch.equal(ids, greedy_decode(model, src, max_len_b=6)[0])
    left = sorted(p.name for p in step.folder.glob("aot-*"))
    assert left == ([aot_package(model, step.folder, "few").with_suffix(".json").name]
                    if kept else [])
    if kept:
        assert "SIGSEGV" in step.why
        record = step.folder / left[0]
        assert not json.loads(record.read_text())["ok"]
        monkeypatch.setattr(packages, "run_child", no_build)
        with pytest.warns(RuntimeWarning, match="kept in"):
            static_greedy_decode(model, src, max_len_b=6, step=AotStep(cache_dir=tmp_path))


def test_weights_that_cannot_be_written_decode_eagerly(tmp_path, monkeypatch):
    """A full disk while the weights are written for the build (safetensors' own error,
    not an OSError): one warning, eager tokens, no file left behind."""
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: No space left on device")

    monkeypatch.setattr(packages, "save_file", full)
    model, src = small_model(), padded_sources(2)
    step = AotStep(cache_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="SafetensorError: .*No space left"):
        ids, _ = static_greedy_decode(model, src, max_len_b=6, step=step)
    assert torch.equal(ids, greedy_decode(model, src, max_len_b=6)[0])
    assert list(step.folder.iterdir()) == []


def test_only_float32_weights_on_the_cpu_get_a_package(tmp_path, monkeypatch):
    "Or their bf16 copy (part 9a's `bf16_weights`): a model all in bfloat16 gets none."
    monkeypatch.setattr(packages, "run_child", no_build)
    model, src = small_model().to(torch.bfloat16), padded_sources(2)
    step = AotStep(cache_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="float32 weights or their bf16 copy"):
        ids, _ = static_greedy_decode(model, src, max_len_b=6, step=step)
    assert torch.equal(ids, static_greedy_decode(model, src, max_len_b=6)[0])


def test_the_translator_decodes_through_the_package(tmp_path, monkeypatch):
    """The aot engine runs every step through the package's `run`; fp32 is its precision;
    elsewhere it says why not."""
    from small_models import SHIPPED, small_translator
    from annotated_transformer.data import load_tokenizer
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(engines, "_AOT", {})
    package = StandIn(monkeypatch)
    tr = small_translator(load_tokenizer(SHIPPED / "tokenizer.model"), 0)
    sentences = ["A dog runs.", "", "Two men are playing chess in a park by the river."]
    aot = partial(engines.aot, max_rows=9)             # 3 sentences x 3 beams: "few"
    for k in (1, 3):
        eager = tr.use(precision="fp32", engine=engines.eager).translate(
            sentences, beam_size=k)
        assert tr.use(engine=aot).translate(sentences, beam_size=k) == eager
        assert tr.decoding.engine == "aot" and tr.decoding.precision == "fp32"
    assert len(package.built) == 1 and package.calls
    assert engines.aot_step().failed is None
    assert tr.use(engine=aot).decoding.why == "precision fp32, the aot engine's"
    with pytest.warns(RuntimeWarning, match="aot engine decodes fp32 or bf16 on the CPU"):
        tr.use(engine=aot, precision="int8")
    assert tr.decoding.engine == "eager" and tr.decoding.precision == "int8"


def test_bf16_packages_are_the_bf16_copys_own(tmp_path, monkeypatch):
    """A package runs a float32 model or its bf16 copy (part 9a), nothing else; the bf16
    copy's packages are named apart and decode as the eager bf16 step does under
    autocast; the translator's bf16 "aot" translation runs them, "compiled" stays fp32."""
    from small_models import SHIPPED, small_translator
    from annotated_transformer.data import load_tokenizer
    from annotated_transformer.precision import precision_context
    from annotated_transformer.engines.quantization import bf16_weights, weights_precision
    model = small_model()
    model16 = bf16_weights(model)
    assert [weights_precision(m) for m in (model, model16)] == ["fp32", "bf16"]
    for other in (small_model().to(torch.bfloat16), small_model().half()):
        with pytest.raises(ValueError, match="float32 weights or their bf16 copy"):
            weights_precision(other)
    few16 = aot_package(model16, tmp_path, "few")
    assert few16.name.endswith("-bf16-few.pt2")
    digest = lambda m: aot_package(m, tmp_path, "few").name.split("-")[1]
    assert digest(model16) != digest(model)
    package = StandIn(monkeypatch)
    src = padded_sources(3)
    with precision_context("bf16", "cpu"):
        for search, kw in ((static_greedy_decode, {}), (static_beam_search,
                                                        {"beam_size": 2})):
            step = AotStep(cache_dir=tmp_path)
            ids = search(model16, src, max_len_b=6, step=step, **kw)[0]
            assert torch.equal(ids, search(model16, src, max_len_b=6, **kw)[0])
    assert [p.name for p in package.built] == [few16.name] and package.calls
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(engines, "_AOT", {})
    tr = small_translator(load_tokenizer(SHIPPED / "tokenizer.model"), 0)
    bf16 = dict(precision="bf16", say=False)
    tr.use(engine=partial(engines.aot, max_rows=8), **bf16)
    out = tr.translate(["A dog runs.", "Two men play chess."])
    assert len(out) == 2 and package.built[-1].name.endswith("-bf16-few.pt2")
    calls, built = package.calls, len(package.built)
    tr.use(engine=partial(engines.auto, max_rows=8), **bf16)    # the kept package
    tr.translate(["A dog runs."])
    assert package.calls > calls and len(package.built) == built
    folder = engines.aot_step().folder                    # auto asks with the copy
    assert engines._kept(tr.decoding.model, folder, 2, "bf16")
    assert not engines._kept(tr.model, folder, 2, "bf16")       # float32 is not bf16
    assert not engines._kept(tr.model, folder, 2, "fp32")           # none built
    assert not engines._kept(small_model().to(torch.bfloat16), folder, 2, "bf16")
    with pytest.warns(RuntimeWarning, match="compiled engine decodes fp32 on the CPU"):
        assert engines.compiled(tr.model, precision="bf16").engine == "eager"


def test_a_bf16_build_rebuilds_the_copy_and_checks_it_against_float32(tmp_path,
                                                                      monkeypatch):
    """The child rebuilds the bf16 copy from the file the parent wrote (its generator
    untied, in bfloat16), exports it under bf16 autocast and passes it by `_near_fp32`,
    which a step at the wrong position fails, and one that ignores the source's mask."""
    import torch._inductor.package
    from annotated_transformer.run.checkpoints import model_tensors
    from annotated_transformer.engines.quantization import bf16_weights
    model16 = bf16_weights(small_model())
    monkeypatch.setattr(packages, "run_child", lambda code, args, folder, what: (
        packages._build(*args), {"ok": True, "why": "", "keep_s": None})[1])
    graphs, checked = [], []

    def compile_one(program):
        graphs.append(str(program.graph))
        return ["files of one program"]

    def encode16(inputs):
        memory, *kv = packages._EncoderModule(model16)(*inputs)
        return memory, list(zip(kv[0::2], kv[1::2]))
    near = packages._near_fp32

    def check(model, step, sentences):
        checked.append((model_tensors(model), near(model, step, sentences)))
        return checked[-1][1]
    monkeypatch.setattr(packages, "_compile", compile_one)
    monkeypatch.setattr(torch._inductor.package, "package_aoti",
                        lambda path, files: open(path, "w").close())
    monkeypatch.setattr(packages, "load_package", lambda path: (
        lambda inputs: [eager_run(model16, inputs)], encode16))
    monkeypatch.setitem(packages._CHECKS, "bf16", (check, "strays"))
    package = aot_package(model16, tmp_path, "many")
    packages.build_package(model16, package, "many")
    assert package.exists() and len(graphs) == 2
    assert all("torch.bfloat16" in graph for graph in graphs)      # under autocast
    (rebuilt, passed), = checked
    assert passed and rebuilt.keys() == model_tensors(model16).keys()
    assert all(t.dtype == rebuilt[k].dtype and torch.equal(t, rebuilt[k])
               for k, t in model_tensors(model16).items())

    class Shifted:                           # keys written one position too far on
        def __call__(self, model, token, t, cache):
            return static.static_step(model, token, t + 1, cache)

    class Unmasked:                          # the padding of the source attended to
        def __call__(self, model, token, t, cache):
            cache.src_mask.fill_(True)
            return static.static_step(model, token, t, cache)
    assert not near(model16, Shifted(), 3) and not near(model16, Unmasked(), 3)


def test_the_default_engine_runs_kept_packages_and_builds_nothing(tmp_path, monkeypatch):
    """The auto engine (the command line's default) decodes eagerly until an aot engine
    has built the packages its steps need, then through them; it never builds one."""
    from small_models import SHIPPED, small_translator
    from annotated_transformer.data import load_tokenizer
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(engines, "_AOT", {})
    package = StandIn(monkeypatch)
    tr = small_translator(load_tokenizer(SHIPPED / "tokenizer.model"), 0)
    sentences = ["A dog runs.", "Two men are playing chess in a park by the river."]
    fp32 = dict(precision="fp32", say=False)  # "auto" would be bf16 where it is native
    auto = lambda rows: partial(engines.auto, max_rows=rows)
    eager = tr.use(engine=engines.eager, **fp32).translate(sentences, beam_size=2)
    assert tr.use(engine=auto(4), **fp32).translate(sentences, beam_size=2) == eager
    assert tr.decoding.engine == "eager"                            # nothing kept
    assert package.built == [] and package.calls == 0
    greedy = tr.use(engine=engines.eager, **fp32).translate(sentences[:1], beam_size=1)
    tr.use(engine=partial(engines.aot, max_rows=1), **fp32)
    assert tr.translate(sentences[:1], beam_size=1) == greedy
    assert [p.stem.rsplit("-", 1)[1] for p in package.built] == ["few"]
    calls = package.calls
    assert tr.use(engine=auto(4), **fp32).translate(sentences, beam_size=2) == eager
    assert tr.decoding.engine == "aot"                              # 4 rows: "few" kept
    assert package.calls > calls and len(package.built) == 1
    calls = package.calls                    # 2 sentences x 20 beams: "many" not kept
    wide = tr.use(engine=engines.eager, **fp32).translate(sentences, beam_size=20)
    assert tr.use(engine=auto(40), **fp32).translate(sentences, beam_size=20) == wide
    assert package.calls == calls and len(package.built) == 1
    int8 = dict(precision="int8", say=False)
    ours = tr.use(engine=auto(4), **int8).translate(sentences, beam_size=2)
    assert tr.decoding.engine == "eager"                            # not fp32: eager
    assert ours == tr.use(engine=engines.eager, **int8).translate(sentences, beam_size=2)
    assert package.calls == calls
    handle = tr.model.encoder.register_forward_hook(lambda *a: None)   # chapter 13's kind
    try:                                     # a model with hooks decodes eagerly
        assert tr.use(engine=auto(4), **fp32).translate(sentences, beam_size=2) == eager
        assert tr.decoding.engine == "eager"
    finally:
        handle.remove()


def test_translate_looks_nothing_up_once_the_engine_is_chosen(tmp_path, monkeypatch):
    """Every engine decides when the translator is built; `translate` then stamps no
    weights, digests no model and looks in no folder: each of those raises here."""
    from small_models import SHIPPED, small_translator
    from annotated_transformer.data import load_tokenizer
    from annotated_transformer.engines import quantization
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(engines, "_AOT", {})
    monkeypatch.setattr(compiling, "_COMPILED", {})
    eager_step(monkeypatch)                    # no compiling: part 9d's tests compile
    StandIn(monkeypatch)
    sp = load_tokenizer(SHIPPED / "tokenizer.model")
    built = {}
    for name in ("eager", "aot", "auto", "compiled"):        # auto after aot: kept
        tr = small_translator(sp, 0)
        built[name] = tr.use(precision="fp32", engine=engines.ENGINES[name], say=False)
    assert {n: tr.decoding.engine for n, tr in built.items()} == {
        "eager": "eager", "aot": "aot", "auto": "aot", "compiled": "compiled"}

    def forbidden(*args, **kwargs):
        raise AssertionError("looked up while translating")
    for module, name in ((engines, "weights_stamp"), (quantization, "_stamp"),
                         (engines, "aot_package"), (engines, "_kept"),
                         (engines, "compile_dir"), (engines, "load_package"),
                         (engines, "build_package")):
        monkeypatch.setattr(module, name, forbidden)
    monkeypatch.setattr(Path, "glob", forbidden)
    monkeypatch.setattr(Path, "exists", forbidden)
    sentences = ["A dog runs.", "Two men play chess."]
    for name, tr in built.items():
        assert len(tr.translate(sentences, beam_size=2)) == 2, name


def test_another_version_or_setup_names_another_package(tmp_path, monkeypatch):
    """A package is never loaded by another version of the library (its name changes)
    or under another setup (`compile_dir` changes): there it is built anew."""
    model = small_model()
    package = aot_package(model, compiling.compile_dir(tmp_path), "few")
    monkeypatch.setattr(sys.modules["annotated_transformer"], "__version__", "0.0.1")
    assert aot_package(model, compiling.compile_dir(tmp_path), "few") != package
    monkeypatch.undo()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert compiling.compile_dir(tmp_path) != package.parent
    assert aot_package(model, compiling.compile_dir(tmp_path), "few").name == package.name


def test_few_rows_and_many_rows_run_packages_of_their_own(tmp_path, monkeypatch):
    """A step of at most FEW_ROWS rows runs the "few" package, a larger one the "many"
    package, each built once when first needed; a beam search whose batch shrinks below
    the bound moves from one to the other within the decode, with the eager tokens."""
    package = StandIn(monkeypatch)
    monkeypatch.setattr(engines, "FEW_ROWS", 4)
    model, step = small_model(), AotStep(cache_dir=tmp_path)
    kinds = lambda: [p.stem.rsplit("-", 1)[1] for p in package.built]
    static_greedy_decode(model, padded_sources(4), max_len_b=5, step=step)
    assert kinds() == ["few"]
    src = padded_sources(3)                              # 3 sentences × 2 beams: 6 rows
    package.ran.clear()
    ids = static_beam_search(model, src, beam_size=2, max_len_b=5, step=step)[0]
    assert kinds() == ["few", "many"] and step.failed is None
    assert package.ran[0] == "many" and package.ran[-1] == "few"     # 6 rows, then ≤ 4
    assert torch.equal(ids, beam_search(model, src, beam_size=2, max_len_b=5)[0])
    assert aot_package(model, step.folder, "few") != aot_package(model, step.folder, "many")


def test_an_interrupted_build_is_tried_again_and_a_failure_stays_told(tmp_path,
                                                                      monkeypatch):
    """Ctrl-C during a build leaves nothing believed: the next decode builds again. When
    one kind fails and the other loads, `failed` still tells the failure."""
    package = StandIn(monkeypatch)
    monkeypatch.setattr(engines, "FEW_ROWS", 4)
    model, step = small_model(), AotStep(cache_dir=tmp_path)
    real = engines._package_run

    def interrupted(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(engines, "_package_run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        static_greedy_decode(model, padded_sources(2), max_len_b=4, step=step)
    monkeypatch.setattr(engines, "_package_run", real)
    static_greedy_decode(model, padded_sources(2), max_len_b=4, step=step)
    assert [p.stem.rsplit("-", 1)[1] for p in package.built] == ["few"] and package.calls

    def many_fails(model, folder, kind):
        if kind == "many":
            raise RuntimeError("no room for the many-rows package")
        return real(model, folder, kind)
    monkeypatch.setattr(engines, "_package_run", many_fails)
    with pytest.warns(RuntimeWarning, match="no room"):
        static_greedy_decode(model, padded_sources(6), max_len_b=4, step=step)   # many
    static_greedy_decode(model, padded_sources(2), max_len_b=4, step=step)       # few
    assert "no room" in step.why and step.failed is not None


def test_the_few_rows_build_falls_back_to_other_settings(tmp_path, monkeypatch, capfd):
    """Where Inductor cannot build the few-rows package with its own matrix products
    only, the child builds it with the library's allowed too, and says so; where every
    setting fails, the last failure is the build's. Both programs, the step and the
    encoder, are compiled with the same settings and packed into one file."""
    import torch._inductor.package
    model = small_model()
    monkeypatch.setattr(packages, "run_child", lambda code, args, folder, what: (
        packages._build(*args), {"ok": True, "why": "", "keep_s": None})[1])
    tried = []

    def compile_one(program):
        import torch._inductor.config as config
        tried.append(config.max_autotune_gemm_backends)
        assert config.freezing and config.max_autotune       # the few-rows settings
        if config.max_autotune_gemm_backends == "CPP":
            raise RuntimeError("NoValidChoicesError: no template for this product")
        return ["files of one program"]

    def pack(path, files):
        assert sorted(files) == ["encoder", "step"]
        open(path, "w").close()
    monkeypatch.setattr(packages, "_compile", compile_one)
    monkeypatch.setattr(torch._inductor.package, "package_aoti", pack)
    monkeypatch.setattr(packages, "load_package", lambda path: (
        lambda inputs: [eager_run(model, inputs)],
        lambda inputs: encoded(model, inputs)))
    package = aot_package(model, tmp_path, "few")
    packages.build_package(model, package, "few")
    assert tried == ["CPP", "CPP,ATEN", "CPP,ATEN"]      # the step fails, then both build
    assert package.exists() and "trying" in capfd.readouterr().err
    monkeypatch.setattr(packages, "_INDUCTOR", {"few": packages._INDUCTOR["few"][:1]})
    with pytest.raises(RuntimeError, match="NoValidChoicesError"):
        packages.build_package(model, aot_package(model, tmp_path / "b", "few"), "few")


def test_the_package_inputs_follow_the_cache_buffers(tmp_path, monkeypatch):
    """The views handed to the package are made again when the cache grows or drops
    rows, so long decodes and beam searches whose sentences finish apart stay eager's;
    while the buffers stay, a step reuses them."""
    StandIn(monkeypatch)
    model, step = small_model(), AotStep(cache_dir=tmp_path)
    src = padded_sources(3)
    limit = dict(max_len_a=0, max_len_b=40, min_len=40)    # grows 16 → 32 → 64
    assert torch.equal(static_greedy_decode(model, src, step=step, **limit)[0],
                       greedy_decode(model, src, **limit)[0])
    for kw in ({"max_len_b": 12}, {"max_len_b": 12, "alpha": 2.0}):
        assert torch.equal(static_beam_search(model, src, step=step, **kw)[0],
                           beam_search(model, src, **kw)[0])
    cache = static.StaticCache(model, 2, 16, 8)
    token, t = torch.ones(2, 1, dtype=torch.long), torch.tensor([0])
    first = engines._inputs(token, t, cache)
    assert engines._inputs(token, t + 1, cache)[2] is first[2]        # kept
    cache.grow(20)                                         # new self-attention buffers
    grown = engines._inputs(token, t + 1, cache)
    assert grown[2].data_ptr() == cache.self_k[0].data_ptr() and grown[2].size(3) == 32


class Unpacker:
    """PyTorch's package loader as far as files go: it unpacks its program into a new
    folder under TMPDIR (read when it runs, as C++'s getenv does) and deletes it only when
    destroyed; the "encoder" fails to load where `fail` is set."""

    def __init__(self, fail=False):
        self.folders, self.fail = [], fail

    def __call__(self, path, name, *args):
        folder = Path(tempfile.mkdtemp(prefix="aotinductor_", dir=os.environ["TMPDIR"]))
        (folder / f"{name}.wrapper.so").write_text("the program")
        self.folders.append(folder)
        if self.fail and name == "encoder":
            raise RuntimeError("Failed to load")
        return types.SimpleNamespace(run=lambda inputs: [name])


@pytest.mark.parametrize("tmpdir_before", ["/somewhere/else", None])
def test_loading_a_package_leaves_no_files(tmpdir_before, tmp_path, monkeypatch):
    "Unpacked into a folder of `load_package`'s, deleted once loaded or failed."
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # where Python's folders go
    if tmpdir_before is None:
        monkeypatch.delenv("TMPDIR", raising=False)
    else:
        monkeypatch.setenv("TMPDIR", tmpdir_before)
    for fail in (False, True):
        loader = Unpacker(fail)
        monkeypatch.setattr(torch._C._aoti, "AOTIModelPackageLoader", loader)
        try:
            step, encode = packages.load_package(tmp_path / "aot-x-few.pt2")
            assert not fail and step([]) == ["step"]
        except RuntimeError:
            assert fail
        assert len(loader.folders) == 2 and list(tmp_path.iterdir()) == []
        assert all(f.parent.parent == tmp_path for f in loader.folders)
        assert os.environ.get("TMPDIR") == tmpdir_before
