"""precision="auto" (page 0c's `resolve_precision`): bf16 only where the device computes it
natively, fp32 elsewhere; the default of training, translation and the command line; a resumed
run keeps the precision it started with; bf16 asked for where it is emulated warns.

`ATEN_CPU_CAPABILITY=avx2` makes PyTorch run its AVX2 kernels, as on a reader's CPU without
bfloat16 instructions: the subprocess test checks the rule there, whatever this machine has.
"""
import json
import os
import re
import subprocess
import sys
import warnings
from dataclasses import replace

import pytest
import torch

from annotated_transformer.run import recipe as recipe_mod
from annotated_transformer import precision as precision_mod
from annotated_transformer.run import trainer
from annotated_transformer.run.checkpoints import CheckpointError, list_checkpoints, read_state
from annotated_transformer.cli import _parser
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.run.recipe import TranslationRecipe, _open_run, select_average
from annotated_transformer.run.trainer import TrainConfig, train
from annotated_transformer.lab.copying import copy_task
from annotated_transformer.precision import native_bf16, resolve_precision, warn_if_emulated


def pretend_cpu(monkeypatch, capability: str, units: list[str]) -> None:
    "Make the rule see another CPU: PyTorch's kernel level and the bf16 instructions."
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(precision_mod, "_cpu_bf16_units", lambda: units)


def test_rule_on_this_machine():
    chosen, why = resolve_precision("auto", "cpu")
    native = native_bf16("cpu")
    assert chosen == ("bf16" if native else "fp32")
    assert why.startswith(f"precision auto -> {chosen}: this CPU ")
    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        assert not native                     # AVX2 kernels have no native bf16 path
    assert resolve_precision("fp32", "cpu") == ("fp32", "precision fp32, as asked")
    assert resolve_precision("bf16", "cpu")[0] == "bf16"       # kept, even if emulated


@pytest.mark.parametrize("capability, units, expected, words", [
    ("AVX512", ["AVX-512 BF16"], "bf16", "computes bf16 natively (AVX-512 BF16)"),
    ("AVX512", ["AVX-512 BF16", "AMX"], "bf16", "natively (AVX-512 BF16, AMX)"),
    ("AVX2", ["AVX-512 BF16"], "fp32", "no native bf16 in PyTorch's AVX2 kernels"),
    ("AVX2", [], "fp32", "this CPU has no native bf16 (AVX2)"),
    ("AVX512", [], "fp32", "this CPU has no native bf16 (AVX512)"),
    ("DEFAULT", [], "fp32", "no native bf16 (DEFAULT)"),
])
def test_rule_under_another_cpu(monkeypatch, capability, units, expected, words):
    pretend_cpu(monkeypatch, capability, units)
    chosen, why = resolve_precision("auto", "cpu")
    assert chosen == expected and words in why, why
    assert native_bf16("cpu") == (expected == "bf16")


def test_rule_under_avx2_kernels():
    """A fresh process with PyTorch's AVX2 kernels (what the tests use to stand for a CPU
    without bf16): auto is fp32, and bf16 by name warns with a measured slowdown."""
    code = ("import warnings, json\n"
            "from annotated_transformer.precision import resolve_precision, warn_if_emulated\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    warned = warn_if_emulated('bf16', 'cpu')\n"
            "print(json.dumps([resolve_precision('auto', 'cpu'), warned,\n"
            "                  [str(x.message) for x in w]]))\n")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    (chosen, why), warned, messages = json.loads(out.splitlines()[-1])
    assert chosen == "fp32" and why.startswith("precision auto -> fp32: this CPU has no")
    assert "AVX2" in why
    assert warned and len(messages) == 1 and "bf16 is emulated here" in messages[0]
    assert "as long in bf16 as in fp32" in messages[0]


def test_refused_precisions():
    for bad, message in [("fp16", "fp16 needs a CUDA device"),
                         ("fp8", "precision must be 'auto', 'fp32', 'bf16' or 'fp16'")]:
        with pytest.raises(ValueError, match=message):
            resolve_precision(bad, "cpu")
    with pytest.raises(ValueError, match="got 'fp8'"):
        TrainConfig(precision="fp8")


def test_defaults_are_auto():
    assert TrainConfig().precision == "auto"
    assert TrainConfig.preset("multi30k").precision == "auto"
    assert TranslationRecipe().train.precision == "auto"
    # the copy model is the same on every machine (chapter 9 decodes it)
    assert TrainConfig.preset("copy").precision == "fp32"
    import inspect
    from annotated_transformer.translator import Translator
    assert inspect.signature(Translator).parameters["precision"].default == "auto"


