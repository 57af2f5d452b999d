"""Tests of annotated_transformer.data (chapter 10): loading, errors, cleaning, tokenizer.

Offline by construction: the hub is switched off before `datasets` is imported, and the tests that
load data block every socket, so a test that tried the network would fail instead of waiting.
"""
import os

os.environ["HF_HUB_OFFLINE"] = "1"       # before datasets / huggingface_hub read them
os.environ["HF_DATASETS_OFFLINE"] = "1"

import importlib.util
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")
spm = pytest.importorskip("sentencepiece")

from annotated_transformer.data import (MULTI30K_ENV, MULTI30K_HUB_ENV, MULTI30K_SPLITS,
                                        decode_ids, encode_text, load_multi30k,
                                        load_tokenizer, multi30k_dir, normalize_line,
                                        to_pairs, train_tokenizer)
from annotated_transformer.formats import BOS_ID, EOS_ID, PAD_ID, SPECIAL_PIECES, UNK_ID


@pytest.fixture
def no_network(monkeypatch):
    "Every attempt to open a connection or resolve a name is recorded and fails at once."
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network access attempted in a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


@pytest.fixture
def tiny_dir(tmp_path, monkeypatch):
    "A Multi30k-shaped folder of two-line files, with the real files' whitespace quirks."
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    en = " A dog  runs. \nTwo men talk.\n"
    de = "Ein Hund rennt.\nZwei\u00a0Männer\treden. \n"
    for stem in MULTI30K_SPLITS.values():
        (tmp_path / f"{stem}.en").write_text(en, encoding="utf-8")
        (tmp_path / f"{stem}.de").write_text(de, encoding="utf-8")
    return tmp_path


# --- import without the extras --------------------------------------------------------------

def test_import_needs_only_torch():
    code = ("import sys\n"
            "sys.modules['datasets'] = sys.modules['sentencepiece'] = None  # not installed\n"
            "import annotated_transformer, annotated_transformer.data as d\n"
            "assert d.PAD_ID == 0 and callable(d.load_multi30k)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# --- cleaning ---------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, clean", [
    ("  A dog runs. ", "A dog runs."),
    ("Nummer\u00a06", "Nummer 6"),
    ("in einer \tWasserfontäne.", "in einer Wasserfontäne."),
    ("a\u200b man", "a man"),
    ("two  spaces", "two spaces"),
    ("", ""),
])
def test_normalize_line(raw, clean):
    assert normalize_line(raw) == clean
    assert normalize_line(clean) == clean


# --- where the data is ------------------------------------------------------------------------

def test_folder_precedence(tmp_path, monkeypatch):
    a, b, c = (tmp_path / n for n in "abc")
    for p in (a, b, c):
        p.mkdir()
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    assert multi30k_dir() is None
    assert multi30k_dir(default=tmp_path / "absent") is None
    assert multi30k_dir(default=c) == c
    monkeypatch.setenv(MULTI30K_ENV, str(b))
    assert multi30k_dir(default=c) == b
    assert multi30k_dir(a, default=c) == a
    monkeypatch.setenv(MULTI30K_ENV, str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match=r"absent.*\$MULTI30K_DIR"):
        multi30k_dir(default=c)
    with pytest.raises(FileNotFoundError, match="from the argument"):
        multi30k_dir(tmp_path / "also_absent")


# --- local loading and its errors ----------------------------------------------------------------

def test_local_loading(tiny_dir, no_network):
    ds = load_multi30k(tiny_dir)
    assert list(ds) == ["train", "validation", "test"]
    for split in ds.values():
        assert split.column_names == ["en", "de"]
        assert split["en"][:] == ["A dog runs.", "Two men talk."]
        assert split["de"][:] == ["Ein Hund rennt.", "Zwei Männer reden."]
    assert not no_network


def test_env_var_is_used(tiny_dir, monkeypatch, no_network):
    monkeypatch.setenv(MULTI30K_ENV, str(tiny_dir))
    assert load_multi30k(splits=("validation",))["validation"].num_rows == 2


def test_missing_files_are_named(tiny_dir):
    (tiny_dir / "val.de").unlink()
    (tiny_dir / "test_2016_flickr.en").unlink()
    with pytest.raises(FileNotFoundError) as e:
        load_multi30k(tiny_dir)
    assert "2 file(s) missing" in str(e.value)
    assert str(tiny_dir / "val.de") in str(e.value)
    assert str(tiny_dir / "test_2016_flickr.en") in str(e.value)
    # a split that is complete still loads
    assert load_multi30k(tiny_dir, splits=("train",))["train"].num_rows == 2


