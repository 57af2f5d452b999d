"""Parts 9b and 9d: decoding on a static-shape cache gives chapter 9's tokens, compiled or
not; the compiled step's trial, kept verdicts and fallback; the translator's engine."""
import json
import os
import sys
import time
import warnings

import pytest
import torch

from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.formats import PAD_ID
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.engines import compiling
from annotated_transformer.engines.compiling import CompiledStep
from annotated_transformer.engines.static import (StaticCache, bucket, static_beam_search,
                                          static_greedy_decode, static_step)

VARIANTS = [{}, {"norm_first": True, "activation": "gelu"},
            {"bias": False, "learned_pos": True}]
VOCAB = 40


def small_model(seed: int = 0, **changes):
    "A 32-wide random model, its LayerNorm gains and biases perturbed."
    torch.manual_seed(seed)
    config = TransformerConfig.preset("tiny", **{"d_model": 32, "d_ff": 64,
                                                 "n_heads": 4, "max_len": 96, **changes})
    model = make_model(VOCAB, VOCAB, config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def padded_sources(n: int, longest: int = 12, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, longest + 1, (n,), generator=g)
    lengths[0] = longest
    src = torch.full((n, longest), PAD_ID)
    for i, k in enumerate(lengths.tolist()):
        src[i, :k] = torch.randint(3, VOCAB, (k,), generator=g)
    return src


@pytest.mark.parametrize("changes", VARIANTS, ids=["paper", "preln-gelu", "nobias-learned"])
@pytest.mark.parametrize("n", [1, 6])
@pytest.mark.parametrize("fixed", [False, True])
def test_greedy_matches_the_cached_decoder(changes, n, fixed):
    model, src = small_model(**changes), padded_sources(n)
    ids, scores = static_greedy_decode(model, src, max_len_b=16, fixed_shapes=fixed)
    ref_ids, ref_scores = greedy_decode(model, src, max_len_b=16)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(scores, ref_scores)


@pytest.mark.parametrize("changes", VARIANTS, ids=["paper", "preln-gelu", "nobias-learned"])
@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("fixed", [False, True])
def test_beam_matches_the_cached_decoder(changes, n, fixed):
    model, src = small_model(**changes), padded_sources(n)
    ids, scores = static_beam_search(model, src, max_len_b=16, n_best=2,
                                     fixed_shapes=fixed)
    ref_ids, ref_scores = beam_search(model, src, max_len_b=16, n_best=2)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(scores, ref_scores)


@pytest.mark.parametrize("max_len", [24, 32])     # the bucket above the limit, equal to it
@pytest.mark.parametrize("fixed", [False, True])
def test_a_sentence_at_the_length_limit(max_len, fixed):
    "EOS forbidden until the limit: the output fills every position the table has."
    model, src = small_model(max_len=max_len), padded_sources(2, longest=4)
    kw = dict(max_len_a=0, max_len_b=max_len, min_len=max_len, fixed_shapes=fixed)
    ids, _ = static_greedy_decode(model, src, **kw)
    assert ids.size(1) == max_len
    del kw["fixed_shapes"]
    assert torch.equal(ids, greedy_decode(model, src, **kw)[0])
    beams, _ = static_beam_search(model, src, fixed_shapes=fixed, **kw)
    assert beams.size(2) == max_len
    assert torch.equal(beams, beam_search(model, src, **kw)[0])


def test_buffers_are_allocated_once_with_the_bucketed_shapes():
    model = small_model()
    cache = StaticCache(model, 3, bucket(20), bucket(5))
    assert (bucket(20), bucket(5), bucket(16), bucket(17)) == (32, 16, 16, 32)
    assert cache.self_k[0].shape == (3, 4, 32, 8)
    assert cache.cross_v[1].shape == (3, 4, 16, 8) and cache.src_mask.shape == (3, 1, 1, 16)
    assert len(cache.self_v) == model.config.n_layers


class ShapesStep:
    """`static_step`, noting each call's (rows, self-attention length, source rows, mask
    rows); its tokens are (sentences, beams)."""
    def __init__(self, fixed_shapes=None):
        self.seen = []
        if fixed_shapes is not None:
            self.fixed_shapes = fixed_shapes

    def __call__(self, model, token, t, cache):
        k = cache.self_k[0]
        assert k.is_contiguous() and cache.cross_k[0].is_contiguous()
        assert token.numel() == k.size(0) and token.size(0) == cache.cross_k[0].size(0)
        self.seen.append((k.size(0), k.size(2), cache.cross_k[0].size(0),
                          cache.src_mask.size(0)))
        return static_step(model, token, t, cache)


@pytest.mark.parametrize("declared", [None, False, True])
def test_buffers_grow_and_finished_sentences_leave_unless_the_step_fixes_shapes(declared):
    "A step declaring `fixed_shapes` keeps every shape; otherwise rows leave, L doubles."
    model, src = small_model(), padded_sources(5)       # limits: source length + 24
    step = ShapesStep(declared)
    beams, _ = static_beam_search(model, src, max_len_b=24, step=step)
    assert torch.equal(beams, beam_search(model, src, max_len_b=24)[0])
    rows, lengths, source_rows, mask_rows = zip(*step.seen)
    assert source_rows == mask_rows and rows[0] == 5 * 4     # a row per beam,
    assert rows == tuple(4 * r for r in source_rows)    # the source once per sentence
    if declared:
        assert set(step.seen) == {(20, 64, 5, 5)}       # bucket(12 + 24) positions
        return
    assert lengths == tuple(bucket(t + 1) for t in range(len(lengths)))
    assert list(rows) == sorted(rows, reverse=True) and rows[-1] < rows[0]
    greedy = ShapesStep(declared)
    static_greedy_decode(model, src, max_len_b=24, step=greedy)
    assert [s[1] for s in greedy.seen] == [bucket(t + 1) for t in range(len(greedy.seen))]


def compile_unavailable() -> str | None:
    "Why `torch.compile` cannot run here, or None where it may."
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    try:
        from torch._dynamo import is_dynamo_supported
    except ImportError as e:
        return f"torch.compile is unavailable: {e}"
    if not is_dynamo_supported():
        return f"torch.compile does not support Python {sys.version.split()[0]} here"
    return None


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    "A cache folder of the module's own: its trial and compiled code, kept between tests."
    return tmp_path_factory.mktemp("compiled")


def fxgraphs(folder) -> int:
    "How many graphs Inductor has kept under `folder`."
    return sum(1 for p in folder.rglob("*") if p.is_file() and "fxgraph" in p.parts)


def test_compiled_step_gives_the_eager_tokens(kept, monkeypatch):
    """One layer 8 wide, compiled once, for the one shape both searches use (two rows,
    16 positions): a padded batch of two sentences greedily, at their length limit (EOS
    forbidden until then), and one sentence by beam search with two beams; the code
    compiled in this process is kept in the step's folder, beside the trial's."""
    if why := compile_unavailable():
        pytest.skip(why)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)   # put back after
    model = small_model(n_layers=1, d_model=8, d_ff=16, n_heads=2)
    src, step = padded_sources(2), CompiledStep(cache_dir=kept)
    assert (src == PAD_ID).any()
    limit = dict(max_len_a=0, max_len_b=16)
    compiling.compile_trial({}, step.folder)            # what the trial alone keeps
    trial_graphs = fxgraphs(step.folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # a failure is reported below
        ids, _ = static_greedy_decode(model, src, step=step, min_len=16, **limit)
        if "C++ compile error" in repr(step.failed):
            pytest.skip(f"no C++ compiler here: {step.failed!r}")
        assert step.failed is None
        assert ids.size(1) == 16
        assert torch.equal(ids, greedy_decode(model, src, min_len=16, **limit)[0])
        beams, _ = static_beam_search(model, src[:1], beam_size=2, step=step, **limit)
        assert torch.equal(beams, beam_search(model, src[:1], beam_size=2, **limit)[0])
    assert step.failed is None
    verdict = json.loads(next(step.folder.glob("trial-*.json")).read_text())
    assert verdict["ok"] and verdict["setup"]["torch"] == torch.__version__
    assert fxgraphs(step.folder) > trial_graphs > 0        # the caller's graphs, kept


def eager_step(monkeypatch, ok=True, why=""):
    """No compiling in this process (torch.compile hands back the function) and a trial
    that passes without a child process; returns the list of trials run."""
    trials = []
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)   # put back after
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    monkeypatch.setattr(compiling, "_run_trial",
                        lambda options, folder: trials.append(folder) or
                        {"ok": ok, "why": why, "keep_s": None if ok else 0})
    return trials


