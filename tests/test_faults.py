"""Faults end in one clear line, with nothing lost (issue 38).

- A full disk while a checkpoint is written: one line naming the checkpoint and the bytes it
  needs, the previous checkpoint intact and loadable, no temporary folder left.
- Durability: the files of a checkpoint and the folders around them are flushed (fsync).
- SIGTERM or SIGINT while `train` runs: the update ends, a checkpoint is written, the run
  stops with `TrainingInterrupted` (exit status 128 + signum, one line on stderr), and the
  same command resumes it bit for bit.

Run as a script, this file is the driver of the SIGTERM test: tests/train_copy.py, with
`TrainingInterrupted` left uncaught (the line on stderr is the one `train` writes).
"""
import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from annotated_transformer.run import checkpoints, trainer
from annotated_transformer.run.checkpoints import (
    checkpoint_dir, list_checkpoints, load_checkpoint, model_tensors, save_checkpoint)
from annotated_transformer.run.durable import CheckpointWriteError, replace_durably, write_durably
from annotated_transformer.model import TransformerConfig, make_model
from annotated_transformer.run.processes import TrainingInterrupted
from annotated_transformer.run.trainer import TrainConfig, train
from annotated_transformer.training import make_optimizer
from annotated_transformer.run.checkpoints import log_metrics, read_metrics, truncate_metrics
from annotated_transformer.run.pretrained import save_translator

import train_copy                                  # tests/train_copy.py

PAIRS = [([5, 6, 7][:n % 3 + 1], [8, 9][:n % 2 + 1]) for n in range(30)]
TINY = TrainConfig(steps=6, max_tokens=32, warmup=4, precision="fp32", log_every=2,
                   save_every=3, progress=False)


def tiny_model():
    torch.manual_seed(0)
    return make_model(16, 16, TransformerConfig.preset("tiny"))


def saved_run(tmp_path):
    "A model, its optimizer, and a first checkpoint (step 1) in tmp_path/run."
    model = tiny_model()
    optimizer, scheduler = make_optimizer(model, model.config.d_model, warmup=10)
    first = save_checkpoint(checkpoint_dir(tmp_path / "run", 1), model,
                            optimizer=optimizer, scheduler=scheduler, state={"step": 1})
    return model, optimizer, first


def needed_bytes(model, optimizer) -> int:
    "What save_checkpoint estimates: the bytes of every tensor it writes."
    tensors = {}
    checkpoints._to_json({"optimizer": optimizer.state_dict(),
                          "rng": [checkpoints.rng_state()]}, tensors)
    return sum(t.numel() * t.element_size()
               for t in [*model_tensors(model).values(), *tensors.values()])


def assert_intact(run_dir: Path, first: Path, model):
    "Only the first checkpoint is there, complete, and it loads into a fresh model."
    assert sorted(p.name for p in run_dir.iterdir()) == [first.name]
    fresh = make_model(16, 16, TransformerConfig.preset("tiny"))
    assert load_checkpoint(first, fresh) == {"step": 1}
    assert all(torch.equal(p, q) for p, q in zip(fresh.parameters(), model.parameters()))


# -- a full disk --------------------------------------------------------------------------

