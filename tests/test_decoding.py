"""Chapter 9's searches on a random model: greedy decoding is a beam of one, either search
leaves the model in the mode it had (after an error too), and the cache is one pair of dicts
per decoder layer."""
import pytest
import torch

from annotated_transformer.decoding import beam_search, greedy_decode, init_cache
from annotated_transformer.formats import PAD_ID
from annotated_transformer.model import TransformerConfig, make_model


def random_model(seed: int = 0):
    torch.manual_seed(seed)
    return make_model(24, 24, TransformerConfig.preset("tiny", d_model=16, n_heads=2))


def sources(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 24, (5, 7), generator=g)
    src[1, 4:], src[3, 2:] = PAD_ID, PAD_ID
    return src


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_decoding_is_a_beam_of_one(use_cache):
    model, src = random_model(), sources()
    tokens, scores = greedy_decode(model, src, max_len_b=12, use_cache=use_cache)
    beam, beam_scores = beam_search(model, src, beam_size=1, alpha=0.0, max_len_b=12)
    n = beam.size(-1)
    assert torch.equal(tokens[:, :n], beam[:, 0]) and (tokens[:, n:] == PAD_ID).all()
    torch.testing.assert_close(scores, beam_scores[:, 0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("search", [greedy_decode, beam_search])
def test_a_search_gives_the_model_its_mode_back(search):
    model = random_model().train()
    model.generator.eval()                     # one module's own mode is kept too
    search(model, sources(), max_len_b=4)
    assert model.training and not model.generator.training
    with pytest.raises(ValueError, match="positional table"):
        search(model, sources(), max_len_b=10_000)
    assert model.training and not model.generator.training


def test_the_cache_has_one_entry_per_decoder_layer():
    model = random_model()
    assert init_cache(model) == [{"self": {}, "cross": {}}] * len(model.decoder.layers)