def test_a_crash_in_the_trial_costs_the_child_and_is_remembered(tmp_path, monkeypatch):
    "A segfault while compiling cannot be caught: the trial's child takes it instead."
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)   # put back after
    monkeypatch.setattr(compiling, "_TRIAL_CODE",
                        "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    model, src = small_model(), padded_sources(3)
    cache = tmp_path / ("a-long-folder-name-" * 8)    # the whole path is told all the same
    step = CompiledStep(cache_dir=cache)
    with pytest.warns(RuntimeWarning, match=rf"SIGSEGV \(kept in {cache}/.*\.json: delete it "
                                            r"to try again\)\); decoding eagerly"):
        ids, _ = static_greedy_decode(model, src, max_len_b=8, step=step)
    assert torch.equal(ids, greedy_decode(model, src, max_len_b=8)[0])
    trials = eager_step(monkeypatch)                # the verdict is read, not re-tried
    with pytest.warns(RuntimeWarning, match="killed by SIGSEGV .kept in .*delete it"):
        static_greedy_decode(model, src, max_len_b=8, step=CompiledStep(cache_dir=cache))
    assert trials == []


def test_a_long_reason_from_the_trial_is_cut_to_one_short_line(tmp_path, monkeypatch):
    "A child's last line of any length is kept as 200 characters of it."
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)   # put back after
    monkeypatch.setattr(compiling, "_TRIAL_CODE", "import sys; sys.exit('x' * 5000)")
    with pytest.warns(RuntimeWarning) as seen:
        static_greedy_decode(small_model(), padded_sources(2), max_len_b=4,
                             step=CompiledStep(cache_dir=tmp_path))
    (message,) = [str(w.message) for w in seen]
    assert "a trial compilation failed: " + "x" * 200 + "); decoding eagerly" in message
    assert "x" * 201 not in message