def enospc_from_python(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def enospc_from_safetensors(*args, **kwargs):     # its words, on a full tmpfs
    raise SafetensorError("Error while serializing: I/O error: No space left on device "
                          "(os error 28)")


def second_write_fails(how):
    "The weights file is written whole, then the trainer file finds the disk full."
    calls, real = [], checkpoints.save_file

    def write(tensors, filename, metadata=None):
        calls.append(filename)
        if len(calls) == 1:
            return real(tensors, filename, metadata=metadata)
        Path(filename).write_bytes(b"\0" * 100)                 # a partial file
        how()
    return write


@pytest.mark.parametrize("writer", [lambda: enospc_from_python,
                                    lambda: enospc_from_safetensors,
                                    lambda: second_write_fails(enospc_from_safetensors)],
                         ids=["oserror", "safetensors", "second-file"])
@pytest.mark.parametrize("step", [2, 1], ids=["new-step", "same-step"])
def test_full_disk_is_one_line_and_loses_nothing(tmp_path, monkeypatch, writer, step):
    model, optimizer, first = saved_run(tmp_path)
    monkeypatch.setattr(checkpoints, "save_file", writer())
    path = checkpoint_dir(tmp_path / "run", step)
    with pytest.raises(CheckpointWriteError) as caught:
        save_checkpoint(path, model, optimizer=optimizer)
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, OSError)
    assert caught.value.errno == errno.ENOSPC
    assert str(path) in message
    assert f"needs at least {needed_bytes(model, optimizer):,} bytes" in message
    assert re.search(r"[\d,]+ bytes( \([\d.]+ \w+\))? are free", message), message
    monkeypatch.undo()
    assert_intact(tmp_path / "run", first, model)


def test_full_disk_when_flushing(tmp_path, monkeypatch):
    "Some file systems report a full disk only when the data is flushed."
    model, optimizer, first = saved_run(tmp_path)
    monkeypatch.setattr(os, "fsync", enospc_from_python)
    with pytest.raises(CheckpointWriteError, match="needs at least"):
        save_checkpoint(checkpoint_dir(tmp_path / "run", 2), model, optimizer=optimizer)
    monkeypatch.undo()
    assert_intact(tmp_path / "run", first, model)


def test_other_write_errors_pass_through(tmp_path, monkeypatch):
    model, optimizer, first = saved_run(tmp_path)

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(checkpoints, "save_file", denied)
    with pytest.raises(PermissionError):
        save_checkpoint(checkpoint_dir(tmp_path / "run", 2), model, optimizer=optimizer)
    monkeypatch.undo()
    assert_intact(tmp_path / "run", first, model)


def test_train_lets_the_full_disk_through(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "save_file", enospc_from_python)
    with pytest.raises(CheckpointWriteError) as caught:
        train(tiny_model(), PAIRS, config=TINY, run_dir=tmp_path / "run")
    assert str(checkpoint_dir(tmp_path / "run", TINY.save_every)) in str(caught.value)
    assert not list(Path(tmp_path / "run").glob("step_*"))


def test_a_real_full_disk(tmp_path):
    "A tmpfs too small for the checkpoint, where this process may mount one (root)."
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                       check=True, capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot mount a tmpfs here")
    try:
        model = make_model(16, 16, TransformerConfig.preset("tiny", d_model=64, d_ff=256))
        optimizer, _ = make_optimizer(model, model.config.d_model, warmup=10)
        with pytest.raises(CheckpointWriteError) as caught:
            save_checkpoint(checkpoint_dir(disk, 1), model, optimizer=optimizer)
        assert "\n" not in str(caught.value) and str(disk) in str(caught.value)
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(disk)], check=True, timeout=20)


# -- durability ---------------------------------------------------------------------------

def record_fsyncs(monkeypatch) -> list[Path]:
    "Replace os.fsync by one that notes the path of each descriptor, then flushes."
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name a descriptor's file")
    flushed, real = [], os.fsync

    def fsync(fd):
        flushed.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    return flushed


def test_a_checkpoint_is_flushed_before_and_after_its_rename(tmp_path, monkeypatch):
    model, optimizer, _ = saved_run(tmp_path)
    flushed = record_fsyncs(monkeypatch)
    path = save_checkpoint(checkpoint_dir(tmp_path / "run", 2), model, optimizer=optimizer)
    tmp = next(p.parent for p in flushed if p.name == "model.safetensors")
    assert tmp.parent == path.parent and tmp.name.startswith(f".{path.name}.")  # staged
    for name in ("model.safetensors", "trainer.safetensors"):
        assert tmp / name in flushed, (name, flushed)
    assert tmp in flushed                                  # the new folder's entries
    assert flushed[-1] == tmp_path / "run"                 # the rename, last
    assert flushed.index(tmp) < len(flushed) - 1


