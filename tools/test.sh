#!/usr/bin/env bash
# The test command (`make test`): seven stages, each timed (the sixth runs beside 2-5).
# Run from the repository root.
set -euo pipefail
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
# the oldest PyTorch the package supports (pyproject.toml's floor): stage 5 installs it
TORCH_FLOOR_SPEC=${TORCH_FLOOR_SPEC:-torch==2.3.1}
BIN=$VENV/bin
# Multi30k: ../shared/data beside the repository, else $AT_SHARED_DATA, else fetched once into
# a cache; without any of them the tests would skip, so stop with the command instead.
if [ -z "${AT_SHARED_DATA:-}" ]; then
  if [ -d ../shared/data/multi30k ]; then
    AT_SHARED_DATA=$(cd ../shared/data && pwd)
  else
    AT_SHARED_DATA=${XDG_CACHE_HOME:-$HOME/.cache}/annotated_transformer/data
    echo "=== no ../shared/data/multi30k: fetching Multi30k into $AT_SHARED_DATA/multi30k"
    $BIN/python tools/fetch_multi30k.py "$AT_SHARED_DATA/multi30k" || {
      echo "Could not fetch Multi30k. Fetch it where the network allows, then rerun:" >&2
      echo "  $BIN/python tools/fetch_multi30k.py $AT_SHARED_DATA/multi30k" >&2
      exit 1; }
  fi
fi
export AT_SHARED_DATA MULTI30K_DIR=$AT_SHARED_DATA/multi30k
# Chapters that train shrink their sizes and steps when AT_QUICK is set (see the chapters).
export AT_QUICK=1
# Nothing in the tests may reach a hub.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export PYTHONHASHSEED=0
# Stages run side by side on few cores. PyTorch's OpenMP threads spin after each parallel
# region; when they share the cores with another process's, a spinning thread can hold the
# core its partner waits for. Measured on this 2-core machine (150 copy-task training steps,
# 2 threads, beside another 2-thread PyTorch process): 29.3 s by default, 13.4 s with a
# short spin (alone: 7.6 and 8.6 s). Chapter 9a's training took 553 s instead of 72 in the
# fresh runtime. The spin changes how long threads wait, never a number they compute.
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}

declare -a TIMES=()
stage() {  # stage NAME COMMAND...
  local name=$1; shift
  echo "=== stage: $name"
  local t0=$SECONDS
  "$@"
  TIMES+=("$(printf '%-28s %4ds' "$name" $((SECONDS - t0)))")
}

sync_check() {
  $BIN/nbdev-export
  if ! git diff --quiet -- annotated_transformer || [ -n "$(git ls-files --others --exclude-standard annotated_transformer)" ]; then
    git status --short -- annotated_transformer
    echo "annotated_transformer/ is out of sync with nbs/: run nbdev-export and commit" >&2
    return 1
  fi
  $BIN/python tools/nbclean.py --check
  # every number in the prose tied to an output, no narration of the book's making
  $BIN/python tools/check_prose.py
  # the repository URL lives in _config.yml; the library's copy (model downloads) must agree
  $BIN/python - <<'PY'
import yaml
from annotated_transformer.hub import REPOSITORY_URL
url = yaml.safe_load(open("_config.yml"))["repository"]["url"]
assert REPOSITORY_URL == url, f"REPOSITORY_URL {REPOSITORY_URL} != _config.yml {url}"
PY
}

nbval() {
  $BIN/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with tools/nbval_sanitize.cfg "$@"
}

# Every chapter runs, its outputs compared, in stage 6 (a fresh runtime, as a reader meets
# it; the chapters in tools/second_path.txt on a reader's AVX2 kernel path, one thread).
# Those whose outputs say where their data or model came from are compared here, in the
# checkout, beside the tests (tests/site needs the built site: stage 4 runs it).
checkout() {
  nbval --durations=12 $(grep -v '^#' tools/outputs_by_place.txt) \
    $(test -d tests && echo tests --ignore=tests/site)
}

book() {
  rm -rf book/_build
  $BIN/jupyter-book build . --path-output book -W --keep-going
  PY=$BIN/python bash tools/build_try.sh book/_build/html
}

site() {
  $BIN/python tools/check_site.py book/_build/html
  $BIN/python -m pytest -q tests/site   # the Try it page in headless Chromium
}

