"""Small translators for the export tests (CTranslate2 and ONNX): every architecture variant
an export must carry, with random LayerNorm gains and biases so that nothing is trivial."""
from pathlib import Path

import torch

from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.translator import Translator

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "models" / "multi30k_en_de"
VARIANTS = [{}, {"norm_first": True, "activation": "gelu"},
            {"bias": False, "learned_pos": True}]
VARIANT_IDS = ["paper", "preln-gelu", "nobias-learned"]


def small_translator(sp, seed: int, **changes) -> Translator:
    "A 32-wide model with the shipped tokenizer `sp`, its vectors perturbed."
    torch.manual_seed(seed)
    vocab = sp.get_piece_size()
    config = TransformerConfig.preset("tiny", d_model=32, d_ff=64, n_heads=4, max_len=96,
                                      **changes)
    model = make_model(vocab, vocab, config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return Translator(model, sp)