def test_a_verdict_that_may_change_is_not_kept(tmp_path, monkeypatch):
    "A failure that may pass later (no compiler yet, a timeout) is tried again next time."
    trials = eager_step(monkeypatch, ok=False, why="a trial compilation failed: no cc")
    model, src = small_model(), padded_sources(3)
    for _ in range(2):
        with pytest.warns(RuntimeWarning, match="no cc.; decoding eagerly"):
            static_greedy_decode(model, src, max_len_b=8,
                                 step=CompiledStep(cache_dir=tmp_path))
    assert len(trials) == 2 and not list(tmp_path.rglob("trial-*.json"))


def test_a_later_shape_that_fails_to_compile_goes_eager_other_errors_surface(
        tmp_path, monkeypatch):
    """A compiler error at a new shape (after others compiled): one warning, eager from
    then on, the same tokens. An error that is not the compiler's reaches the caller."""
    from torch._dynamo.exc import BackendCompilerFailed
    eager_step(monkeypatch)
    model, src = small_model(), padded_sources(3)

    def compiles_one_shape(fn, **kw):
        def run(model, token, t, cache):
            if token.numel() != 3:                   # beam search's 12 rows: fails
                raise BackendCompilerFailed(fn, RuntimeError("no kernel for that shape"),
                                            None)
            return fn(model, token, t, cache)
        return run

    monkeypatch.setattr(torch, "compile", compiles_one_shape)
    step = CompiledStep(cache_dir=tmp_path)
    ids, _ = static_greedy_decode(model, src, max_len_b=8, step=step)   # compiled
    assert step.failed is None
    with pytest.warns(RuntimeWarning, match="no kernel for that shape"):
        beams, _ = static_beam_search(model, src, max_len_b=8, step=step)
    assert torch.equal(beams, beam_search(model, src, max_len_b=8)[0])
    assert isinstance(step.failed, BackendCompilerFailed)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        static_greedy_decode(model, src, max_len_b=8, step=CompiledStep(cache_dir=tmp_path))
    from torch._dynamo.exc import TorchRuntimeError      # the call's error, traced

    def bad_input(*a):
        raise TorchRuntimeError("shapes do not match")

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: bad_input)
    with pytest.raises(TorchRuntimeError):
        static_greedy_decode(model, src, max_len_b=8, step=CompiledStep(cache_dir=tmp_path))


