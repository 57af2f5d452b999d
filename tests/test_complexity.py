"""Tests of annotated_transformer.lab.complexity (chapter 12) beyond the chapter's own checks."""
import pytest
import torch

from annotated_transformer.attention import attention
from annotated_transformer.lab.complexity import (ConvLayer, LocalSelfAttention,
                                                  RecurrentLayer, SelfAttentionLayer,
                                                  fit_exponent, graph_depth,
                                                  restricted_attention, saved_bytes)


def band(n: int, r: int) -> torch.Tensor:
    "(n, n) bool: query i may see keys i - r//2 .. i - r//2 + r - 1."
    i = torch.arange(n)
    offset = i[None, :] - i[:, None]                  # key minus query
    return (offset >= -(r // 2)) & (offset < r - r // 2)


@pytest.mark.parametrize("n, r", [(1, 1), (5, 4), (16, 4), (17, 6), (30, 7), (9, 64)])
def test_restricted_attention_is_banded_attention(n, r):
    torch.manual_seed(n * 100 + r)
    q, k, v = torch.randn(3, 2, 3, n, 5, dtype=torch.float64)
    torch.testing.assert_close(restricted_attention(q, k, v, r),
                               attention(q, k, v, mask=band(n, r))[0])


def test_restricted_attention_gradient_stays_in_the_window():
    n, r = 20, 5
    k = torch.randn(1, n, 4, dtype=torch.float64, requires_grad=True)
    out = restricted_attention(torch.randn(1, n, 4, dtype=torch.float64), k, k, r)
    out[0, 10].sum().backward()
    touched = k.grad[0].abs().sum(-1) > 0
    assert touched.tolist() == band(n, r)[10].tolist()


def test_layers_keep_the_shape_for_odd_and_even_kernels():
    x = torch.randn(2, 11, 16)
    for layer in [SelfAttentionLayer(16, 2), SelfAttentionLayer(16, 2, r=4),
                  RecurrentLayer(16), ConvLayer(16, 4), ConvLayer(16, 3, dilation=3),
                  ConvLayer(16, 2, causal=True), ConvLayer(16, 5, separable=True)]:
        assert layer(x).shape == x.shape


@pytest.mark.parametrize("given", ["mask", "cache", "both"])
def test_local_attention_refuses_a_mask_or_a_cache(given):
    """Each of the two alone is refused (the message names both); without them the same
    call works, so the refusal comes from the argument, not from the call."""
    layer, x = LocalSelfAttention(8, 2, r=3), torch.randn(1, 4, 8)
    assert layer(query=x, key=x, value=x).shape == x.shape
    extra = {"mask": {"mask": torch.ones(1, 4, 4, dtype=torch.bool)},
             "cache": {"cache": {}},
             "both": {"mask": torch.ones(1, 4, 4, dtype=torch.bool), "cache": {}}}[given]
    with pytest.raises(ValueError) as e:
        layer(query=x, key=x, value=x, **extra)
    assert str(e.value) == "LocalSelfAttention takes neither a mask nor a cache"


def test_graph_depth_of_a_long_chain_needs_no_recursion():
    x = torch.randn(2, requires_grad=True)
    y = x
    for _ in range(5000):
        y = y * 1.0001
    assert graph_depth(y) == 5001


def test_saved_bytes_grows_linearly_for_the_lstm():
    layer = RecurrentLayer(8)
    small, large = (saved_bytes(layer, torch.randn(1, n, 8)) for n in (1000, 4000))
    assert abs(fit_exponent([1000, 4000], [small, large]) - 1) < 0.05


def test_fused_attention_is_the_explicit_one_without_the_kept_weights():
    """fused=True gives the explicit layer's outputs and gradients with the same weights,
    keeps memory linear in n (the explicit form keeps h·n² weights), and refuses r."""
    torch.manual_seed(0)
    explicit, fused = SelfAttentionLayer(32, 2), SelfAttentionLayer(32, 2, fused=True)
    fused.load_state_dict(explicit.state_dict())
    x = torch.randn(2, 9, 32, dtype=torch.float64, requires_grad=True)
    grads = []
    for layer in (explicit.double(), fused.double()):
        x.grad = None
        y = layer(x)
        y.pow(2).sum().backward()
        grads.append((y.detach(), x.grad.clone()))
    torch.testing.assert_close(grads[1], grads[0])
    kept = {name: [saved_bytes(layer.float(), torch.randn(1, n, 32)) for n in (256, 1024)]
            for name, layer in (("explicit", explicit), ("fused", fused))}
    assert fit_exponent([256, 1024], kept["explicit"]) > 1.5
    assert abs(fit_exponent([256, 1024], kept["fused"]) - 1) < 0.05
    with pytest.raises(ValueError, match="fused=True is for full attention"):
        SelfAttentionLayer(32, 2, r=4, fused=True)
