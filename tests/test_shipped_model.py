"""The model committed under models/: its files, its size, and the score its card states.

The card's test_2016_flickr sacreBLEU (beam 4, alpha 0.6) is recomputed here from the committed
files and must agree within 0.05."""
import hashlib
import json
import re
from pathlib import Path

import pytest

from annotated_transformer.translator import Translator, corpus_bleu
from annotated_transformer.run.pretrained import load_translator

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models/multi30k_en_de"
pytestmark = pytest.mark.skipif(not (MODEL / "config.json").exists(),
                                reason=f"no shipped model at {MODEL}")


def card_bleu() -> float:
    front = (MODEL / "README.md").read_text(encoding="utf-8").split("---")[1]
    return float(re.search(r"test_2016_flickr_sacrebleu: ([\d.]+)", front).group(1))


def test_files_listed_with_their_hashes_and_small():
    config = json.loads((MODEL / "config.json").read_text())
    listed = config["files"]
    assert {"model.safetensors", "tokenizer.model"} <= set(listed)
    for name, digest in listed.items():
        assert hashlib.sha256((MODEL / name).read_bytes()).hexdigest() == digest, name
    size = sum(f.stat().st_size for f in MODEL.iterdir())
    assert size <= 20 * 2**20, f"models/multi30k_en_de is {size / 2**20:.1f} MiB > 20"


@pytest.fixture(scope="module")
def test_set(multi30k):
    """The committed model on the CPU, test_2016_flickr's sources and references, and its
    float32 translations at the defaults (beam 4, α 0.6: the card's settings)."""
    translator = load_translator(MODEL, device="cpu")
    src = (multi30k / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    ref = (multi30k / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    return translator, src, ref, translator.use(precision="fp32").translate(src)


def test_card_bleu_is_what_the_committed_files_score(test_set):
    _, _, ref, fp32 = test_set
    score, signature = corpus_bleu(fp32, ref)
    print(score, signature)
    assert abs(score.score - card_bleu()) <= 0.05, (score.score, card_bleu())


def test_int8_within_0_3_bleu_of_fp32(test_set):
    """Chapter 9a's int8 copy, through the translator's eager engine: BLEU within 0.3 of
    float32 on the whole test set, and the copy made once, when the engine decided."""
    from annotated_transformer.engines import eager
    translator, src, ref, fp32 = test_set
    fp32 = corpus_bleu(fp32, ref)[0].score
    translator.use(precision="int8", engine=eager, say=False)
    kept = translator.decoding.model
    int8 = corpus_bleu(translator.translate(src), ref)[0].score
    assert abs(int8 - fp32) <= 0.3, (int8, fp32)
    translator.translate(src[:2])
    assert translator.decoding.model is kept and kept is not translator.model
