"""Chapter 8's `evaluate` reads the device once, at the end: it does not check each batch's
ids (which reads them back to the host), and gives the model its mode back."""
import torch

from annotated_transformer import inputs
from annotated_transformer.batching import make_batch
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.training import evaluate


def test_evaluate_reads_no_ids_back_per_batch(monkeypatch):
    torch.manual_seed(0)
    model = make_model(20, 20, TransformerConfig.preset("tiny", d_model=16, n_heads=2))
    batches = [make_batch([([5, 6, 7], [8, 9]), ([4, 5], [6, 7, 8])]) for _ in range(3)]

    def read_back(*args, **kwargs):
        raise AssertionError("evaluate checked a batch's ids")
    monkeypatch.setattr(inputs, "_check_ids", read_back)
    scores = evaluate(model.train(), batches)
    assert model.training and 0 <= scores["acc"] <= 1 and scores["ppl"] >= 1