def test_replace_durably_a_file(tmp_path, monkeypatch):
    flushed = record_fsyncs(monkeypatch)
    (tmp_path / "part").write_text("whole")
    replace_durably(tmp_path / "part", tmp_path / "file")
    assert flushed == [tmp_path / "part", tmp_path]
    assert (tmp_path / "file").read_text() == "whole"


def test_a_download_is_flushed_before_and_after_each_rename(tmp_path, monkeypatch):
    """A model downloaded into the cache (part 11a), from a server on 127.0.0.1: each file
    reaches the disk under its temporary name, then the folder's entries after its rename;
    config.json, which marks the folder whole, last."""
    import functools
    import hashlib
    import http.server
    from annotated_transformer.formats import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE
    from annotated_transformer.run.hub import download_model

    remote = tmp_path / "www/toy"
    remote.mkdir(parents=True)
    files = {WEIGHTS_FILE: b"weights", TOKENIZER_FILE: b"pieces"}
    for name, data in files.items():
        (remote / name).write_bytes(data)
    (remote / CONFIG_FILE).write_text(json.dumps(
        {"files": {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}}))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=tmp_path / "www"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        flushed = record_fsyncs(monkeypatch)
        folder = download_model(f"http://127.0.0.1:{server.server_address[1]}/toy",
                                cache_dir=tmp_path / "cache", progress=False)
    finally:
        server.shutdown()
        server.server_close()
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == {
        **files, CONFIG_FILE: (remote / CONFIG_FILE).read_bytes()}
    # config.json to a temporary name, the two files, config.json into place: each file
    # flushed, then its folder
    assert flushed[1::2] == [folder] * 4, flushed
    names = [p.name for p in flushed[0::2]]
    config, weights, tokenizer = (re.escape(n) for n in (CONFIG_FILE, WEIGHTS_FILE,
                                                         TOKENIZER_FILE))
    patterns = [rf"\.\.{config}\.[^.]+\..+", rf"\.{weights}\..+",
                rf"\.{tokenizer}\..+", rf"\.{config}\.[^.]+"]
    assert len(names) == 4 and all(map(re.fullmatch, patterns, names)), names
    assert all(p.parent == folder for p in flushed[0::2])


def test_no_folder_flush_where_folders_cannot_be_opened(tmp_path, monkeypatch):
    "As on Windows: opening a folder fails; the files are still flushed and renamed."
    flushed, real_open = record_fsyncs(monkeypatch), os.open

    def open_no_folders(path, flags, *args):
        if Path(path).is_dir():
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args)
    monkeypatch.setattr(os, "open", open_no_folders)
    model, optimizer, _ = saved_run(tmp_path)
    path = save_checkpoint(checkpoint_dir(tmp_path / "run", 2), model, optimizer=optimizer)
    assert sorted(p.name for p in path.iterdir()) == ["model.safetensors",
                                                      "trainer.safetensors"]
    assert flushed and all(p.suffix == ".safetensors" for p in flushed)


# -- signals, in this process -------------------------------------------------------------

def test_second_signal_during_the_save_is_ignored(tmp_path, monkeypatch):
    "SIGTERM after update two; a SIGINT while its checkpoint is written changes nothing."
    real = trainer.save_checkpoint

    def save_then_interrupt(path, *args, **kwargs):
        signal.raise_signal(signal.SIGINT)
        return real(path, *args, **kwargs)

    def hook(step, path):
        if step == TINY.save_every:
            signal.raise_signal(signal.SIGTERM)
            monkeypatch.setattr(trainer, "save_checkpoint", save_then_interrupt)
    before = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)]
    with pytest.raises(TrainingInterrupted) as caught:
        train(tiny_model(), PAIRS, config=TINY, run_dir=tmp_path / "run", on_checkpoint=hook)
    e, step = caught.value, TINY.save_every + 1
    assert e.signum == signal.SIGTERM and e.code == 128 + signal.SIGTERM
    assert e.step == step and e.path == checkpoint_dir(tmp_path / "run", step)
    assert str(e) == (f"stopped by SIGTERM at step {step}; checkpoint written to "
                      f"{e.path}; run the same command to resume")
    assert load_checkpoint(e.path, tiny_model())["step"] == step
    assert [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)] == before


