"""Export to CTranslate2 (chapter 11d): parity of the engine with our code on small models.

Every variant of the architecture the export maps (the paper's Post-LN, Pre-LN with GELU,
no biases with learned positions) gets the same per-token log-probabilities from the engine
as from `Transformer.forward`, and the same greedy outputs; the shipped model's greedy
translations of test sentences are identical. Skipped where `ctranslate2` is not installed.
"""
import pytest
import torch

ct2 = pytest.importorskip("ctranslate2")

from annotated_transformer.cli import main
from annotated_transformer.data import normalize_line
from annotated_transformer.decoding import greedy_decode, output_ids
from annotated_transformer.exports.ct2 import CT2Translator, export_ctranslate2
from annotated_transformer.formats import BOS_ID, EOS_ID
from annotated_transformer.translator import Translator
from annotated_transformer.run.pretrained import load_translator
from small_models import SHIPPED, VARIANT_IDS, VARIANTS, small_translator


@pytest.mark.parametrize("changes", VARIANTS, ids=VARIANT_IDS)
def test_scores_and_greedy_match(tmp_path, sp, changes):
    translator = small_translator(sp, len(changes), **changes)
    engine = CT2Translator(export_ctranslate2(translator, tmp_path / "ct2"),
                           compute_type="float32")
    gen = torch.Generator().manual_seed(0)
    sources = [torch.randint(4, sp.get_piece_size(), (n,), generator=gen).tolist()
               for n in (3, 7, 12)]
    targets = [torch.randint(4, sp.get_piece_size(), (n,), generator=gen).tolist()
               for n in (5, 2, 9)]
    pieces = lambda ids: [sp.id_to_piece(i) for i in ids]
    scored = engine.engine.score_batch([pieces(s) for s in sources],
                                       [pieces(t) for t in targets])
    model = translator.model
    for src, tgt, theirs in zip(sources, targets, scored):
        with torch.no_grad():
            logp = model(torch.tensor([src]), torch.tensor([[BOS_ID] + tgt]))[0]
        ours = logp.gather(1, torch.tensor(tgt + [EOS_ID])[:, None])[:, 0]
        assert torch.allclose(ours, torch.tensor(theirs.log_probs), atol=1e-4, rtol=0)
        found = engine.engine.translate_batch([pieces(src)], beam_size=1,
                                              max_decoding_length=len(src) + 20,
                                              min_decoding_length=0)[0]
        tokens, _ = greedy_decode(model, torch.tensor([src]), max_len_b=20)
        assert [sp.piece_to_id(p) for p in found.hypotheses[0]] == output_ids(tokens)[0]


def test_shipped_model_greedy_identical(multi30k, tmp_path):
    translator = load_translator(SHIPPED, device="cpu", precision="fp32")
    out = tmp_path / "ct2"
    assert main(["export", "--model-dir", str(SHIPPED), "--to", "ctranslate2",
                 str(out)]) == 0
    sources = (multi30k / "test_2016_flickr.en").read_text().splitlines()[:30]
    sources = [normalize_line(s) for s in sources] + [""]
    ours = translator.translate(sources, beam_size=1)   # fp32, as CT2's
    assert CT2Translator(out).translate(sources, beam_size=1) == ours
    assert ours[-1] == ""


def test_export_leaves_the_model_alone(tmp_path, sp):
    translator = small_translator(sp, 0)
    before = {k: v.clone() for k, v in translator.model.state_dict().items()}
    for quantization in (None, "int8", "bfloat16"):
        export_ctranslate2(translator, tmp_path / str(quantization),
                           quantization=quantization)
    for k, v in translator.model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_export_refuses_clearly(tmp_path, sp, capsys):
    translator = small_translator(sp, 0)
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError, match="force"):
        export_ctranslate2(translator, tmp_path / "taken")
    with pytest.raises(ValueError, match="quantization must be one of"):
        export_ctranslate2(translator, tmp_path / "x", quantization="int3")
    capsys.readouterr()
    assert main(["export", "--model-dir", str(tmp_path / "missing"), "--to",
                 "ctranslate2", str(tmp_path / "y")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"annotated-transformer: error: {tmp_path / 'missing'}: "
                          "no such model directory") and err.count("\n") == 1, err
    assert not (tmp_path / "y").exists()                 # nothing written


def test_a_failed_export_leaves_nothing_and_touches_no_neighbour(tmp_path, sp,
                                                                 monkeypatch):
    "The engine's converter fails half-way: no folder is left, and out.tmp is not ours."
    translator = small_translator(sp, 0)
    (tmp_path / "out.tmp").mkdir()                      # a user's folder of that name
    (tmp_path / "out.tmp" / "keep.txt").write_text("mine")
    real = ct2.converters.Converter.convert

    def half(self, output_dir, *args, **kwargs):
        real(self, output_dir, *args, **kwargs)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(ct2.converters.Converter, "convert", half)
    with pytest.raises(OSError):
        export_ctranslate2(translator, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tmp"]
    assert (tmp_path / "out.tmp" / "keep.txt").read_text() == "mine"


def test_each_sentence_keeps_its_own_length_limit(tmp_path, sp):
    """CTranslate2 takes one length limit per call; a short sentence translated beside a
    long one still stops at its own (its length + max_len_b), as `Translator`'s do."""
    translator = small_translator(sp, 0)            # untrained: it rarely ends early
    engine = CT2Translator(export_ctranslate2(translator, tmp_path / "ct2"),
                           compute_type="float32")
    short, long = "a dog", " ".join(["a man rides a red bicycle down the street"] * 3)
    for beam in (1, 4):
        alone = engine.translate([short], beam_size=beam, max_len_b=5)
        both = engine.translate([short, long], beam_size=beam, max_len_b=5)
        assert both[0] == alone[0], beam
        assert len(sp.encode(both[0])) <= len(sp.encode(short)) + 5, beam