def test_misaligned_files_name_files_and_counts(tiny_dir):
    (tiny_dir / "train.de").write_text("Ein Hund rennt.\n", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        load_multi30k(tiny_dir)
    msg = str(e.value)
    assert "'train'" in msg
    assert f"{tiny_dir / 'train.en'} has 2" in msg and f"{tiny_dir / 'train.de'} has 1" in msg


def test_bad_arguments(tiny_dir, no_network):
    with pytest.raises(ValueError, match="unknown split"):
        load_multi30k(tiny_dir, splits=("dev",))
    with pytest.raises(ValueError, match="only en and de"):
        load_multi30k(langs=("en", "fr"))  # no folder: the hub copy, which has no French


# --- the hub stays off --------------------------------------------------------------------------

def test_hub_is_offline(monkeypatch, no_network):
    assert datasets.config.HF_HUB_OFFLINE, "HF_HUB_OFFLINE must be set before datasets is imported"
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    monkeypatch.delenv(MULTI30K_HUB_ENV, raising=False)
    t0 = time.perf_counter()
    with pytest.raises(ConnectionError, match=MULTI30K_ENV):
        load_multi30k()  # no folder anywhere: this would be the hub
    assert time.perf_counter() - t0 < 10
    assert not no_network, f"tried the network: {no_network}"


def test_hub_path_normalises_and_selects(monkeypatch):
    "The Colab path, with `load_dataset` replaced by a stand-in for the hub copy."
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    monkeypatch.delenv(MULTI30K_HUB_ENV, raising=False)
    row = {"en": [" A dog  runs. "], "de": ["Ein\u00a0Hund rennt.\t"]}
    fake = datasets.DatasetDict({s: datasets.Dataset.from_dict(row)
                                 for s in ("train", "validation", "test")})
    asked = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: asked.append(a) or fake)
    ds = load_multi30k(splits=("train", "test"))
    assert asked == [("bentrevett/multi30k",)]
    assert list(ds) == ["train", "test"]
    assert ds["test"][0] == {"en": "A dog runs.", "de": "Ein Hund rennt."}
    assert load_multi30k(langs=("de",))["validation"].column_names == ["de"]


def test_hub_id_from_the_environment(monkeypatch):
    "`$AT_MULTI30K_HUB`, read at call time, replaces the hub id in the same call."
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    monkeypatch.setenv(MULTI30K_HUB_ENV, "someone/multi30k-copy")
    one_row = datasets.Dataset.from_dict({"en": ["a"], "de": ["b"]})
    fake = datasets.DatasetDict({s: one_row for s in ("train", "validation", "test")})
    asked = []
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda *a, **k: asked.append(a) or fake)
    load_multi30k(splits=("test",))
    assert asked == [("someone/multi30k-copy",)]


