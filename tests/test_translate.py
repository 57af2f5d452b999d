"""Chapter 11's `translate` and `attention_maps`, on a small random model with the shipped
tokenizer: `translate` gives what part 11b's `Translator` gives for the same model, and the
maps are the model's attention weights, shaped and labelled as documented."""
import pytest
import torch

from annotated_transformer.data import load_tokenizer
from annotated_transformer.translator import attention_maps, corpus_bleu, translate

from small_models import SHIPPED, small_translator

SENTENCES = ["A dog runs.", "Two men are talking in a small kitchen near a window.",
             "A girl.", "People walk on a busy street at night."]


@pytest.fixture(scope="module")
def small():
    return small_translator(load_tokenizer(SHIPPED / "tokenizer.model"), seed=0)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translate_equals_the_translator(small, beam_size):
    ours = translate(small.model, small.sp, SENTENCES, beam_size=beam_size, batch_size=3)
    small.use(precision="fp32", say=False)
    assert ours == small.translate(SENTENCES, beam_size=beam_size, batch_size=3)
    assert len(ours) == len(SENTENCES) and all(isinstance(t, str) for t in ours)


def test_translate_keeps_the_order_whatever_the_batches(small):
    one_by_one = [translate(small.model, small.sp, [s])[0] for s in SENTENCES]
    assert translate(small.model, small.sp, SENTENCES, batch_size=2) == one_by_one


def test_attention_maps(small):
    model, sp = small.model, small.sp
    model.train()
    maps = attention_maps(model, sp, source="A dog runs.", target="Ein Hund rennt.")
    assert model.training                                   # the mode it had
    n_src, n_tgt = len(sp.encode("A dog runs.")), len(sp.encode("Ein Hund rennt.")) + 1
    layers, heads = model.config.n_layers, model.config.n_heads
    assert maps["encoder"].shape == (layers, heads, n_src, n_src)
    assert maps["decoder"].shape == (layers, heads, n_tgt, n_tgt)
    assert maps["cross"].shape == (layers, heads, n_tgt, n_src)
    for kind in ("encoder", "decoder", "cross"):
        torch.testing.assert_close(maps[kind].sum(-1), torch.ones(maps[kind].shape[:-1]))
    assert maps["decoder"].triu(1).abs().max() == 0
    assert maps["source"] == sp.encode("A dog runs.", out_type=str)
    assert maps["target"][0] == "<s>" and len(maps["target"]) == n_tgt
    for layer in model.decoder.layers:                      # switched off again
        assert not layer.cross_attn.keep_weights and layer.cross_attn.weights is None


def test_corpus_bleu():
    refs = ["Ein Hund läuft über die Wiese.", "Zwei Männer reden."]
    assert round(corpus_bleu(refs, refs)[0].score, 6) == 100
    with pytest.raises(ValueError, match="one reference per sentence"):
        corpus_bleu(refs, refs[:1])


def test_a_translator_refuses_a_tokenizer_that_pads_otherwise(small):
    from annotated_transformer.model import TransformerConfig, make_model
    from annotated_transformer.translator import Translator
    V = small.sp.get_piece_size()
    config = TransformerConfig.preset("tiny", d_model=16, n_heads=2, pad_id=5)
    with pytest.raises(ValueError, match="pads with 0, .* it pads with 5"):
        Translator(make_model(V, V, config), small.sp, say=False)
    with pytest.raises(ValueError, match=r"vocabularies are \[8000, 8001\]"):
        untied = TransformerConfig.preset("tiny", tie_embeddings=False)
        Translator(make_model(V, V + 1, untied), small.sp, say=False)