def test_cli_default_is_auto():
    p = _parser()
    for command in (["translate"], ["evaluate", "--source", "s", "--reference", "r"]):
        a = p.parse_args([*command, "--model-dir", "m"])
        assert a.precision == "auto"
    assert p.parse_args(["translate", "--model-dir", "m", "--precision", "fp32"]) \
        .precision == "fp32"
    a = p.parse_args(["train", "--model-dir", "m"])
    assert a.precision is None                 # the recipe's, which is auto
    assert p.parse_args(["train", "--model-dir", "m", "--precision", "bf16"]).precision \
        == "bf16"
    with pytest.raises(SystemExit):
        p.parse_args(["translate", "--model-dir", "m", "--precision", "fp8"])


def saved_precision(checkpoint) -> str:
    "The concrete precision a checkpoint's run computed in, as its state records it."
    return read_state(checkpoint)["config"]["precision"]


def tiny_model():
    torch.manual_seed(0)
    return make_model(16, 16, TransformerConfig.preset("copy", n_layers=1, d_model=16,
                                                       d_ff=32, n_heads=2))


def test_resume_keeps_the_stored_precision(tmp_path, monkeypatch):
    """A run started in fp32 and resumed under "auto" on a machine where auto means bf16
    goes on in fp32; a new run under that auto records bf16."""
    data = copy_task(100)
    config = TrainConfig(steps=4, max_tokens=128, warmup=2, log_every=2, save_every=2,
                         precision="fp32", progress=False)
    train(tiny_model(), data, config=replace(config, steps=2), run_dir=tmp_path / "run")
    assert saved_precision(list_checkpoints(tmp_path / "run")[-1]) == "fp32"
    monkeypatch.setattr(precision_mod, "resolve_precision",
                        lambda p, d: ("bf16", "precision auto -> bf16: pretend")
                        if p == "auto" else (p, f"precision {p}, as asked"))
    auto = replace(config, precision="auto")
    precision, why = trainer._run_precision(auto, list_checkpoints(tmp_path / "run"),
                                            "cpu")
    assert precision == "fp32" and "kept from the run resumed" in why
    train(tiny_model(), data, config=auto, run_dir=tmp_path / "run")
    done = list_checkpoints(tmp_path / "run")
    assert done[-1].name == "step_00000004" and saved_precision(done[-1]) == "fp32"
    train(tiny_model(), data, config=replace(auto, steps=2), run_dir=tmp_path / "fresh")
    assert saved_precision(list_checkpoints(tmp_path / "fresh")[-1]) == "bf16"


def test_recipe_run_records_and_keeps_its_precision(tmp_path):
    """A new recipe run writes the concrete precision into recipe.json; one resumed under
    "auto" keeps what recipe.json holds, whatever auto would choose here."""
    r, why = _open_run(TranslationRecipe(), tmp_path / "new", "cpu")
    expected = resolve_precision("auto", "cpu")
    assert (r.train.precision, why) == expected
    saved = json.loads((tmp_path / "new/recipe.json").read_text())
    assert saved["train"]["precision"] == expected[0] != "auto"
    other = "fp32" if expected[0] == "bf16" else "bf16"
    old = TranslationRecipe()
    old = replace(old, train=replace(old.train, precision=other))
    (tmp_path / "old").mkdir()
    (tmp_path / "old/recipe.json").write_text(json.dumps(old.to_dict()))
    r, why = _open_run(TranslationRecipe(), tmp_path / "old", "cpu")
    assert r.train.precision == other and "kept from the run" in why
    explicit = replace(old, train=replace(old.train, precision=expected[0]))
    with pytest.raises(ValueError, match="used another recipe"):
        _open_run(explicit, tmp_path / "old", "cpu")