def test_a_trial_killed_from_outside_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)   # put back after
    monkeypatch.setattr(compiling, "_TRIAL_CODE",
                        "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    with pytest.raises(RuntimeError, match="killed by SIGTERM$"):
        compiling.compile_trial({}, tmp_path)
    assert not list(tmp_path.glob("trial-*.json"))


@pytest.mark.parametrize("damage", ["{not json", "[1]", "foreign"])
def test_a_damaged_or_foreign_verdict_is_tried_again(tmp_path, monkeypatch, damage):
    trials = eager_step(monkeypatch)
    folder = compiling.compile_dir(tmp_path)
    record = folder / f"trial-{compiling._digest({})}.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"ok": True, "why": "", "options": {}, "setup": {
        **compiling._setup(), "torch": "1.0"}}) if damage == "foreign" else damage)
    model, src = small_model(), padded_sources(3)
    step = CompiledStep(cache_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="trying the compilation again"):
        ids, _ = static_greedy_decode(model, src, max_len_b=8, step=step)
    assert trials == [folder] and step.failed is None
    assert json.loads(record.read_text())["setup"] == compiling._setup()
    assert torch.equal(ids, greedy_decode(model, src, max_len_b=8)[0])


def test_a_damaged_verdict_then_a_failure_that_may_pass_leaves_no_verdict(
        tmp_path, monkeypatch):
    "The damaged file goes; the error does not claim a verdict is kept."
    eager_step(monkeypatch, ok=False, why="a trial compilation failed: no cc")
    record = tmp_path / f"trial-{compiling._digest({})}.json"
    record.write_text("{not json")
    with pytest.warns(RuntimeWarning, match="trying the compilation again"):
        with pytest.raises(RuntimeError, match="no cc$"):
            compiling.compile_trial({}, tmp_path)
    assert not record.exists()


def test_a_timeout_is_believed_for_a_day_then_tried_again(tmp_path, monkeypatch):
    "A slow machine costs one trial a day, not one per process."
    monkeypatch.setattr(compiling, "TRIAL_TIMEOUT", 0.01)
    monkeypatch.setattr(compiling, "_TRIAL_CODE", "import time; time.sleep(30)")
    with pytest.raises(RuntimeError, match=r"ran over 0.01 s \(kept in .* until .*"
                                           r"delete it to try again sooner\)"):
        compiling.compile_trial({}, tmp_path)
    record = next(tmp_path.glob("trial-*.json"))
    until = json.loads(record.read_text())["until"]
    assert until == pytest.approx(time.time() + compiling.TIMEOUT_KEPT, abs=60)
    monkeypatch.setattr(compiling, "_TRIAL_CODE", "pass")        # would pass now
    with pytest.raises(RuntimeError, match="ran over"):          # but is not run
        compiling.compile_trial({}, tmp_path)
    monkeypatch.setattr(time, "time", lambda: until + 1)         # a day later
    monkeypatch.setattr(compiling, "TRIAL_TIMEOUT", 60)
    compiling.compile_trial({}, tmp_path)
    assert json.loads(record.read_text())["ok"]


def test_options_are_json_values_and_match_their_kept_verdict(tmp_path, monkeypatch):
    """A tuple is kept as a list and still matches; the shared step is found again for
    list values; an option JSON cannot hold (a function, NaN) is refused when the step
    is made."""
    trials = eager_step(monkeypatch)
    compiling.compile_trial({"an_option": (8, 16)}, tmp_path)
    compiling.compile_trial({"an_option": [8, 16]}, tmp_path)
    assert len(trials) == 1
    monkeypatch.setattr(compiling, "_COMPILED", {})
    one = compiling.compiled_step(cache_dir=tmp_path, an_option=[8, 16])
    assert compiling.compiled_step(cache_dir=tmp_path, an_option=[8, 16]) is one
    assert one.options == {"an_option": [8, 16]}
    for bad in (print, float("nan")):
        with pytest.raises(TypeError, match="must be JSON values"):
            CompiledStep(cache_dir=tmp_path, an_option=bad)


