"""The `annotated-transformer` command line (part 11g), run in-process on the local Multi30k
files: train a tiny model for a few steps, extend it, translate awkward input, evaluate.

The model learns next to nothing in 20 steps; these tests check the plumbing — one output line
per input line, warnings on stderr, clear errors, files on disk — not the translations.
The tests that train ask for the `multi30k` fixture (tests/conftest.py): the folder, or a skip.
"""
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from annotated_transformer.cli import main

TINY = {
    "model": {"n_layers": 1, "d_model": 32, "d_ff": 64, "n_heads": 2, "p_drop": 0.1,
              "p_attn_drop": 0.0, "p_ff_drop": 0.0, "max_len": 128},
    "train": {"steps": 20, "max_tokens": 512, "warmup": 10, "lr_factor": 1.0,
              "precision": "fp32", "log_every": 5, "eval_every": 10, "save_every": 10,
              "keep_last": 3},
    "vocab_size": 300, "bleu_every": 10, "bleu_sentences": 8, "average": [1, 2],
    "select_sentences": 8, "train_pairs": 3000, "max_minutes": None,
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, multi30k):
    """A tiny model trained for 10 steps; a changed recipe (warm-up) and a smaller budget
    are refused in the same directory; a larger `--steps` extends the finished run to 20."""
    tmp = tmp_path_factory.mktemp("cli")
    config = tmp / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp / "model"
    args = ["train", "--model-dir", str(out), "--data", str(multi30k), "--config",
            str(config), "--threads", "1", "--quiet"]
    assert main(args + ["--steps", "10"]) == 0
    other = tmp / "other_warmup.json"
    other.write_text(json.dumps({**TINY, "train": {**TINY["train"], "warmup": 5}}))
    assert main(["train", "--model-dir", str(out), "--data", str(multi30k), "--config",
                 str(other), "--threads", "1", "--quiet", "--steps", "10"]) == 1
    assert main(args + ["--steps", "5"]) == 1   # fewer steps than already trained
    assert main(args + ["--steps", "10"]) == 0  # the same recipe: nothing left to do
    assert main(args) == 0                      # 20 steps: extends the finished run
    return out


def test_train_writes_a_model_directory(model_dir):
    names = {p.name for p in model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.model", "recipe.json",
            "checkpoints"} <= names
    records = [json.loads(x) for x in (model_dir / "checkpoints/metrics.jsonl").open()]
    assert any("val_bleu" in r and "wall" in r for r in records)
    assert any("selection" in r for r in records)
    assert json.loads((model_dir / "config.json").read_text())["notes"]["steps"] == 20
    bleu_steps = [r["step"] for r in records if "val_bleu" in r]
    assert bleu_steps == [10, 20]                     # the extension resumed at step 10


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
    # a 20-step model may well answer "" (end of sentence first): compare with the library
    from annotated_transformer.run.pretrained import load_translator
    library = load_translator(model_dir, device="cpu", precision="fp32").translate(
        ["A dog runs on the beach.", "A girl."], beam_size=2)
    assert [lines[0], lines[5]] == library
    err = capsysbinary.readouterr().err.decode()
    assert "line 3: not valid UTF-8" in err
    assert "line 4:" in err and "truncated" in err