def test_emulated_bf16_warns(monkeypatch):
    "The warning, once per device, points at the caller's line, also through `train`."
    monkeypatch.setattr(precision_mod, "_bf16_support",
                        lambda device: (False, "this CPU has no native bf16 (pretend)"))
    monkeypatch.setattr(precision_mod, "_WARNED", set())
    emulated = lambda caught: [w.filename for w in caught if "emulated" in str(w.message)]
    with pytest.warns(UserWarning, match=r"bf16 is emulated here \(this CPU has no "
                                         r"native bf16 \(pretend\)\): a 256×256") as caught:
        assert warn_if_emulated("bf16", "cpu")
    assert emulated(caught) == [__file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_if_emulated("bf16", "cpu")           # once per device
        assert not warn_if_emulated("fp32", "cpu", once=False)
    assert precision_mod.bf16_slowdown("cpu") > 0
    monkeypatch.setattr(precision_mod, "_WARNED", set())
    config = TrainConfig(steps=1, max_tokens=128, warmup=2, precision="bf16",
                         progress=False)
    with pytest.warns(UserWarning, match="bf16 is emulated here") as caught:
        train(tiny_model(), copy_task(20), config=config)
    assert emulated(caught) == [__file__]


@pytest.mark.parametrize("scores, chosen", [
    ({1: 0.047, 2: 0.016}, 1), ({1: 0.047, 2: 0.058}, 1),        # ties: the fewest
    ({1: 39.75, 3: 40.33, 5: 40.56, 8: 40.69}, 8),                # the shipped run's
    ({1: 10.0, 3: 10.1, 5: 10.25}, 5), ({1: 10.0, 3: 10.2, 5: 10.25}, 3),
])
def test_select_average_breaks_ties_to_the_fewest(monkeypatch, scores, chosen):
    loaded = []
    monkeypatch.setattr(recipe_mod, "average_checkpoints", lambda paths: len(paths))
    monkeypatch.setattr(recipe_mod, "load_weights", lambda model, k: loaded.append(k))
    it = iter(scores.values())
    monkeypatch.setattr(recipe_mod, "_val_bleu", lambda *args: next(it))

    class T:
        model = None

    best, seen = select_average(T(), list(range(10)), ks=list(scores), sources=[],
                                references=[])
    assert best == chosen and seen == scores and loaded[-1] == chosen


def test_precision_names_are_defined_once():
    """The list of precisions lives in precision.py alone; every other module takes it
    from there (the engines' int8 extends it)."""
    from pathlib import Path
    package = Path(precision_mod.__file__).parent
    listed = re.compile(r'\(\s*"auto",\s*"fp32"|"fp32",\s*"bf16",\s*"fp16"\s*\)')
    found = [p.name for p in sorted(package.rglob("*.py"))
             if listed.search(p.read_text(encoding="utf-8"))]
    assert found == ["precision.py"], found
    with pytest.raises(ValueError, match=r"^precision must be 'auto', 'fp32', 'bf16' or "
                                         r"'fp16', got 'fp8'$"):
        precision_mod.check_precision("fp8")
    with pytest.raises(ValueError, match=r"^precision must be 'fp32', 'bf16' or 'fp16', "
                                         r"got 'auto'$"):
        precision_mod.precision_context("auto", "cpu")
    with pytest.raises(ValueError, match=r"^precision must be 'auto', 'fp32', 'bf16', "
                                         r"'fp16' or 'int8', got 'fp8'$"):
        precision_mod.resolve_precision("fp8", torch.device("cpu"), int8=True)


def test_read_state_names_the_file(tmp_path):
    """A trainer state file that is missing, or not safetensors, or without the trainer
    entry, is one CheckpointError that starts with the file's path."""
    data = copy_task(20)
    config = TrainConfig(steps=1, max_tokens=128, warmup=2, precision="fp32",
                         progress=False)
    train(tiny_model(), data, config=config, run_dir=tmp_path / "run")
    checkpoint = list_checkpoints(tmp_path / "run")[-1]
    state = read_state(checkpoint)
    assert state["step"] == 1 and state["config"]["precision"] == "fp32"
    from annotated_transformer.formats import TRAINER_FILE
    from safetensors.torch import save_file
    file = checkpoint / TRAINER_FILE
    for damage in ("missing", "not safetensors", "no trainer entry"):
        if damage == "missing":
            file.unlink()
        elif damage == "not safetensors":
            file.write_bytes(b"not a safetensors file")
        else:
            save_file({"x": torch.zeros(1)}, str(file), metadata={"other": "{}"})
        with pytest.raises(CheckpointError) as caught:
            read_state(checkpoint)
        assert str(caught.value).startswith(f"{file}: "), damage
        assert "\n" not in str(caught.value)
    with pytest.raises(CheckpointError, match="trainer state"):   # the loop says so too
        train(tiny_model(), data, config=replace(config, steps=2), run_dir=tmp_path / "run")