cli_from_wheel() {  # the installed console script: train a tiny model, translate, evaluate
  local tmp=$1 data=$MULTI30K_DIR
  local cli=$tmp/venv/bin/annotated-transformer
  cat >"$tmp/tiny.json" <<'JSON'
{"model": {"n_layers": 1, "d_model": 32, "d_ff": 64, "n_heads": 2, "max_len": 96},
 "train": {"steps": 10, "max_tokens": 512, "warmup": 5, "lr_factor": 1.0, "precision": "fp32",
           "save_every": 5, "eval_every": 5, "log_every": 5},
 "vocab_size": 300, "bleu_every": 5, "bleu_sentences": 8, "average": [1, 2],
 "select_sentences": 8, "train_pairs": 2000, "max_minutes": null}
JSON
  (cd "$tmp" \
    && "$cli" train --model-dir model --data "$data" --config tiny.json --threads 1 \
    && head -n 20 "$data/test_2016_flickr.en" >src.en \
    && head -n 20 "$data/test_2016_flickr.de" >ref.de \
    && "$cli" translate --model-dir model --beam-size 2 --threads 1 <src.en >hyp.de \
    && test "$(wc -l <hyp.de)" -eq 20 \
    && "$cli" evaluate --model-dir model --source src.en --reference ref.de --beam-size 2 \
         --threads 1 \
    && echo "installed CLI: trained, translated 20 lines, evaluated")
}

wheel() (  # a subshell: the environment change below stays here
  unset PYTHONDONTWRITEBYTECODE   # the new venv compiles what it imports, once
  local tmp; tmp=$(mktemp -d)
  $BIN/python -m build --wheel --outdir "$tmp/dist" . >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; return 1; }
  python3 -m venv "$tmp/venv"
  # the floor, not the pin: it must work too. --no-compile: not all of torch at install
  "$tmp/venv/bin/pip" install -q --no-compile $TORCH_FLOOR_SPEC
  local wheel; wheel=$(ls "$tmp"/dist/*.whl)
  "$tmp/venv/bin/pip" install -q --no-compile "$wheel[data]"
  local floor; floor=$(echo "$TORCH_FLOOR_SPEC" | sed -n 's/.*torch==\([0-9.]*\).*/\1/p')
  (cd "$tmp" && TORCH_FLOOR="$floor" "$tmp/venv/bin/python" - <<'PY'
import annotated_transformer as at, os, pathlib
assert "site-packages" in pathlib.Path(at.__file__).parts, at.__file__
names = [n for n in dir(at) if not n.startswith("_")]
print("installed", at.__version__, "from", pathlib.Path(at.__file__).parent)
print("top-level names:", ", ".join(sorted(names)))
from annotated_transformer import attention, MultiHeadAttention, TransformerConfig, make_model
import torch
print("on torch", torch.__version__)
floor = os.environ["TORCH_FLOOR"]
assert not floor or torch.__version__.split("+")[0] == floor, (torch.__version__, floor)
model = make_model(11, 11, TransformerConfig.preset("tiny"))
src = torch.tensor([[1, 5, 6, 7, 2]])
print("tiny model forward:", tuple(model(src, src).shape))
PY
  )
  cli_from_wheel "$tmp"
  rm -rf "$tmp"
)

stage "1 sync and clean" sync_check
# Stage 6 uses nothing that stages 2-5 make, and much of its time goes to pip and to work on
# one thread, as do theirs: it runs beside them, in a process group of its own (stopped if
# the command fails first); its log is printed after stage 5.
echo "=== stage: 6 every chapter in a fresh runtime, beside stages 2-5: its log follows stage 5"
fresh_log=$(mktemp)
t6=$SECONDS
setsid bash tools/fresh_runtime.sh >"$fresh_log" 2>&1 &
fresh_pid=$!
trap 'kill -- -$fresh_pid 2>/dev/null || true' EXIT
stage "2 tests, chapters by place" checkout
stage "3 book (-W)" book
stage "4 site check" site
stage "5 wheel + CLI in fresh venv" wheel
echo "=== stage 6 (fresh runtime), its log"
fresh_rc=0
wait "$fresh_pid" || fresh_rc=$?
trap - EXIT
cat "$fresh_log"
rm -f "$fresh_log"
TIMES+=("$(printf '%-28s %4ds' "6 chapters, fresh (beside)" $((SECONDS - t6)))")
[ "$fresh_rc" -eq 0 ] || { echo "stage 6 (fresh runtime) failed" >&2; exit "$fresh_rc"; }
stage "7 workflows and dists" bash tools/lint.sh

echo "=== stage times"
printf '%s\n' "${TIMES[@]}"
