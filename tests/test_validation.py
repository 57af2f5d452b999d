"""Clear errors from the model, training and data modules (chapters 5, 7 and 10, part 7c).

A missing optional extra names the pip command that installs it; a public function given
a number it cannot use says which argument, what it got and what it allows; a broken
tokenizer file is named together with the fix; a sentence cut to fit the model warns at the
caller's line. Each test checks one message.
"""
import math
import random
import re
import sys

import pytest
import torch

from annotated_transformer import batching, data, training
from annotated_transformer.run import checkpoints, trainer
from annotated_transformer.lab import copying as copy_lab
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.utils import optional_import


def hint(name: str, extra: str) -> str:
    return (f'{name} is needed for this; install it with: '
            f'pip install "annotated_transformer[{extra}]"')


def message_of(call) -> str:
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    "No test here may reach a hub: offline for each test of this module, not for the run."
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    for module, name in (("datasets.config", "HF_DATASETS_OFFLINE"),
                         ("huggingface_hub.constants", "HF_HUB_OFFLINE")):
        if sys.modules.get(module) is not None:      # read the variables at import
            monkeypatch.setattr(sys.modules[module], name, True)


# --- missing extras -------------------------------------------------------------------

def test_optional_import_returns_the_module(tmp_path, monkeypatch):
    "The module asked for, imported now if it was not yet; for a dotted name, the submodule."
    (tmp_path / "fresh_extra.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fresh_extra", raising=False)
    module = optional_import("fresh_extra", "viz")
    assert module.VALUE == 42 and sys.modules["fresh_extra"] is module
    from json import decoder
    assert optional_import("json.decoder", "viz") is decoder     # not the package json


def test_optional_import_of_a_missing_submodule_names_the_extra():
    "The package is there, the submodule asked for is not: the extra, as for the package."
    with pytest.raises(ModuleNotFoundError) as e:
        optional_import("json.no_such_part", "viz")
    assert str(e.value) == hint("json", "viz") and e.value.name == "json"


def test_optional_import_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sacrebleu", None)   # None: "not installed"
    with pytest.raises(ModuleNotFoundError) as e:
        optional_import("sacrebleu", "data")
    assert str(e.value) == hint("sacrebleu", "data")
    assert e.value.name == "sacrebleu"


def test_optional_import_of_a_submodule_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ModuleNotFoundError) as e:
        optional_import("matplotlib.pyplot", "viz")
    assert str(e.value) == hint("matplotlib", "viz")


