"""The `annotated-transformer` command line (chapter 9), run in-process on the local Multi30k
files: train a tiny model for a few steps, resume it, translate awkward input, evaluate.

The model learns next to nothing in 20 steps; these tests check the plumbing — one output line
per input line, warnings on stderr, clear errors, files on disk — not the translations.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from annotated_transformer.translation import main

DATA = Path(__file__).resolve().parents[1].parent / "shared/data/multi30k"
TINY = {
    "model": {"n_layers": 1, "d_model": 32, "d_ff": 64, "n_heads": 2, "p_drop": 0.1,
              "p_attn_drop": 0.0, "p_ff_drop": 0.0, "max_len": 128},
    "train": {"steps": 20, "max_tokens": 512, "warmup": 10, "lr_factor": 1.0,
              "precision": "fp32", "log_every": 5, "eval_every": 10, "save_every": 10,
              "keep_last": 3},
    "vocab_size": 300, "bleu_every": 10, "bleu_sentences": 8, "average": [1, 2],
    "select_sentences": 8, "train_pairs": 3000, "max_minutes": None,
}
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"no Multi30k files at {DATA}")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    "A tiny model trained for 10 steps, then resumed to 20 by a second `train`."
    tmp = tmp_path_factory.mktemp("cli")
    config = tmp / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp / "model"
    args = ["train", "--model-dir", str(out), "--data", str(DATA), "--config", str(config),
            "--threads", "1", "--quiet"]
    assert main(args + ["--steps", "10"]) == 0
    assert main(args) == 1                     # another recipe (steps) in the same directory
    assert main(args + ["--steps", "10"]) == 0  # the same recipe: nothing left to do
    return out


def test_train_writes_a_model_directory(model_dir):
    names = {p.name for p in model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.model", "recipe.json",
            "checkpoints"} <= names
    records = [json.loads(x) for x in (model_dir / "checkpoints/metrics.jsonl").open()]
    assert any("val_bleu" in r and "wall" in r for r in records)
    assert any("selection" in r for r in records)
    assert json.loads((model_dir / "config.json").read_text())["notes"]["steps"] == 10


def test_translate_keeps_one_line_per_input(model_dir, tmp_path, capsysbinary):
    long_line = " ".join(["word"] * 200).encode()
    source = tmp_path / "in.en"
    source.write_bytes(b"A dog runs on the beach.\n\nTwo men \xff\xfe play chess.\r\n"
                       + long_line + b"\n   \nA girl.")            # no final newline
    out = tmp_path / "out.de"
    assert main(["translate", "--model-dir", str(model_dir), "-i", str(source), "-o",
                 str(out), "--beam-size", "2", "--batch-size", "2", "--device", "cpu",
                 "--threads", "1"]) == 0
    lines = out.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 7 and lines[-1] == ""                    # 6 lines, each ended
    assert lines[1] == "" and lines[4] == ""                      # empty and blank lines
    assert all(lines[i] for i in (0, 2, 3, 5))
    err = capsysbinary.readouterr().err.decode()
    assert "line 3: not valid UTF-8" in err
    assert "line 4:" in err and "truncated" in err


def test_translate_stdin_to_stdout(model_dir, monkeypatch, capsys):
    import io
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"A cat.\n\nA dog.\n")))
    assert main(["translate", "--model-dir", str(model_dir), "--beam-size", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and out.split("\n")[1] == ""


def test_evaluate_prints_score_and_signature(model_dir, tmp_path, capsys):
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("".join(open(DATA / "val.en").readlines()[:5]))
    ref.write_text("".join(open(DATA / "val.de").readlines()[:5]))
    assert main(["evaluate", "--model-dir", str(model_dir), "--source", str(src),
                 "--reference", str(ref), "--beam-size", "2", "-o",
                 str(tmp_path / "hyp.de")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("BLEU = ") and "tok:13a" in out[1] and "case:mixed" in out[1]
    assert len((tmp_path / "hyp.de").read_text().splitlines()) == 5
    ref.write_text("Ein Hund.\n")
    assert main(["evaluate", "--model-dir", str(model_dir), "--source", str(src),
                 "--reference", str(ref)]) == 1
    assert "has 5 lines but" in capsys.readouterr().err


def test_clear_errors(tmp_path, capsys):
    assert main(["translate", "--model-dir", str(tmp_path / "nowhere")]) == 1
    assert "no such model directory" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    assert main(["translate", "--model-dir", str(tmp_path)]) == 1
    assert "config.json: not a translator configuration" in capsys.readouterr().err
    for bad in (["translate", "--model-dir", "x", "--beam"], ["translate", "--frobnicate"],
                ["translate", "--model-dir", "x", "--beam-size", "0"], ["bogus"]):
        with pytest.raises(SystemExit) as e:
            main(bad)
        assert e.value.code == 2
        assert "usage:" in capsys.readouterr().err


def test_help_via_python_m():
    for args in ([], ["train"], ["translate"], ["evaluate"]):
        r = subprocess.run([sys.executable, "-m", "annotated_transformer.translation",
                            *args, "--help"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONWARNINGS": "ignore"})
        assert r.returncode == 0 and "usage: annotated-transformer" in r.stdout, r.stderr
