"""Chapter 9a: int8 and bfloat16 copies of a model for decoding, and their use by the
translator and the command line.

The int8 copy must hold no float matrix, keep the model's invariants (padding ignored,
cached == uncached decoding) and stay close to the float32 model; the bf16 copy must give,
bit for bit, what autocast over the float32 model gives."""
import pytest
import torch
from torch import nn

from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.multihead import MultiHeadAttention
from annotated_transformer.engines.quantization import (Int8MultiHeadAttention, bf16_weights,
                                                column_major, quantize_int8)
from annotated_transformer.precision import precision_context


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return make_model(40, 40, TransformerConfig.preset(
        "tiny", d_model=32, d_ff=64, n_heads=4, max_len=64)).eval()


@pytest.fixture(scope="module")
def src():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 40, (5, 9), generator=g)
    ids[1, 6:] = 0                                              # padding
    return ids


def test_int8_copy_holds_no_float_matrix(model):
    q = quantize_int8(model)
    assert not any(type(m) is nn.Linear for m in q.modules())
    attn = [m for m in q.modules() if isinstance(m, MultiHeadAttention)]
    assert attn and all(isinstance(m, Int8MultiHeadAttention) for m in attn)
    assert type(model.generator).__name__ == "Generator"        # the original is kept
    assert model.generator.weight is model.src_embed.weight     # tying untouched


def test_int8_is_close_and_keeps_the_invariants(model, src):
    q = quantize_int8(model)
    tgt = src[:, :7]
    with torch.no_grad():
        a, b = model(src, tgt), q(src, tgt)
        assert (a - b).abs().max() < 0.2 and not torch.isnan(b).any()
        padded = torch.cat([src, torch.zeros(5, 3, dtype=src.dtype)], dim=1)
        # padding is masked, but the activations' 8-bit scale is read from the whole
        # batch: padded positions move the numbers at the int8 rounding's scale only
        assert (q(padded, tgt) - b).abs().max() < 0.2
    for search in (greedy_decode, beam_search):
        cached, _ = search(q, src, max_len_b=12)
        uncached, _ = search(q, src, max_len_b=12, use_cache=False)
        assert torch.equal(cached, uncached), search.__name__


def test_bf16_weights_are_autocast_bit_for_bit(model, src):
    b16 = bf16_weights(model)
    assert b16.generator.weight.dtype == torch.bfloat16
    assert model.generator.weight.dtype == torch.float32         # the original is kept
    with torch.no_grad(), precision_context("bf16", "cpu"):
        assert torch.equal(model(src, src[:, :7]), b16(src, src[:, :7]))
        assert torch.equal(greedy_decode(model, src, max_len_b=10)[0],
                           greedy_decode(b16, src, max_len_b=10)[0])


def test_column_major_copy_keeps_values_ties_and_outputs(model, src):
    cols = column_major(model)
    for (name, a), b in zip(model.named_parameters(), cols.parameters()):
        assert torch.equal(a, b), name
        assert b.dim() != 2 or b.t().is_contiguous(), name
        assert a.dim() != 2 or a.is_contiguous(), name               # original kept
    assert cols.generator.weight is cols.src_embed.weight is cols.tgt_embed.weight
    for search in (greedy_decode, beam_search):
        for x in src[:, None]:                                  # one row: the GEMV path
            (a, sa), (b, sb) = search(model, x, max_len_b=10), search(cols, x, max_len_b=10)
            assert torch.equal(a, b) and (sa - sb).abs().max() < 1e-4, search.__name__


def test_an_engine_s_copy_holds_the_weights_it_was_made_with(model):
    """Direct decoding runs the model itself, so it sees weights changed in place (an
    optimiser step) at once; an engine's copy keeps the weights it was made with until
    the engine decides again (`Translator.use`), which copies the new ones."""
    from annotated_transformer.engines import eager
    from annotated_transformer.translator import direct
    before = {p: eager(model, precision=p).model for p in ("fp32", "int8")}
    w, old = model.generator.bias, model.generator.bias[0].item()
    with torch.no_grad():
        w[0] = old + 1.0
    try:
        assert before["fp32"] is not model and before["fp32"].generator.bias[0] == old
        again = eager(model, precision="fp32").model
        assert again.generator.bias[0] == w[0]
        assert eager(model, precision="int8").model is not before["int8"]
        assert direct(model, precision="fp32").model is model
    finally:
        with torch.no_grad():
            w[0] = old


def test_translator_int8_only_on_the_cpu(monkeypatch):
    from annotated_transformer.precision import resolve_precision
    with pytest.raises(ValueError, match="int8 runs on the CPU"):
        resolve_precision("int8", torch.device("meta"), int8=True)


def test_translator_fp32_runs_the_models_hooks():
    """A hook on the model must act on float32 translation: with one set when the eager
    engine decides, the translator decodes with the model itself, not with its
    column-major copy."""
    from pathlib import Path
    from annotated_transformer.engines import eager
    from annotated_transformer.run.pretrained import load_translator
    shipped = Path(__file__).resolve().parents[1] / "models" / "multi30k_en_de"
    fp32 = dict(precision="fp32", engine=eager, say=False)
    translator = load_translator(shipped, device="cpu")
    plain = translator.use(**fp32).translate("A dog runs.", beam_size=1)
    assert translator.decoding.model is not translator.model          # the copy
    boost = translator.sp.piece_to_id("▁Katze")
    favour = lambda module, args, out: out + 100.0 * (torch.arange(out.size(-1)) == boost)
    hook = translator.model.generator.register_forward_hook(favour)
    try:
        hooked = translator.use(**fp32).translate("A dog runs.", beam_size=1)
        assert translator.decoding.model is translator.model
    finally:
        hook.remove()
    assert "Katze" in hooked and hooked != plain
    assert translator.use(**fp32).translate("A dog runs.", beam_size=1) == plain