def test_translate_stdin_to_stdout(model_dir, monkeypatch, capsys):
    import io
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"A cat.\n\nA dog.\n")))
    assert main(["translate", "--model-dir", str(model_dir), "--beam-size", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and out.split("\n")[1] == ""


def test_evaluate_prints_score_and_signature(model_dir, multi30k, tmp_path, capsys):
    src, ref = tmp_path / "src.en", tmp_path / "ref.de"
    src.write_text("".join(open(multi30k / "val.en").readlines()[:5]))
    ref.write_text("".join(open(multi30k / "val.de").readlines()[:5]))
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


def test_help_via_python_m(capsys):
    """`python -m annotated_transformer --help` in a process of its own; each command's help
    through `main`, in this one."""
    r = subprocess.run([sys.executable, "-m", "annotated_transformer", "--help"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert r.returncode == 0 and "usage: annotated-transformer" in r.stdout, r.stderr
    for command in ("train", "translate", "evaluate"):
        with pytest.raises(SystemExit) as e:
            main([command, "--help"])
        assert e.value.code == 0
        assert f"usage: annotated-transformer {command}" in capsys.readouterr().out


def test_version(capsys):
    from annotated_transformer import __version__
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"annotated-transformer {__version__}\n"


def test_version_from_a_checkout_never_installed(monkeypatch, capsys):
    """From a checkout on PYTHONPATH the package has no metadata: `--version` gives the
    source's version, marked, and `--help` works, instead of a PackageNotFoundError."""
    import importlib.metadata
    from annotated_transformer import __version__

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == (f"annotated-transformer {__version__} "
                                       "(not installed)\n")
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith("usage: annotated-transformer")


def test_missing_device_is_named(model_dir, capsys):
    for device in ("cuda:99", "gpu"):
        with pytest.raises(SystemExit) as e:
            main(["translate", "--model-dir", str(model_dir), "--device", device])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"no device '{device}' on this machine; it has cpu" in err
        assert "Traceback" not in err


def test_recipe_budget_is_steps_and_an_old_run_resumes(model_dir, multi30k, tmp_path,
                                                       capsys):
    """The default recipe has no time limit, so a run started with {"max_minutes": null}
    resumes under a config that leaves it out (and is refused under one with a limit),
    as does a run recorded before a field (`model.bias`) existed; the progress shows the
    steps. On a copy of the shared model directory, which the other tests read."""
    run = tmp_path / "model"
    shutil.copytree(model_dir, run)
    saved = run / "recipe.json"
    old = json.loads(saved.read_text())
    assert old["max_minutes"] is None
    del old["model"]["bias"]
    saved.write_text(json.dumps(old))

    def train(recipe: dict) -> int:
        config = tmp_path / "config.json"
        config.write_text(json.dumps(recipe))
        return main(["train", "--model-dir", str(run), "--data", str(multi30k),
                     "--config", str(config), "--threads", "1", "--steps", "20"])

    assert train({**TINY, "max_minutes": 5}) == 1                 # a limit: another recipe
    assert "used another recipe" in capsys.readouterr().err
    assert train({k: v for k, v in TINY.items() if k != "max_minutes"}) == 0
    err = capsys.readouterr().err
    assert "resuming from" in err and "training pairs" in err and "saved" in err
    assert "100%" in err and "20/20" in err                        # the bar over steps


def test_max_minutes_stops_at_a_checkpoint(multi30k, tmp_path, capsys):
    """`--max-minutes` (the recipe's `max_minutes`): a budget already spent by the data
    preparation stops a fresh run at its first checkpoint, which is then selected."""
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "model"
    assert main(["train", "--model-dir", str(out), "--data", str(multi30k), "--config",
                 str(config), "--threads", "1", "--quiet", "--max-minutes", "1e-6"]) == 0
    assert json.loads((out / "config.json").read_text())["notes"]["steps"] == 10
    assert json.loads((out / "recipe.json").read_text())["max_minutes"] == 1e-6


def read_line(stream, timeout: float = 60.0) -> str:
    "One line from a subprocess's pipe, or a test failure after `timeout` seconds."
    import queue
    import threading
    box = queue.Queue()
    threading.Thread(target=lambda: box.put(stream.readline()), daemon=True).start()
    try:
        return box.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"no output line within {timeout} s")


def test_translate_streams_line_by_line(model_dir, tmp_path):
    """Fed one line at a time by a writer that waits for each answer, `translate` answers
    each line before the next arrives, in order, with the same text as from a file."""
    lines = ["A dog runs.", "", "Two men play chess in the park.", "A girl sings."]
    source, expected = tmp_path / "in.en", tmp_path / "out.de"
    source.write_text("\n".join(lines) + "\n")
    common = ["--model-dir", str(model_dir), "--beam-size", "1", "--device", "cpu",
              "--threads", "1"]
    assert main(["translate", *common, "-i", str(source), "-o", str(expected)]) == 0
    want = expected.read_text(encoding="utf-8").splitlines()
    p = subprocess.Popen([sys.executable, "-m", "annotated_transformer",
                          "translate", *common], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        for line, answer in zip(lines, want):
            p.stdin.write(line + "\n")
            p.stdin.flush()
            assert read_line(p.stdout) == answer + "\n"
        p.stdin.write("\n".join(lines) + "\n")                     # a burst: in order
        p.stdin.flush()
        assert [read_line(p.stdout) for _ in lines] == [w + "\n" for w in want]
        p.stdin.write(lines[0])                                    # no final newline
        p.stdin.close()
        assert read_line(p.stdout) == want[0] + "\n"
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        p.kill()


def test_progress_bar_only_on_a_terminal(model_dir, tmp_path, capsys):
    import fcntl
    import pty
    import struct
    import termios
    source = tmp_path / "in.en"
    source.write_text("A dog runs.\nA cat sleeps.\n")
    args = ["translate", "--model-dir", str(model_dir), "-i", str(source), "--beam-size",
            "1", "--device", "cpu", "--threads", "1"]
    assert main(args) == 0
    assert "sentence/s" not in capsys.readouterr().err            # stderr: not a terminal
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 wide
    p = subprocess.Popen([sys.executable, "-m", "annotated_transformer", *args],
                         stdout=subprocess.PIPE, stderr=slave,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    os.close(slave)
    err = b""
    try:
        while chunk := os.read(master, 4096):
            err += chunk
    except OSError:                                  # EIO: the terminal's writer is gone
        pass
    finally:
        os.close(master)
    assert p.wait(timeout=60) == 0 and p.stdout.read().count(b"\n") == 2
    assert b"2/2" in err and b"sentence" in err


def test_evaluate_json(model_dir, multi30k, tmp_path, capsys):
    """The score is sacreBLEU's own on the translations written; scored against
    themselves, the same translations get their own self-score (100 where a line has four
    words: a barely trained model's lines may not)."""
    import sacrebleu
    src, ref, hyp = tmp_path / "src.en", tmp_path / "ref.de", tmp_path / "hyp.de"
    src.write_text("".join(open(multi30k / "val.en").readlines()[:4]))
    ref.write_text("".join(open(multi30k / "val.de").readlines()[:4]))
    cpu = ["--device", "cpu"]       # one device's rounding, whatever the machine has
    assert main(["evaluate", "--model-dir", str(model_dir), "--source", str(src),
                 "--reference", str(ref), "--beam-size", "2", "--json", "-o",
                 str(hyp), *cpu]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    result = json.loads(out)
    hyps = hyp.read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines()
    assert len(hyps) == 4 and any(hyps)
    assert result["score"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score,
                                            abs=1e-9)
    assert "tok:13a" in result["signature"]
    again = tmp_path / "again.de"
    assert main(["evaluate", "--model-dir", str(model_dir), "--source", str(src),
                 "--reference", str(hyp), "--beam-size", "2", "--json", "-o", str(again),
                 *cpu]) == 0
    assert again.read_text(encoding="utf-8") == hyp.read_text(encoding="utf-8")
    assert json.loads(capsys.readouterr().out)["score"] == pytest.approx(
        sacrebleu.corpus_bleu(hyps, [hyps]).score)
    assert result["lines"] == 4 and result["seconds"] >= 0
    assert result["beam_size"] == 2 and result["alpha"] == 0.6
    from annotated_transformer.precision import resolve_precision    # auto, resolved
    assert result["precision"] == resolve_precision("auto", result["device"])[0]
    assert result["device"].startswith(("cpu", "cuda"))


def test_missing_extra_is_one_line(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sacrebleu", None)            # as if not installed
    src = tmp_path / "src.en"
    src.write_text("A dog.\n")
    assert main(["evaluate", "--model-dir", str(model_dir), "--source", str(src),
                 "--reference", str(src), "--beam-size", "1"]) == 1
    err = capsys.readouterr().err
    err = "".join(x for x in err.splitlines(True) if "precision auto ->" not in x)
    assert err.count("\n") == 1 and 'pip install "annotated_transformer[data]"' in err


def test_translate_int8(model_dir, tmp_path, capsys):
    src = tmp_path / "in.en"
    src.write_text("A dog runs.\n\nTwo men talk.\n")
    assert main(["translate", "--model-dir", str(model_dir), "-i", str(src),
                 "--precision", "int8", "--beam-size", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and out.split("\n")[1] == ""


def test_int8_without_a_device_loads_on_the_cpu(model_dir, tmp_path, monkeypatch):
    """int8 runs on the CPU only: with no --device, the model is loaded there even where
    a GPU is the fastest device present."""
    from annotated_transformer import cli
    asked = []

    def load_translator(directory, device=None, **decoding):
        asked.append(device)
        raise OSError("stop here")

    monkeypatch.setattr(cli, "load_translator", load_translator)
    src = tmp_path / "in.en"
    src.write_text("A dog runs.\n")
    for extra in (["--precision", "int8"], ["--precision", "fp32"]):
        assert main(["translate", "--model-dir", str(model_dir), "-i", str(src),
                     *extra]) == 1
    assert asked == ["cpu", None]


def test_translate_compiled_engine(model_dir, tmp_path, monkeypatch, capsys):
    """--engine compiled gives the eager lines (the step run uncompiled here: part 9d's
    tests compile it); with --precision int8 it says in one line why it cannot."""
    from annotated_transformer.engines import compiling
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)   # put back after
    monkeypatch.setattr(compiling, "_COMPILED", {})
    monkeypatch.setattr(compiling.torch, "compile", lambda fn, **kw: fn)
    monkeypatch.setattr(compiling, "_run_trial", lambda options, folder: {
        "ok": True, "why": "", "keep_s": None})
    steps, real = [], compiling.static_step
    monkeypatch.setattr(compiling, "static_step", lambda *a: steps.append(1) or real(*a))
    src = tmp_path / "in.en"
    src.write_text("A dog runs.\n\nTwo men talk in a park.\n")
    args = ["translate", "--model-dir", str(model_dir), "-i", str(src), "--beam-size", "2",
            "--device", "cpu"]                          # the engine's device
    assert main(args + ["--precision", "fp32"]) == 0
    eager = capsys.readouterr().out
    assert main(args + ["--engine", "compiled"]) == 0
    out, err = capsys.readouterr()
    assert out == eager and "precision fp32, the compiled engine's" in err and steps
    assert main(args + ["--engine", "compiled", "--precision", "int8"]) == 0
    out, err = capsys.readouterr()
    assert err.count("compiled engine decodes fp32 on the CPU; int8 on cpu decodes "
                     "eagerly") == 1 and out.count("\n") == 3

def test_evaluate_json_says_when_the_compiled_step_fell_back(model_dir, tmp_path,
                                                            monkeypatch, capsys):
    """A compiled step that fails (the compiler's own error) decodes eagerly: one warning
    line on stderr, and the JSON gives the reason under "fallback"."""
    import warnings
    from torch._dynamo.exc import BackendCompilerFailed
    from annotated_transformer.engines import compiling
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)   # put back after
    monkeypatch.setattr(compiling, "_COMPILED", {})
    monkeypatch.setattr(compiling, "_run_trial", lambda options, folder: {
        "ok": True, "why": "", "keep_s": None})

    def fails(fn, **kw):
        def run(*a):
            raise BackendCompilerFailed(fn, RuntimeError("no kernel\nhere"), None)
        return run

    monkeypatch.setattr(compiling.torch, "compile", fails)
    monkeypatch.setattr(warnings, "showwarning",        # as Python shows one, not pytest
                        lambda m, c, f, n, file=None, line=None: sys.stderr.write(
                            warnings.formatwarning(m, c, f, n, line)))
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\nTwo men talk in a park.\n")
    args = ["evaluate", "--model-dir", str(model_dir), "--source", str(src),
            "--reference", str(src), "--beam-size", "2", "--json", "--device", "cpu"]
    assert main(args + ["--precision", "fp32"]) == 0
    eager = json.loads(capsys.readouterr().out)
    formatted = warnings.formatwarning
    assert main(args + ["--engine", "compiled"]) == 0
    assert warnings.formatwarning is formatted                # put back
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["engine"] == "compiled" and "fallback" not in eager
    assert result["fallback"] == "RuntimeError: no kernel"
    assert result["score"] == eager["score"]
    said = [line for line in err.splitlines() if "torch.compile" in line]
    assert said == ["annotated-transformer: warning: torch.compile of the decoding step "
                    "failed (RuntimeError: no kernel); decoding eagerly"]


# -- faults while training (issue 38) ------------------------------------------------------

def endless(tmp_path, **train) -> Path:
    "The tiny recipe with a budget it never reaches and no evaluation on the way."
    config = tmp_path / "endless.json"
    config.write_text(json.dumps({**TINY, "bleu_every": 100_000, "train": {
        **TINY["train"], "steps": 100_000, "eval_every": 100_000, **train}}))
    return config


INTERRUPTED = re.compile(r"stopped by SIGTERM at step (\d+); "
                         r"checkpoint written to (\S+); run the same command to resume")


def test_sigterm_ends_train_with_one_line_and_143(multi30k, tmp_path):
    """SIGTERM to a `train` process after its first checkpoint: the update ends, one more
    checkpoint is written, stderr holds one line that names it, and the exit status is
    128 + SIGTERM = 143, as a shell reports a signal."""
    from annotated_transformer.run.checkpoints import checkpoint_step, list_checkpoints
    out = tmp_path / "model"
    proc = subprocess.Popen(
        [sys.executable, "-m", "annotated_transformer", "train", "--model-dir", str(out),
         "--data", str(multi30k), "--config", str(endless(tmp_path, save_every=2)),
         "--threads", "1", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 180
        while not list_checkpoints(out / "checkpoints"):      # then `train` is running
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM == 143, err
    found = INTERRUPTED.fullmatch(err.strip())
    assert found, err                                   # one line, and only it
    assert Path(found[2]) == list_checkpoints(out / "checkpoints")[-1]
    assert checkpoint_step(Path(found[2])) == int(found[1])      # the step it names


def test_full_disk_ends_train_with_one_line(multi30k, tmp_path, monkeypatch, capsys):
    "The first checkpoint finds the disk full: one line, `error: ...`, and status 1."
    from annotated_transformer.run import checkpoints

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(checkpoints, "save_file", full)
    out = tmp_path / "model"
    assert main(["train", "--model-dir", str(out), "--data", str(multi30k), "--config",
                 str(endless(tmp_path, save_every=2)), "--threads", "1", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("annotated-transformer: error: no space left on device for "
                          f"checkpoint {out / 'checkpoints'}"), err
    assert "needs at least" in err and "are free" in err
    assert not checkpoints.list_checkpoints(out / "checkpoints")


def test_evaluate_json_says_when_the_aot_step_fell_back(model_dir, tmp_path,
                                                       monkeypatch, capsys):
    """--engine aot whose package cannot be built decodes eagerly: the JSON names the
    engine, gives the reason under "fallback" and the eager score."""
    from annotated_transformer import engines
    from annotated_transformer.engines import packages
    monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(engines, "_AOT", {})
    monkeypatch.setattr(packages, "_BUILD_CODE", "raise SystemExit('no compiler')")
    src = tmp_path / "src.en"
    src.write_text("A dog runs.\nTwo men talk in a park.\n")
    args = ["evaluate", "--model-dir", str(model_dir), "--source", str(src),
            "--reference", str(src), "--beam-size", "2", "--json", "--device", "cpu"]
    assert main(args + ["--precision", "fp32"]) == 0
    eager = json.loads(capsys.readouterr().out)
    assert main(args + ["--engine", "aot"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["engine"] == "aot" and result["score"] == eager["score"]
    assert result["fallback"].endswith("failed: no compiler")
    assert "precision fp32, the aot engine's" in err and "building the decoding" in err