def test_sigint_without_run_dir(monkeypatch):
    def step_then_interrupt(*args, **kwargs):
        out = real(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)
        return out
    real = trainer.accumulated_step
    monkeypatch.setattr(trainer, "accumulated_step", step_then_interrupt)
    with pytest.raises(TrainingInterrupted) as caught:
        train(tiny_model(), PAIRS, config=TINY)
    assert caught.value.code == 130 and caught.value.path is None
    assert str(caught.value) == ("stopped by SIGINT at step 1; no run_dir, so no "
                                 "checkpoint was written")


def test_a_metrics_line_cut_short_is_left_out(tmp_path):
    "A process killed while appending a log line leaves part of it: reading drops it."
    log = tmp_path / "metrics.jsonl"
    log_metrics(log, {"step": 1, "loss": 2.0})
    with open(log, "a") as f:
        f.write('{"step": 2, "lo')
    assert read_metrics(log) == [{"step": 1, "loss": 2.0}]
    truncate_metrics(log, 1)                          # as a resumed run does
    assert log.read_text() == '{"step": 1, "loss": 2.0}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_a_full_disk_leaves_a_rewritten_record_as_it_was(tmp_path, monkeypatch):
    "recipe.json, or a resumed run's metrics log, is rewritten whole or not at all."
    record, real = tmp_path / "recipe.json", Path.write_text
    record.write_text("old\n")

    def full(self, text, *args, **kwargs):           # a disk that fills mid-write
        real(self, text[:1])
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(CheckpointWriteError) as caught:
        write_durably(record, "new\n")
    monkeypatch.undo()
    assert str(caught.value).startswith(f"no space left on device for file {record}: ")
    assert "\n" not in str(caught.value) and caught.value.errno == errno.ENOSPC
    assert record.read_text() == "old\n" and list(tmp_path.iterdir()) == [record]


def test_train_in_a_thread_runs_without_handlers():
    before, done = signal.getsignal(signal.SIGTERM), []
    worker = threading.Thread(
        target=lambda: done.append(train(tiny_model(), PAIRS, config=TINY)))
    worker.start()
    worker.join(timeout=60)
    assert done and len(done[0]) == TINY.steps // TINY.log_every
    assert signal.getsignal(signal.SIGTERM) == before


# -- SIGTERM from outside, then the same command ------------------------------------------