def test_optional_import_keeps_other_missing_modules(tmp_path, monkeypatch):
    "A module that is there but lacks one of its imports: the real error, unchanged."
    (tmp_path / "half_installed.py").write_text("import a_dependency_nobody_has\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as e:
        optional_import("half_installed", "data")
    assert e.value.name == "a_dependency_nobody_has"
    assert str(e.value) == "No module named 'a_dependency_nobody_has'"   # Python's own


def test_optional_import_reraises_other_import_errors(tmp_path, monkeypatch):
    "A module whose own code fails as it is imported: that error, not a missing extra."
    (tmp_path / "broken_extra.py").write_text("from json import no_such_name\n")
    (tmp_path / "failing_extra.py").write_text("raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match="cannot import name 'no_such_name'") as e:
        optional_import("broken_extra", "data")
    assert not isinstance(e.value, ModuleNotFoundError)
    with pytest.raises(RuntimeError, match="^broken on import$"):
        optional_import("failing_extra", "data")


def test_load_multi30k_without_datasets(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    for stem in data.MULTI30K_SPLITS.values():
        for lang in ("en", "de"):
            (tmp_path / f"{stem}.{lang}").write_text("A dog runs.\n")
    with pytest.raises(ModuleNotFoundError) as e:
        data.load_multi30k(tmp_path)
    assert str(e.value) == hint("datasets", "data")


def test_train_tokenizer_without_sentencepiece(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(ModuleNotFoundError) as e:
        data.train_tokenizer({"en": ["a"], "de": ["b"]}, tmp_path, vocab_size=100)
    assert str(e.value) == hint("sentencepiece", "data")


def test_load_tokenizer_without_sentencepiece(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    (tmp_path / "tokenizer.model").write_bytes(b"\x00")
    with pytest.raises(ModuleNotFoundError) as e:
        data.load_tokenizer(tmp_path / "tokenizer.model")
    assert str(e.value) == hint("sentencepiece", "data")


# --- numbers a user could get wrong (training: chapters 6 and 7, parts 7b and 7c) -----

def tiny_model():
    torch.manual_seed(0)
    config = TransformerConfig.preset("copy", n_layers=1, d_model=16, d_ff=32,
                                      n_heads=2)
    return make_model(8, 8, config)


def optimizer_and_scheduler():
    return training.make_optimizer(torch.nn.Linear(1, 1), 16)


LOG_PROBS, LABELS = torch.zeros(2, 5).log_softmax(-1), torch.tensor([1, 2])
ONE_PAIR = [([3, 4], [5, 6])]
LINEAR = torch.nn.Linear(1, 1)

TRAINING_CASES = [  # (id, call, message)
    ("lrate warmup 0", lambda: training.lrate(1, 512, warmup=0),
     "warmup must be at least 1, got 0"),
    ("lrate step 0", lambda: training.lrate(0, 512),
     "step must be at least 1, got 0"),
    ("lrate d_model 0", lambda: training.lrate(1, 0),
     "d_model must be at least 1, got 0"),
    ("lrate factor 0", lambda: training.lrate(1, 512, factor=0.0),
     "factor must be greater than 0, got 0.0"),
    ("optimizer warmup", lambda: training.make_optimizer(LINEAR, 512, warmup=-5),
     "warmup must be at least 1, got -5"),
    ("optimizer d_model", lambda: training.make_optimizer(LINEAR, "512"),
     "d_model must be at least 1, got '512'"),
    ("loss eps_ls 1.5",
     lambda: training.label_smoothing_loss(LOG_PROBS, LABELS, eps_ls=1.5),
     "eps_ls must lie in [0, 1), got 1.5"),
    ("loss eps_ls -0.1",
     lambda: training.label_smoothing_loss(LOG_PROBS, LABELS, eps_ls=-0.1),
     "eps_ls must lie in [0, 1), got -0.1"),
    ("loss shapes",
     lambda: training.label_smoothing_loss(torch.zeros(2, 3, 5), LABELS),
     "target must have the shape of log_probs without its last dimension: "
     "log_probs (2, 3, 5), target (2,)"),
    ("smoothed eps_ls 1", lambda: training.smoothed_targets(LABELS, 5, eps_ls=1),
     "eps_ls must lie in [0, 1), got 1"),
    ("smoothed vocab_size 0", lambda: training.smoothed_targets(LABELS, 0),
     "vocab_size must be at least 1, got 0"),
    ("sampler max_tokens 0", lambda: batching.TokenBatchSampler([(3, 4)], 0),
     "max_tokens must be at least 1, got 0"),
    ("sampler max_tokens None", lambda: batching.TokenBatchSampler([(3, 4)], None),
     "max_tokens must be at least 1, got None"),
    ("make_batch no pairs", lambda: batching.make_batch([]),
     "pairs must hold at least one (src_ids, tgt_ids) pair, got none"),
    ("make_batch pad_id -1", lambda: batching.make_batch(ONE_PAIR, pad_id=-1),
     "pad_id must be at least 0, got -1"),
    ("make_batch same ids", lambda: batching.make_batch(ONE_PAIR, pad_id=2),
     "pad_id, bos_id and eos_id must be three different ids, "
     "got {'pad_id': 2, 'bos_id': 1, 'eos_id': 2}"),
    ("accumulated_step no batches",
     lambda: trainer.accumulated_step(tiny_model(), [], *optimizer_and_scheduler()),
     "batches must hold at least one micro-batch, got none"),
    ("accumulated_step clip_norm",
     lambda: trainer.accumulated_step(tiny_model(), [batching.make_batch(ONE_PAIR)],
                                      *optimizer_and_scheduler(), clip_norm=0),
     "clip_norm must be greater than 0, got 0"),
    ("train_loop steps 0",
     lambda: training.train_loop(tiny_model(), [batching.make_batch(ONE_PAIR)],
                                 *optimizer_and_scheduler(), steps=0),
     "steps must be at least 1, got 0"),
    ("train_loop no batches",
     lambda: training.train_loop(tiny_model(), [], *optimizer_and_scheduler(), steps=1),
     "batches gave no batch: the loop has nothing to train on"),
    ("evaluate no batches", lambda: training.evaluate(tiny_model(), []),
     "batches must hold at least one target token, got none"),
    ("average no paths", lambda: checkpoints.average_checkpoints([]),
     "paths must name at least one checkpoint, got none"),
    ("average one path", lambda: checkpoints.average_checkpoints("runs/x/step_00000010"),
     "paths must be a list of checkpoints, got the single path "
     "'runs/x/step_00000010'; pass ['runs/x/step_00000010'] to average one"),
    ("train no pairs",
     lambda: trainer.train(tiny_model(), [], config=trainer.TrainConfig()),
     "train_pairs must hold at least one pair, got none"),
    ("copy_task vocab_size", lambda: copy_lab.copy_task(10, vocab_size=3),
     "vocab_size must be at least 5, got 3"),
    ("copy_task longest", lambda: copy_lab.copy_task(10, shortest=5, longest=2),
     "longest must be at least 5, got 2"),
    ("copy_task shortest", lambda: copy_lab.copy_task(10, shortest=0),
     "shortest must be at least 1, got 0"),
    ("copy_task n_pairs", lambda: copy_lab.copy_task(-1),
     "n_pairs must be at least 0, got -1"),
]


@pytest.mark.parametrize("call, message",
                         [pytest.param(c, m, id=i) for i, c, m in TRAINING_CASES])
def test_training_arguments(call, message):
    assert message_of(call) == message


@pytest.mark.parametrize("field, value, message", [
    ("steps", 0, "steps must be at least 1, got 0"),
    ("max_tokens", 0, "max_tokens must be at least 1, got 0"),
    ("accum_steps", 0, "accum_steps must be at least 1, got 0"),
    ("warmup", 0, "warmup must be at least 1, got 0"),
    ("log_every", 0, "log_every must be at least 1, got 0"),
    ("eval_every", -1, "eval_every must be at least 1, got -1"),
    ("save_every", 0, "save_every must be at least 1, got 0"),
    ("keep_last", 0, "keep_last must be at least 1, got 0"),
    ("lr_factor", 0, "lr_factor must be greater than 0, got 0"),
    ("eps_ls", 1.0, "eps_ls must lie in [0, 1), got 1.0"),
    ("clip_norm", -1.0, "clip_norm must be greater than 0, got -1.0"),
    ("precision", "fp8",
     "precision must be 'auto', 'fp32', 'bf16' or 'fp16', got 'fp8'"),
    ("bos_id", -1, "bos_id must be at least 0, got -1"),
    ("max_tokens", True, "max_tokens must be at least 1, got True"),
])
def test_train_config_fields(field, value, message):
    assert message_of(lambda: trainer.TrainConfig(**{field: value})) == message


def test_train_config_defaults_and_presets_pass():
    "Each preset: its own settings, then the given changes, the defaults everywhere else."
    default = vars(trainer.TrainConfig())
    changes = dict(clip_norm=1.0, keep_last=7)
    for name in ("copy", "multi30k"):
        settings = trainer._PRESETS[name]
        assert {k: v for k, v in settings.items() if default[k] != v}, name  # not defaults
        got = vars(trainer.TrainConfig.preset(name, **changes))
        assert got == {**default, **settings, **changes}, name


def test_train_config_unknown_preset():
    assert message_of(lambda: trainer.TrainConfig.preset("cpoy")) == (
        "unknown preset 'cpoy'; known presets: copy, multi30k")


def test_train_config_preset_checks_its_changes():
    assert message_of(lambda: trainer.TrainConfig.preset("copy", steps=0)) == (
        "steps must be at least 1, got 0")


def test_hook_needs_a_run_dir():
    assert message_of(lambda: trainer.train(tiny_model(), [([3], [3])],
                                            config=trainer.TrainConfig(),
                                            on_checkpoint=lambda step, path: True)) == (
        "on_checkpoint needs a run_dir: it is called after checkpoints")


def test_checkpoint_step_refuses_other_names():
    assert message_of(lambda: checkpoints.checkpoint_step("runs/x/step_12.tmp")) == (
        "path must be a checkpoint folder named like step_00001000, "
        "got 'runs/x/step_12.tmp'")


# --- numbers and names a user could get wrong (data, chapter 10) -----------------------

COLUMNS = {"en": ["a dog runs", "two men talk"],
           "de": ["ein Hund rennt", "zwei Männer"]}
VOCAB_SIZE_RULE = ("vocab_size must be an integer of at least 5 "
                   "(4 special pieces and one more)")

DATA_CASES = [  # (id, call on a folder, message)
    ("vocab_size 4", lambda tmp: data.train_tokenizer(COLUMNS, tmp, vocab_size=4),
     f"{VOCAB_SIZE_RULE}, got 4"),
    ("vocab_size float", lambda tmp: data.train_tokenizer(COLUMNS, tmp, vocab_size=8000.0),
     f"{VOCAB_SIZE_RULE}, got 8000.0"),
    ("model_type",
     lambda tmp: data.train_tokenizer(COLUMNS, tmp, vocab_size=100, model_type="BPE"),
     "model_type must be one of ('bpe', 'unigram', 'char', 'word'), got 'BPE'"),
    ("langs missing",
     lambda tmp: data.train_tokenizer(COLUMNS, tmp, vocab_size=100, langs=("en", "fr")),
     "langs must name columns of the training split ['en', 'de'], got ('en', 'fr')"),
    ("langs string", lambda tmp: data.train_tokenizer(COLUMNS, tmp, vocab_size=100, langs="en"),
     "langs must name columns of the training split ['en', 'de'], got 'en'"),
    ("to_pairs src", lambda tmp: data.to_pairs(COLUMNS, None, src="fr"),
     "src must be a column of the split ['en', 'de'], got 'fr'"),
    ("to_pairs tgt", lambda tmp: data.to_pairs(COLUMNS, None, tgt="cs"),
     "tgt must be a column of the split ['en', 'de'], got 'cs'"),
    ("load langs string", lambda tmp: data.load_multi30k(tmp, langs="en"),
     "langs must be a non-empty list or tuple of names, got 'en'"),
    ("load splits string", lambda tmp: data.load_multi30k(tmp, splits="train"),
     "splits must be a non-empty list or tuple of names, got 'train'"),
    ("load no langs", lambda tmp: data.load_multi30k(tmp, langs=()),
     "langs must be a non-empty list or tuple of names, got ()"),
]


@pytest.mark.parametrize("call, message",
                         [pytest.param(c, m, id=i) for i, c, m in DATA_CASES])
def test_data_arguments(call, message, tmp_path):
    pytest.importorskip("sentencepiece")
    assert message_of(lambda: call(tmp_path)) == message


def test_vocab_size_too_large_for_the_text(tmp_path):
    pytest.importorskip("sentencepiece")
    message = message_of(lambda: data.train_tokenizer(COLUMNS, tmp_path, vocab_size=500))
    assert re.fullmatch(r"sentencepiece cannot train vocab_size=500 on this text: "
                        r"Vocabulary size too high \(500\)\. Please set it to a value "
                        r"<= \d+\.", message), message


# --- a broken tokenizer file ----------------------------------------------------------

def tokenizer_hint(path) -> str:
    return (f"{path} is not a sentencepiece model (corrupt or truncated?): copy it "
            "again from the model directory, or retrain it with train_tokenizer")


@pytest.fixture(scope="module")
def good_model(tmp_path_factory):
    pytest.importorskip("sentencepiece")
    words = "a dog runs the man talks two women walk on street in park".split()
    corpus = [" ".join(words[(i + j) % len(words)] for j in range(6))
              for i in range(200)]
    tmp = tmp_path_factory.mktemp("spm")
    return data.train_tokenizer({"en": corpus, "de": corpus}, tmp, vocab_size=40, name="tokenizer")


@pytest.mark.parametrize("kind", ["random bytes", "truncated", "text", "empty"])
def test_corrupt_tokenizer_names_file_and_fix(kind, good_model, tmp_path):
    assert data.load_tokenizer(good_model).get_piece_size() == 40
    whole = good_model.read_bytes()
    content = {"random bytes": random.Random(0).randbytes(4000),
               "truncated": whole[:len(whole) // 2],
               "text": b"this is not a model\n",
               "empty": b""}[kind]
    bad = tmp_path / "tokenizer.model"
    bad.write_bytes(content)
    assert message_of(lambda: data.load_tokenizer(bad)) == tokenizer_hint(bad)


def test_missing_tokenizer_names_file(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        data.load_tokenizer(tmp_path / "tokenizer.model")
    assert str(e.value) == f"no sentencepiece model at {tmp_path / 'tokenizer.model'}"


# --- the model's settings and arguments (chapter 5, page 5b) ----------------------------

V = 20
SRC, TGT = torch.randint(1, V, (3, 9)), torch.randint(1, V, (3, 8))
SRC_MASK = SRC.ne(0).unsqueeze(1)


def toy_transformer():
    torch.manual_seed(0)
    return make_model(V, V, TransformerConfig.preset("tiny", max_len=16)).eval()


def src_mask_rule(got):
    return ("src_mask must be a bool tensor of shape (3 or 1, 9 or 1, 9) "
            f"(True = may attend), got a {got}")


MODEL_CASES = [  # (id, call on an evaluation-mode model, message)
    ("src of rank 1", lambda m: m(SRC[0], TGT),
     "src must be integer token ids of shape (batch, seq_len), "
     "got shape (9,) and dtype torch.int64"),
    ("src as floats", lambda m: m(SRC.float(), TGT),
     "src must be integer token ids of shape (batch, seq_len), "
     "got shape (3, 9) and dtype torch.float32"),
    ("src id too large", lambda m: m(SRC + V, TGT),
     f"src holds the token id {int(SRC.max()) + V}, outside the vocabulary: "
     "ids must lie in 0..19 (vocab_size=20)"),
    ("tgt id negative", lambda m: m(SRC, TGT - V),
     f"tgt holds the token id {int(TGT.min()) - V}, outside the vocabulary: "
     "ids must lie in 0..19 (vocab_size=20)"),
    ("encode id", lambda m: m.encode(SRC + V),
     f"src holds the token id {int(SRC.max()) + V}, outside the vocabulary: "
     "ids must lie in 0..19 (vocab_size=20)"),
    ("decode id", lambda m: m.decode(torch.zeros(3, 9, 6), TGT + V),
     f"tgt holds the token id {int(TGT.max()) + V}, outside the vocabulary: "
     "ids must lie in 0..19 (vocab_size=20)"),
    ("batch sizes", lambda m: m(SRC, TGT[:2]),
     "src and tgt must hold as many sentences, got 3 and 2"),
    ("src_mask length", lambda m: m(SRC, TGT, src_mask=SRC_MASK[..., :5]),
     src_mask_rule("torch.bool tensor of shape (3, 1, 5)")),
    ("float mask", lambda m: m(SRC, TGT, src_mask=SRC_MASK.float()),
     src_mask_rule("torch.float32 tensor of shape (3, 1, 9)")),
    ("tgt_mask size", lambda m: m(SRC, TGT, tgt_mask=torch.ones(1, 5, 5, dtype=bool)),
     "tgt_mask must be a bool tensor of shape (3 or 1, 8 or 1, 8) (True = may attend), "
     "got a torch.bool tensor of shape (1, 5, 5)"),
    ("memory width", lambda m: m.decode(torch.randn(3, 9, 8), TGT),
     "memory must have shape (batch=3, S, d_model=6), got (3, 9, 8)"),
    ("cache length", lambda m: m.decode(torch.randn(3, 9, 6), TGT, cache=[{}]),
     "cache must have one entry per decoder layer (2), got 1: use init_cache(model)"),
    ("tying two vocabularies", lambda m: make_model(100, 120, TransformerConfig()),
     "tie_embeddings=True shares one matrix between source and target and needs one "
     "vocabulary, got src_vocab=100 and tgt_vocab=120; use a shared vocabulary or "
     "tie_embeddings=False"),
    ("pad_id outside", lambda m: make_model(8, 8, TransformerConfig(pad_id=8)),
     "pad_id=8 must be an id of both vocabularies (0..7)"),
    ("unknown preset", lambda m: TransformerConfig.preset("large"),
     "unknown preset 'large'; known presets: base, big, tiny, copy, multi30k"),
    ("unknown field", lambda m: TransformerConfig.preset("base", layers=4),
     "unknown configuration fields ['layers']; fields are ['n_layers', 'd_model', "
     "'d_ff', 'n_heads', 'p_drop', 'p_attn_drop', 'p_ff_drop', 'max_len', 'norm_first', "
     "'activation', 'learned_pos', 'tie_embeddings', 'bias', 'pad_id']"),
    ("heads", lambda m: TransformerConfig(d_model=512, n_heads=6),
     "n_heads=6 must divide d_model=512 (d_k = d_model / n_heads)"),
    ("activation", lambda m: TransformerConfig(activation="swish"),
     "activation must be one of ['gelu', 'relu'], got 'swish'"),
    ("p_drop", lambda m: TransformerConfig(p_drop=1.5),
     "p_drop must lie in [0, 1), got 1.5"),
]


@pytest.mark.parametrize("call, message",
                         [pytest.param(c, m, id=i) for i, c, m in MODEL_CASES])
def test_model_arguments(call, message):
    model = toy_transformer()
    assert message_of(lambda: call(model)) == message


def test_a_checked_forward_reads_the_device_once(monkeypatch):
    "src and tgt: both ranges in one read; in training mode, none unless asked."
    reads, tolist = [], torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist",
                        lambda t: reads.append(t.shape) or tolist(t))
    model = toy_transformer()
    model(SRC, TGT)
    assert reads == [(2, 2)]                    # (src, tgt) × (min, max)
    reads.clear()
    model.train()(SRC, TGT)
    assert reads == []
    assert message_of(lambda: model(SRC + V, TGT, check=True)).startswith(
        f"src holds the token id {int(SRC.max()) + V}, outside the vocabulary")
    with pytest.raises(IndexError):             # unchecked: PyTorch's embedding refuses
        model(SRC + V, TGT)


def test_a_training_step_reads_no_id_range(monkeypatch):
    "train_step calls the model in training mode: the id checks stay off."
    def refuse(*args, **kwargs):
        raise AssertionError("an id range was read during a training step")
    monkeypatch.setattr(torch, "aminmax", refuse)
    stats = training.train_step(tiny_model(), batching.make_batch(ONE_PAIR),
                                *optimizer_and_scheduler())
    assert stats["tokens"] > 0
    stats = trainer.accumulated_step(tiny_model(), [batching.make_batch(ONE_PAIR)],
                                     *optimizer_and_scheduler())
    assert stats["tokens"] > 0


def test_accumulated_step_is_chapter_7s_train_step():
    """Part II's update with one micro-batch, in float32 and one process, is Part I's:
    the same loss and the same weights, bit for bit, update after update."""
    import copy
    torch.manual_seed(0)
    one = make_model(16, 16, TransformerConfig.preset("copy", d_model=32, d_ff=64))
    many = copy.deepcopy(one)
    steppers = [training.make_optimizer(m, 32, warmup=3) for m in (one, many)]
    pairs = copy_lab.copy_task(40, seed=3)
    for k in range(4):
        batch = batching.make_batch(pairs[10 * k:10 * k + 10])
        torch.manual_seed(k)
        a = training.train_step(one, batch, *steppers[0])
        torch.manual_seed(k)
        b = trainer.accumulated_step(many, [batch], *steppers[1], precision="fp32")
        assert a["loss"] == float(b["loss"]) and a["lr"] == b["lr"]
        assert a["tokens"] == b["tokens"]
    assert all(torch.equal(p, q) for p, q in zip(one.parameters(), many.parameters()))


def test_train_with_the_copy_settings_is_chapter_8s_loop(tmp_path, capsys):
    """Part II's `train`, given chapter 8's settings (the `copy` preset), trains the copy
    model of `train_copy_model`: the same weights after the same updates, bit for bit,
    and the same mean loss per token between log lines."""
    steps = 6
    chapter_8 = copy_lab.train_copy_model(tmp_path, retrain=True, steps=steps)
    history = torch.load(tmp_path / f"copy_16_{steps}.pt", weights_only=True)["history"]
    torch.manual_seed(0)
    model = make_model(16, 16, TransformerConfig.preset("copy"))
    records = trainer.train(model, copy_lab.copy_task(20_000, 16, seed=1),
                            config=trainer.TrainConfig.preset("copy", steps=steps,
                                                              progress=False))
    assert all(torch.equal(p, q)
               for p, q in zip(chapter_8.parameters(), model.parameters()))
    assert [r["step"] for r in history] == [r["step"] for r in records] == [steps]
    assert math.isclose(history[0]["loss"], records[0]["loss"], rel_tol=1e-12)


@pytest.mark.parametrize("p_attn_drop", [0.0, 0.1])
def test_a_training_step_runs_the_fused_attention(monkeypatch, p_attn_drop):
    """Training computes Eq. (1) with PyTorch's fused kernel, dropout included, as
    evaluation does (the written-out `attention` only where weights are kept); a model's
    attention layers leave the shape checks to its boundary; the step hands back its
    loss and gradient norm as tensors, so that nothing waits for them."""
    from annotated_transformer import multihead
    def refuse(*args, **kwargs):
        raise AssertionError("the written-out attention ran during a training step")
    monkeypatch.setattr(multihead, "attention", refuse)
    torch.manual_seed(0)
    config = TransformerConfig.preset("copy", n_layers=1, d_model=16, d_ff=32,
                                      n_heads=2, p_attn_drop=p_attn_drop)
    model = make_model(16, 16, config)
    layers = [m for m in model.modules() if isinstance(m, multihead.MultiHeadAttention)]
    assert len(layers) == 3 and not any(m.check_shapes for m in layers)
    assert multihead.MultiHeadAttention(16, 2).check_shapes      # standalone: checks
    stats = trainer.accumulated_step(model, [batching.make_batch(ONE_PAIR)],
                                     *optimizer_and_scheduler())
    assert all(isinstance(stats[k], torch.Tensor) and stats[k].dim() == 0
               for k in ("loss", "grad_norm"))
    assert math.isfinite(float(stats["loss"])) and float(stats["grad_norm"]) > 0
    layers[0].keep_weights = True                # the written-out form: refused here
    with pytest.raises(AssertionError, match="written-out attention ran"):
        trainer.accumulated_step(model, [batching.make_batch(ONE_PAIR)],
                                 *optimizer_and_scheduler())
    layers[0].keep_weights = False               # bf16 on the CPU: written out, faster
    with pytest.raises(AssertionError, match="written-out attention ran"):
        trainer.accumulated_step(model, [batching.make_batch(ONE_PAIR)],
                                 *optimizer_and_scheduler(), precision="bf16")


def test_truncation_warning_names_the_sentence_and_the_caller(sp, capsys):
    """A source too long for the positional table: a `TruncationWarning` with its index and
    limit, pointing at this file's line whether the call passed a list or one string (a
    different depth inside the package); one string honours `progress` as a list does."""
    from small_models import small_translator
    from annotated_transformer import TruncationWarning
    translator = small_translator(sp, seed=0).use(precision="fp32")   # max_len 96
    long = "A dog runs along the beach. " * 20
    options = dict(beam_size=1, max_len_b=8)
    for sentences, index in ((["A cat.", long], 1), (long, 0)):
        with pytest.warns(TruncationWarning) as caught:
            translator.translate(sentences, **options)
        cut = [w for w in caught if w.category is TruncationWarning]
        assert len(cut) == 1 and cut[0].filename == __file__, cut[0].filename
        assert (cut[0].message.index, cut[0].message.limit) == (index, 96 - 8)
        assert str(cut[0].message).startswith(f"sentence {index + 1}: ")
    capsys.readouterr()
    assert isinstance(translator.translate("A cat.", progress=True, **options), str)
    assert "1/1" in capsys.readouterr().err                        # the bar, for one string


def test_smoothed_targets_are_built_on_the_labels_device():
    "The smoothed target lives where the labels do (a CUDA label must not meet a CPU q)."
    labels = torch.zeros(2, 3, dtype=torch.long, device="meta")   # no data, any machine
    q = training.smoothed_targets(labels, 5)
    assert q.device == labels.device and q.shape == (2, 3, 5)


def test_how_a_translator_decodes_is_asked_for_clearly(sp):
    """int8 without an engine, an engine named by a string, and int8 on a model off the
    CPU: each one error that says what to pass or where to run."""
    from small_models import small_translator
    from annotated_transformer import engines
    translator = small_translator(sp, seed=0)
    with pytest.raises(ValueError, match="pass engine=annotated_transformer.engines.eager"):
        translator.use(precision="int8")
    with pytest.raises(TypeError, match=r"ENGINES\['aot'\]"):
        translator.use(engine="aot")
    with pytest.raises(ValueError, match="int8 runs on the CPU, not on meta"):
        engines.eager(translator.model.to("meta"), precision="int8")
