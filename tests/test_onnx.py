"""Export to ONNX (part 11e): onnxruntime computes what our code computes.

Small models of every architecture variant the export must carry (the paper's Post-LN,
Pre-LN with GELU, no biases with learned positions) give the same per-token
log-probabilities through the two exported graphs as through `Transformer.forward`, and the
same greedy outputs, batched with padding; weights that float16 holds exactly are stored in
16 bits, which halves the graphs without changing what they compute. On the shipped model,
exported by the command line: log-probabilities within 1e-4 on test pairs, greedy
translations identical on the whole test set, and the int8 graphs within 0.5 BLEU. Skipped where onnxruntime is not installed.
"""
import shutil

import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from annotated_transformer.cli import main
from annotated_transformer.data import normalize_line
from annotated_transformer.decoding import greedy_decode, output_ids
from annotated_transformer.exports.onnx import (ONNX_FILES, OnnxTranslator, _exact_halves,
                                        _onnx_graphs, _onnx_greedy, export_onnx,
                                        onnx_log_probs)
from annotated_transformer.formats import BOS_ID, PAD_ID
from annotated_transformer.translator import Translator, TruncationWarning, corpus_bleu
from annotated_transformer.run.pretrained import load_translator
from small_models import SHIPPED, VARIANT_IDS, VARIANTS, small_translator


@pytest.fixture(scope="module")
def exported(tmp_path_factory, sp):
    """`exported(variant)`: that variant's small translator and its ONNX folder, exported
    once for the module (an export takes seconds)."""
    made = {}

    def get(variant: str):
        if variant not in made:
            changes = VARIANTS[VARIANT_IDS.index(variant)]
            translator = small_translator(sp, len(changes), **changes)
            folder = export_onnx(translator, tmp_path_factory.mktemp(variant) / "onnx")
            made[variant] = translator, folder
        return made[variant]
    return get


@pytest.mark.parametrize("variant", VARIANT_IDS)
def test_scores_and_greedy_match(exported, sp, variant):
    translator, folder = exported(variant)
    model, engine = translator.model, OnnxTranslator(folder)
    gen = torch.Generator().manual_seed(0)
    sources = [torch.randint(4, sp.get_piece_size(), (n,), generator=gen).tolist()
               for n in (3, 7, 12)]
    targets = [torch.randint(4, sp.get_piece_size(), (n,), generator=gen).tolist()
               for n in (5, 2, 9)]
    for src, tgt in zip(sources, targets):
        with torch.no_grad():
            logp = model(torch.tensor([src]), torch.tensor([[BOS_ID] + tgt]))[0]
        theirs = torch.from_numpy(onnx_log_probs(engine, src, tgt))
        assert torch.allclose(logp, theirs, atol=1e-4, rtol=0)
    # the three sources as one padded batch, 20 steps at most
    found = _onnx_greedy(engine, sources, max_len_b=20)
    for src, theirs in zip(sources, found):
        tokens, _ = greedy_decode(model, torch.tensor([src]), max_len_b=20)
        assert theirs == output_ids(tokens)[0]


@pytest.fixture(scope="module")
def replaced(tmp_path_factory, sp):
    """A model that rates padding and BOS highest, exported while in training mode, with
    `force`, over a folder that holds an older export: the translator, the folder, and
    whether the model was still in training mode after the export (it is left in eval)."""
    translator = small_translator(sp, 5)
    with torch.no_grad():
        translator.model.generator.bias[[PAD_ID, BOS_ID]] += 50.0
    folder = tmp_path_factory.mktemp("replaced")
    (folder / "model.bin").write_text("an older export")
    translator.model.train()
    export_onnx(translator, folder, force=True)
    training = translator.model.training
    translator.model.eval()
    return translator, folder, training


def test_greedy_never_picks_padding_or_bos(replaced):
    """A model that rates padding and BOS highest: both searches skip them alike."""
    translator, folder, _ = replaced
    engine = OnnxTranslator(folder)
    sources = [[5, 6, 7, 8], [9, 10]]
    for src, theirs in zip(sources, _onnx_greedy(engine, sources, max_len_b=6)):
        tokens, _ = greedy_decode(translator.model, torch.tensor([src]), max_len_b=6)
        assert theirs == output_ids(tokens)[0] and PAD_ID not in theirs