STEPS, SAVE_EVERY = 48, 6      # steps to spare: the signal may find the run a few later
ARGS = ["--steps", str(STEPS), "--save-every", str(SAVE_EVERY), "--log-every", "4",
        "--eval-every", "12", "--max-tokens", "512", "--d-model", "32", "--d-ff", "64",
        "--seed", "3"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
LINE = re.compile(r"stopped by SIGTERM at step (\d+); checkpoint written to (\S+); "
                  r"run the same command to resume")


def run_here(run_dir):
    "The same command in this process (no second start of torch), on one thread."
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_copy.main(["--run-dir", str(run_dir), *ARGS])
    finally:
        torch.set_num_threads(threads)


def final_state(run_dir):
    ckpt = checkpoint_dir(run_dir, STEPS)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    losses = [(r["step"], r["loss"]) for r in map(json.loads, lines) if "loss" in r]
    return (load_file(ckpt / "model.safetensors"),
            load_file(ckpt / "trainer.safetensors"), losses,
            [p.name for p in list_checkpoints(run_dir)])


def test_sigterm_checkpoints_stops_and_resumes_exactly(tmp_path):
    "A process sent SIGTERM after its first checkpoint; resumed, it ends as if unbroken."
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, __file__, "--run-dir", str(stopped), *ARGS],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while not (stopped.is_dir() and list_checkpoints(stopped)):
        assert proc.poll() is None, "the run ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    run_here(whole)                                 # meanwhile, the unbroken run
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    found = LINE.fullmatch(err.strip())
    assert found, err                               # one line on stderr, and only it
    step, path = int(found[1]), Path(found[2])
    assert SAVE_EVERY < step < STEPS, step          # wherever the signal found the run
    assert list_checkpoints(stopped)[-1] == path == checkpoint_dir(stopped, step)

    run_here(stopped)                               # the same command resumes
    (w1, t1, l1, kept1), (w2, t2, l2, kept2) = final_state(whole), final_state(stopped)
    assert w1.keys() == w2.keys() and t1.keys() == t2.keys()
    for name in w1:
        assert torch.equal(w1[name], w2[name]), name
    for name in t1:                            # Adam moments, step counts, RNG states
        assert torch.equal(t1[name], t2[name]), name
    assert l1 == l2 and l1[-1][0] == STEPS     # log lines across the stop included
    assert kept1 == kept2                      # the signal's (if off the grid) is gone


if __name__ == "__main__":        # the SIGTERM test's driver: `TrainingInterrupted` uncaught
    train_copy.main(sys.argv[1:])


def tiny_translator():
    "A tiny model with the shipped tokenizer: what `save_translator` writes, small."
    from annotated_transformer.data import load_tokenizer
    from annotated_transformer.translator import Translator
    sp = load_tokenizer(Path(__file__).resolve().parents[1]
                        / "models/multi30k_en_de/tokenizer.model")
    torch.manual_seed(0)
    size = sp.get_piece_size()
    return Translator(make_model(size, size, TransformerConfig.preset("tiny")), sp)


MODEL_FILES = ("model.safetensors", "tokenizer.model", "config.json")


def test_a_model_directory_is_flushed_before_and_after_each_rename(tmp_path,
                                                                   monkeypatch):
    translator = tiny_translator()
    flushed = record_fsyncs(monkeypatch)
    folder = save_translator(translator, tmp_path / "model")
    # each file under a temporary name, flushed, renamed into place, then its folder
    assert [p.name.split(".")[1:3] for p in flushed[0::2]] == [
        n.split(".") for n in MODEL_FILES]                    # .model.safetensors.x1y2
    assert flushed[1::2] == [folder] * 3, flushed
    assert sorted(p.name for p in folder.iterdir()) == sorted(MODEL_FILES)


def test_a_full_disk_while_saving_a_model_is_one_line(tmp_path, monkeypatch):
    translator = tiny_translator()
    folder = save_translator(translator, tmp_path / "model")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def no_room(*args, **kwargs):          # what safetensors raises on a full disk
        raise SafetensorError("Error while serializing: I/O error: No space left on "
                              "device (os error 28)")
    monkeypatch.setattr(checkpoints, "save_file", no_room)
    with pytest.raises(CheckpointWriteError) as caught:
        save_translator(translator, folder)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(
        f"no space left on device for model directory {folder}: it needs at least ")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before   # no .tmp left


def test_an_export_replaces_its_folder_whole(tmp_path, monkeypatch):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.onnx").write_text("old")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "new.onnx").write_text("new")
    flushed = record_fsyncs(monkeypatch)
    replace_durably(tmp_path / "new", tmp_path / "out")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["new.onnx"]
    assert flushed[:2] == [tmp_path / "new" / "new.onnx", tmp_path / "new"]
    assert flushed[-1] == tmp_path                       # the rename, on the disk


