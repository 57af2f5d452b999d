"""Chapter 9b: decoding on a static-shape cache gives chapter 9's tokens, compiled or not."""
import sys
import warnings

import pytest
import torch

from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.formats import PAD_ID
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.static import (CompiledStep, StaticCache, bucket,
                                          static_beam_search, static_greedy_decode)

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
def test_greedy_matches_the_cached_decoder(changes, n):
    model, src = small_model(**changes), padded_sources(n)
    ids, scores = static_greedy_decode(model, src, max_len_b=16)
    ref_ids, ref_scores = greedy_decode(model, src, max_len_b=16)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(scores, ref_scores)


@pytest.mark.parametrize("changes", VARIANTS, ids=["paper", "preln-gelu", "nobias-learned"])
@pytest.mark.parametrize("n", [1, 5])
def test_beam_matches_the_cached_decoder(changes, n):
    model, src = small_model(**changes), padded_sources(n)
    ids, scores = static_beam_search(model, src, max_len_b=16, n_best=2)
    ref_ids, ref_scores = beam_search(model, src, max_len_b=16, n_best=2)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(scores, ref_scores)


@pytest.mark.parametrize("max_len", [24, 32])     # the bucket above the limit, equal to it
def test_a_sentence_at_the_length_limit(max_len):
    "EOS forbidden until the limit: the output fills every position the table has."
    model, src = small_model(max_len=max_len), padded_sources(2, longest=4)
    kw = dict(max_len_a=0, max_len_b=max_len, min_len=max_len)
    ids, _ = static_greedy_decode(model, src, **kw)
    assert ids.size(1) == max_len
    assert torch.equal(ids, greedy_decode(model, src, **kw)[0])
    beams, _ = static_beam_search(model, src, **kw)
    assert beams.size(2) == max_len
    assert torch.equal(beams, beam_search(model, src, **kw)[0])


def test_buffers_are_allocated_once_with_the_bucketed_shapes():
    model = small_model()
    cache = StaticCache(model, 3, bucket(20), bucket(5))
    assert (bucket(20), bucket(5), bucket(16), bucket(17)) == (32, 16, 16, 32)
    assert cache.self_k[0].shape == (3, 4, 32, 8)
    assert cache.cross_v[1].shape == (3, 4, 16, 8) and cache.src_mask.shape == (3, 1, 1, 16)
    assert len(cache.self_v) == model.config.n_layers


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


def test_compiled_step_gives_the_eager_tokens():
    """The smallest case that compiles: one layer 8 wide, one sentence of three tokens,
    one shape (bucket 16 for the source and the output alike), so one graph."""
    if why := compile_unavailable():
        pytest.skip(why)
    model = small_model(n_layers=1, d_model=8, d_ff=16, n_heads=2)
    src, kw = torch.tensor([[5, 6, 7]]), dict(max_len_b=2, min_len=4)   # 5 steps
    step = CompiledStep()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # a failure is reported below
        ids, _ = static_greedy_decode(model, src, step=step, **kw)
    if step.failed is not None:
        pytest.skip(f"torch.compile failed here (no C++ compiler?): {step.failed!r}")
    assert ids.size(1) == 5
    assert torch.equal(ids, greedy_decode(model, src, **kw)[0])


def test_a_failed_compilation_warns_once_and_decodes_eagerly(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler in this test")

    monkeypatch.setattr(torch, "compile", broken)
    model, src = small_model(), padded_sources(3)
    step = CompiledStep()
    with pytest.warns(RuntimeWarning, match="no compiler in this test") as caught:
        ids, _ = static_greedy_decode(model, src, max_len_b=8, step=step)
        beams, _ = static_beam_search(model, src, max_len_b=8, step=step)
    assert len([w for w in caught if "torch.compile" in str(w.message)]) == 1
    assert isinstance(step.failed, RuntimeError)
    assert torch.equal(ids, greedy_decode(model, src, max_len_b=8)[0])
    assert torch.equal(beams, beam_search(model, src, max_len_b=8)[0])