def load_standin_builder():
    "tests/make_hub_standin.py, the script the fresh-runtime stage runs, as a module."
    spec = importlib.util.spec_from_file_location(
        "make_hub_standin", Path(__file__).with_name("make_hub_standin.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def text_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]  # files end with a newline


def test_hub_layout_folder_offline(multi30k, tmp_path, monkeypatch, no_network, real):
    """The hub's code path run offline on a folder in the hub's layout (train.jsonl,
    val.jsonl, test.jsonl built from the text files): the same splits, columns and
    sentences as the text files."""
    assert datasets.config.HF_DATASETS_OFFLINE
    hub = load_standin_builder().make_hub_standin(multi30k, tmp_path / "hub")
    assert sorted(p.name for p in hub.iterdir()) == ["test.jsonl", "train.jsonl",
                                                      "val.jsonl"]
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    monkeypatch.setenv(MULTI30K_HUB_ENV, str(hub))
    assert multi30k_dir() is None                   # no local folder: the hub branch
    ds = load_multi30k()
    assert {s: ds[s].num_rows for s in ds} == {"train": 29000, "validation": 1014,
                                              "test": 1000}
    assert list(ds) == list(real)
    assert all(ds[s].column_names == ["en", "de"] for s in ds)
    for split, stem in MULTI30K_SPLITS.items():
        for lang in ("en", "de"):
            lines = text_lines(multi30k / f"{stem}.{lang}")
            col = ds[split][lang]
            assert col[0] == normalize_line(lines[0])
            assert col[-1] == normalize_line(lines[-1])
            assert col[:] == real[split][lang][:], (split, lang)  # as from the files
    assert load_multi30k(langs=("de",), splits=("test",))["test"].column_names == ["de"]
    assert not no_network


# --- the real files -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real(multi30k):
    "The local files, loaded (tests/conftest.py: skipped without them)."
    return load_multi30k(multi30k)


def test_real_files(real):
    assert {s: real[s].num_rows for s in real} == {"train": 29000, "validation": 1014,
                                                  "test": 1000}
    # line 7366 of train.de has a TAB and surrounding spaces; no-break spaces are gone
    assert real["train"][7365]["de"].endswith("spielen in einer Wasserfontäne.\"")
    for split in real.values():
        for lang in ("en", "de"):
            assert all(s and s == s.strip() and "\u00a0" not in s and "  " not in s
                       for s in split[lang])


@pytest.fixture(scope="module")
def sp(real, tmp_path_factory):
    return load_tokenizer(train_tokenizer(real, tmp_path_factory.mktemp("spm"), vocab_size=8000))


def test_special_ids(sp):
    assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id()) == (0, 1, 2, 3)
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert [sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert sp.get_piece_size() == 8000


def test_round_trip(sp, real):
    sentences = real["validation"]["de"][:20] + real["test"]["en"][:20]
    encoded = encode_text(sp, sentences)
    assert all(ids[0] == BOS_ID and ids[-1] == EOS_ID for ids in encoded)
    assert [decode_ids(sp, ids) for ids in encoded] == sentences
    one = encode_text(sp, sentences[0])
    assert isinstance(one[0], int) and decode_ids(sp, one + [5, 6, PAD_ID]) == sentences[0]
    bare = encode_text(sp, sentences[0], bos=False, eos=False)
    assert bare == one[1:-1] and decode_ids(sp, bare) == sentences[0]
    torch = pytest.importorskip("torch")
    assert decode_ids(sp, torch.tensor(one + [PAD_ID] * 3)) == sentences[0]


def test_pairs_direction(sp, real):
    val = real["validation"].select(range(5))
    en_de, de_en = to_pairs(val, sp), to_pairs(val, sp, src="de", tgt="en")
    assert len(en_de) == 5 and all(p == q[::-1] for p, q in zip(en_de, de_en))
    # bare pieces: the training chapter's make_batch adds BOS and EOS itself
    specials = {PAD_ID, BOS_ID, EOS_ID, UNK_ID}
    assert not any(specials & set(ids) for pair in en_de for ids in pair)
    assert decode_ids(sp, en_de[0][0]) == val[0]["en"]
    assert decode_ids(sp, en_de[0][1]) == val[0]["de"]


def test_tokenizer_sees_only_train(real, tmp_path):
    unseen = datasets.Dataset.from_dict({"en": ["Жук"] * 50, "de": ["Жук"] * 50})
    dd = datasets.DatasetDict({"train": real["train"].select(range(3000)), "validation": unseen})
    sp = load_tokenizer(train_tokenizer(dd, tmp_path, vocab_size=500))
    assert UNK_ID in sp.encode("Жук")


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_tokenizer_files_do_not_depend_on_their_folder(real, tmp_path, model_type):
    """The same text trained in two folders gives the same `.model` bytes, and `.vocab` is
    what sentencepiece writes itself for the same training."""
    train = real["train"].select(range(1000))
    kw = dict(vocab_size=300, langs=("en", "de"), model_type=model_type, name="t")
    ours = train_tokenizer(train, tmp_path / "a", **kw)
    assert ours.read_bytes() == train_tokenizer(train, tmp_path / ("b" * 80), **kw).read_bytes()
    specials = dict(pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
                    **{f"{k}_piece": SPECIAL_PIECES[i] for k, i in
                       [("pad", PAD_ID), ("unk", UNK_ID), ("bos", BOS_ID), ("eos", EOS_ID)]})
    spm.SentencePieceTrainer.train(
        sentence_iterator=(s for lang in ("en", "de") for s in train[lang]),
        model_prefix=str(tmp_path / "own"), vocab_size=300, model_type=model_type,
        character_coverage=1.0, minloglevel=2, **specials)
    assert ours.with_suffix(".vocab").read_text(encoding="utf-8") == (
        tmp_path / "own.vocab").read_text(encoding="utf-8")
    assert b"\r" not in ours.with_suffix(".vocab").read_bytes()      # on any system


def test_load_tokenizer_rejects_other_ids(tmp_path):
    words = "a dog runs the man talks two women walk on street in park".split()
    corpus = [" ".join(words[(i + j) % len(words)] for j in range(6)) for i in range(200)]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_prefix=str(tmp_path / "m"),
                                   vocab_size=30, minloglevel=2)  # sentencepiece's default ids
    with pytest.raises(ValueError, match="special ids"):
        load_tokenizer(tmp_path / "m.model")
    with pytest.raises(FileNotFoundError):
        load_tokenizer(tmp_path / "absent.model")