def test_replacing_a_folder_leaves_the_users_other_folders_alone(tmp_path):
    "The old folder is moved aside under a name of its own, not over `<dest>.old`."
    for name in ("out", "new", "out.old"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x").write_text(name)
    replace_durably(tmp_path / "new", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.old"]
    assert [(tmp_path / n / "x").read_text() for n in ("out", "out.old")] == [
        "new", "out.old"]


def test_one_file_rewritten_keeps_no_temporary_file_on_any_error(tmp_path):
    "An error that is not a full disk passes through unchanged, and cleans up."
    from annotated_transformer.run.durable import write_files

    def denied(path):
        path.write_text("half")
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    with pytest.raises(PermissionError):
        write_files(tmp_path, {"a.txt": denied}, needed=4)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_cannot_take_its_place_leaves_the_old_one(tmp_path, monkeypatch):
    "The second rename of a folder swap fails (a file held open): the old folder returns."
    for name in ("out", "new"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x").write_text(name)
    real = os.replace

    def held(src, dest):
        if Path(src).name == "new":
            raise PermissionError(errno.EACCES, "Permission denied", str(src))
        return real(src, dest)
    monkeypatch.setattr(os, "replace", held)
    with pytest.raises(PermissionError):
        replace_durably(tmp_path / "new", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "out"]
    assert (tmp_path / "out" / "x").read_text() == "out"


def test_a_full_disk_while_logging_is_one_line(tmp_path, monkeypatch):
    "The metrics log cannot grow: one line naming it, and the records before it stay."
    log = tmp_path / "metrics.jsonl"
    log_metrics(log, {"step": 1, "loss": 2.0})
    real_open = open

    def full(path, mode="r", *args, **kwargs):
        if Path(path) == log and "a" in mode:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *args, **kwargs)
    monkeypatch.setattr("builtins.open", full)
    with pytest.raises(CheckpointWriteError) as caught:
        log_metrics(log, {"step": 2, "loss": 1.5})
    monkeypatch.undo()
    assert str(caught.value).startswith(f"no space left on device for metrics log {log}")
    assert "\n" not in str(caught.value) and read_metrics(log) == [{"step": 1, "loss": 2.0}]


def test_staged_names_are_the_writers_own(tmp_path):
    "A checkpoint is staged under a hidden name of its own, not over `<step>.tmp`."
    model, optimizer, _ = saved_run(tmp_path)
    mine = checkpoint_dir(tmp_path / "run", 2).with_name("step_00000002.tmp")
    mine.mkdir(parents=True)
    (mine / "keep.txt").write_text("mine")
    save_checkpoint(checkpoint_dir(tmp_path / "run", 2), model, optimizer=optimizer)
    assert (mine / "keep.txt").read_text() == "mine"


def test_a_run_clears_what_a_killed_save_left(tmp_path):
    "A checkpoint staged when the process was killed: the next run deletes it, and the rest."
    run = tmp_path / "run"
    (run / ".step_00000004.k1ll3d00").mkdir(parents=True)    # staged, never renamed
    (run / ".step_00000004.k1ll3d00" / "model.safetensors").write_bytes(b"half")
    (run / ".notes").write_text("mine")
    train(tiny_model(), PAIRS, config=TINY, run_dir=run)
    hidden = sorted(p.name for p in run.iterdir() if p.name.startswith("."))
    assert hidden == [".notes"], hidden


def test_clear_staged_puts_back_an_old_folder_that_lost_its_replacement(tmp_path):
    "Killed between a swap's two renames: the folder moved aside is the only copy."
    from annotated_transformer.run.durable import clear_staged
    (tmp_path / ".out.4242.old").mkdir()
    (tmp_path / ".out.4242.old" / "x").write_text("old")
    (tmp_path / ".out.q8r7s6t5").mkdir()                  # its replacement, half written
    assert clear_staged(tmp_path) == [tmp_path / ".out.q8r7s6t5"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (tmp_path / "out" / "x").read_text() == "old"