def test_16_bit_constants_change_no_number_and_halve_the_graphs(tmp_path, sp, exported):
    """Weights rounded to float16 (as the shipped model's are): the graphs with their
    constants in 16 bits give bit-for-bit the outputs of the float32 graphs, at under 60% of
    their size. The graphs of a model with float32 weights barely shrink."""
    np, ort = pytest.importorskip("numpy"), pytest.importorskip("onnxruntime")
    _, paper = exported("paper")
    shutil.copytree(paper, tmp_path / "float32")                # its float32 weights
    model = small_translator(sp, 0).model                      # the same model, rounded
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    (tmp_path / "rounded").mkdir()
    graphs = {"rounded": _onnx_graphs(model, tmp_path / "rounded")}
    shutil.copytree(tmp_path / "rounded", tmp_path / "half")    # the same graphs, halved below
    graphs["half"] = graphs["rounded"]
    size = lambda d: sum((tmp_path / d / f).stat().st_size for f in ONNX_FILES)
    before = size("float32")
    for d in ("float32", "half"):
        for name in ONNX_FILES:
            _exact_halves(tmp_path / d / name)
    assert size("half") < 0.6 * size("rounded")
    assert size("float32") > 0.9 * before
    src, outputs = np.array([[5, 6, 7, 8, 9]]), {}
    for d in ("rounded", "half"):
        enc, step = (ort.InferenceSession(str(tmp_path / d / f)) for f in ONNX_FILES)
        cross = enc.run(None, {"src": src})
        past = [np.zeros_like(c[:, :, :0]) for c in cross]
        feeds = dict(zip(graphs[d]["decoder_step"]["inputs"],
                         [np.array([[BOS_ID]]), (src != PAD_ID)[:, None], *past, *cross]))
        outputs[d] = cross + step.run(None, feeds)
    assert len(outputs["half"]) == len(outputs["rounded"])
    for a, b in zip(outputs["rounded"], outputs["half"]):
        assert np.array_equal(a, b)


def test_export_refuses_clearly_and_replaces_whole(tmp_path, replaced):
    translator, folder, training = replaced
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "model.bin").write_text("an older export")
    with pytest.raises(FileExistsError, match="force"):
        export_onnx(translator, taken)
    assert [p.name for p in taken.iterdir()] == ["model.bin"]
    with pytest.raises(ValueError, match="quantization must be None"):
        export_onnx(translator, tmp_path / "x", quantization="int4")
    assert not (tmp_path / "x").exists()
    # the fixture's export with force replaced an older one whole
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [*ONNX_FILES, "onnx.json", "tokenizer.model"])
    assert training                                     # the caller's model untouched
    engine = OnnxTranslator(folder)
    with pytest.raises(ValueError, match="positional table"), \
            pytest.warns(TruncationWarning):        # the source is cut first, as ours
        engine.translate(["a b c"], max_len_b=200)
    assert engine.translate("") == ""


@pytest.fixture(scope="module")
def shipped_onnx(tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx") / "float32"
    assert main(["export", "--model-dir", str(SHIPPED), "--to", "onnx", str(out)]) == 0
    return out


def test_shipped_model_log_probs_within_1e4(multi30k, shipped_onnx, sp):
    translator = load_translator(SHIPPED, device="cpu")
    engine = OnnxTranslator(shipped_onnx)
    src = (multi30k / "test_2016_flickr.en").read_text().splitlines()[:50]
    ref = (multi30k / "test_2016_flickr.de").read_text().splitlines()[:50]
    worst = 0.0
    for s, t in zip(src, ref):
        s, t = sp.encode(normalize_line(s)), sp.encode(normalize_line(t))
        with torch.no_grad():
            ours = translator.model(torch.tensor([s]), torch.tensor([[BOS_ID] + t]))[0]
        theirs = torch.from_numpy(onnx_log_probs(engine, s, t))
        worst = max(worst, (ours - theirs).abs().max().item())
    assert worst < 1e-4, worst


def test_shipped_model_greedy_identical_and_int8_bleu(multi30k, shipped_onnx, tmp_path):
    translator = load_translator(SHIPPED, device="cpu", precision="fp32")
    src = (multi30k / "test_2016_flickr.en").read_text().splitlines()
    ref = (multi30k / "test_2016_flickr.de").read_text().splitlines()
    ours = translator.translate(src + [""], beam_size=1)
    theirs = OnnxTranslator(shipped_onnx).translate(src + [""])
    assert theirs == ours and theirs[-1] == ""
    int8 = tmp_path / "int8"
    assert main(["export", "--model-dir", str(SHIPPED), "--to", "onnx", str(int8),
                 "--quantization", "int8"]) == 0
    size = lambda d: sum((d / f).stat().st_size for f in ONNX_FILES)
    # 8-bit matrices against the float32 graphs' 16-bit ones (`_exact_halves`); what the
    # quantiser leaves (positional tables, biases, norms, fused cross-attention) is in both
    assert size(int8) < 0.7 * size(shipped_onnx)
    bleu = [corpus_bleu(h, ref)[0].score
            for h in (theirs[:-1], OnnxTranslator(int8).translate(src))]
    assert abs(bleu[0] - bleu[1]) <= 0.5, bleu