@pytest.mark.parametrize("until", ["1e12", True, 1e300, "far"])
def test_a_kept_time_that_is_not_a_time_or_too_far_is_tried_again(tmp_path, monkeypatch,
                                                                  until):
    "A time in a string, a boolean, or beyond a day from now (a clock set back)."
    trials = eager_step(monkeypatch)
    record = tmp_path / f"trial-{compiling._digest({})}.json"
    kept = {"ok": False, "why": "ran over", "options": {}, "setup": compiling._setup(),
            "until": time.time() + 10 * compiling.TIMEOUT_KEPT if until == "far" else until}
    record.write_text(json.dumps(kept))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiling.compile_trial({}, tmp_path)                 # tried again: it passes
    assert len(trials) == 1 and json.loads(record.read_text())["ok"]
    assert len(caught) == (0 if until in (1e300, "far") else 1)   # a number: expired


def test_a_failed_compilation_warns_once_and_decodes_eagerly(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler in this test")

    eager_step(monkeypatch)
    monkeypatch.setattr(torch, "compile", broken)
    model, src = small_model(), padded_sources(3)
    step = CompiledStep(cache_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="no compiler in this test") as caught:
        ids, _ = static_greedy_decode(model, src, max_len_b=8, step=step)
        beams, _ = static_beam_search(model, src, max_len_b=8, step=step)
    assert len([w for w in caught if "torch.compile" in str(w.message)]) == 1
    assert isinstance(step.failed, RuntimeError)
    assert torch.equal(ids, greedy_decode(model, src, max_len_b=8)[0])
    assert torch.equal(beams, beam_search(model, src, max_len_b=8)[0])


def test_the_translator_s_compiled_engine(tmp_path, monkeypatch):
    """The compiled engine decodes by part 9b's static search through `CompiledStep`,
    its trial run when the translator decides (compiling itself is tested above); where
    it cannot run, it says why."""
    from small_models import SHIPPED, small_translator
    from annotated_transformer.data import load_tokenizer
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compiling, "_COMPILED", {})
    trials, steps, real = eager_step(monkeypatch), [], compiling.static_step
    monkeypatch.setattr(compiling, "static_step", lambda *a: steps.append(1) or real(*a))
    from annotated_transformer import engines
    tr = small_translator(load_tokenizer(SHIPPED / "tokenizer.model"), 0)
    sentences = ["A dog runs.", "", "Two men are playing chess in a park by the river."]
    for k in (1, 3):
        eager = tr.use(precision="fp32").translate(sentences, beam_size=k)
        tr.use(engine=engines.compiled, say=False)
        assert trials == [compiling.compile_dir(tmp_path)]    # the trial: when it decides
        assert tr.translate(sentences, beam_size=k) == eager
    assert steps and tr.decoding.engine == "compiled"                # one trial, kept
    with pytest.warns(RuntimeWarning, match="compiled engine decodes fp32 on the CPU; "
                                            "int8 on cpu decodes eagerly"):
        tr.use(engine=engines.compiled, precision="int8")
    assert tr.decoding.engine == "eager"


def test_inductor_s_cache_goes_to_the_step_s_folder_unless_the_user_named_one(
        tmp_path, monkeypatch):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    eager_step(monkeypatch)
    model, src = small_model(), padded_sources(2)
    for named, kept in [(None, True), (default_cache_dir(), True), (str(tmp_path), False)]:
        if named:
            monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", named)
        else:
            monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
        step = CompiledStep(cache_dir=tmp_path / "cache")
        static_greedy_decode(model, src, max_len_b=4, step=step)
        expected = step.folder if kept else tmp_path
        assert step.kept_in == expected
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(expected)
