"""Chapter 13's head mask and probes on a small untrained model (seconds, no data)."""
import torch

from annotated_transformer.lab.analysis import (KINDS, attention_modules, control_labels,
                                                head_gradients, head_mask, linear_probe,
                                                mlp_probe, monotonicity, probe_hits)
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.batching import make_batch


def tiny_model():
    torch.manual_seed(0)
    return make_model(40, 40, TransformerConfig.preset("tiny", n_heads=2)).eval()


def test_mask_of_ones_changes_nothing_and_leaves_no_hook():
    model = tiny_model()
    src, tgt = torch.randint(4, 40, (2, 6)), torch.randint(4, 40, (2, 5))
    with torch.no_grad():
        plain = model(src, tgt)
        with head_mask(model, {kind: torch.ones(2, 2) for kind in KINDS}):
            assert torch.equal(model(src, tgt), plain)
    assert all(not m.out_proj._forward_pre_hooks
               for ms in attention_modules(model).values() for m in ms)


def test_masking_a_layer_leaves_the_bias():
    model = tiny_model()
    src, tgt = torch.randint(4, 40, (2, 6)), torch.randint(4, 40, (2, 5))
    mask = torch.ones(3, 2, 2)
    mask[1, 0] = 0                                   # decoder self-attention, layer 1
    bias_only = lambda m, args, out: m.out_proj.bias.expand_as(out)
    with torch.no_grad():
        with head_mask(model, mask):
            masked = model(src, tgt)
        handle = model.decoder.layers[0].self_attn.register_forward_hook(bias_only)
        removed = model(src, tgt)
        handle.remove()
    assert torch.equal(masked, removed)


def test_gradients_do_not_depend_on_the_batch():
    model = tiny_model()
    pairs = [([5, 6, 7, 8], [9, 10]), ([11, 12], [13, 14, 15, 16])]
    both = head_gradients(model, [make_batch(pairs)])
    alone = torch.cat([head_gradients(model, [make_batch([p])]) for p in pairs])
    assert both.shape == (2, 3, 2, 2)
    torch.testing.assert_close(both, alone, atol=1e-6, rtol=1e-4)


def test_monotonicity_and_control_labels():
    n = 5
    paths = torch.stack([torch.eye(n), torch.eye(n).flip(1)]).unsqueeze(0)
    forward, rho = monotonicity(paths, torch.ones(1, n, dtype=torch.bool))
    assert forward.tolist() == [1, 0]
    torch.testing.assert_close(rho, torch.tensor([1.0, -1.0]))
    types = torch.tensor([3, 1, 3, 2, 1, 3])
    control = control_labels(types, torch.tensor([0, 1, 0, 1, 0, 1]), seed=1)
    for t in types.unique():
        assert control[types == t].unique().numel() == 1


def test_probe_hits_mark_each_test_row_and_give_the_probes_accuracy():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 6, generator=g)
    y = (x[:, 0] > 0).long()
    for hidden in (0, 8):
        hits = probe_hits(x[:200], y[:200], x[200:], y[200:], hidden=hidden, steps=50)
        assert hits.shape == (100,) and hits.dtype == torch.bool
        again = probe_hits(x[:200], y[:200], x[200:], y[200:], hidden=hidden, steps=50)
        assert torch.equal(hits, again)                  # the same on every run
    assert linear_probe(x[:200], y[:200], x[200:], y[200:], steps=50) == (
        probe_hits(x[:200], y[:200], x[200:], y[200:], steps=50).float().mean().item())
    assert mlp_probe(x[:200], y[:200], x[200:], y[200:], hidden=8, steps=50) == (
        probe_hits(x[:200], y[:200], x[200:], y[200:], hidden=8, steps=50)
        .float().mean().item())
