#!/usr/bin/env bash
# The test command (`make test`): seven stages, each timed (3-4, 5 and 6 run beside 2).
# Run from the repository root.
set -euo pipefail
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
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
# Chapters run shrunk when AT_QUICK is set: the sizes tools/shrunk.json gives a chapter run
# right after its cell tagged `parameters`, inserted by the tooling, never written into the
# notebook (tools/shrunk.py; the root conftest.py for nbval here, tools/fresh_runtime.sh for
# its copies). No notebook reads AT_QUICK (tools/nbclean.py --check).
export AT_QUICK=1
# Nothing in the tests may reach a hub.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export PYTHONHASHSEED=0
# The virtual environment is installed without bytecode (Makefile: --no-compile): each module
# is compiled when first imported and kept, so the many processes below compile it once.
unset PYTHONDONTWRITEBYTECODE
# Stages run side by side on few cores. PyTorch's OpenMP threads spin after each parallel
# region; when they share the cores with another process's, a spinning thread can hold the
# core its partner waits for. Measured on this 2-core machine (150 copy-task training steps,
# 2 threads, beside another 2-thread PyTorch process): 29.3 s by default, 13.4 s with a
# short spin (alone: 7.6 and 8.6 s). Chapter 9a's training took 553 s instead of 72 in the
# fresh runtime. The spin changes how long threads wait, never a number they compute.
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}
# Every temporary file of the run (the chapters' folders, builds, pip's, pytest's, Inductor's
# cache) goes to one folder of its own, deleted when the command ends, however it ends: runs
# on one machine must not fill its disk, and each run compiles afresh, as on a new machine.
# So does the datasets library's cache, which keeps an Arrow copy of every folder of text
# files it is given (each test's folder, each run's copy of ../shared) in the user's home.
# KEEP_TMP=1 keeps it (and the stages' logs and folders in it) for a look after a failure.
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/at-test.XXXXXX")
export TMPDIR=$run_tmp HF_DATASETS_CACHE=$run_tmp/hf_datasets
remove_tmp() {  # never the run's verdict: a folder that will not go is said, not failed
  if [ -n "${KEEP_TMP:-}" ]; then echo "kept $run_tmp"
  else rm -rf "$run_tmp" 2>/dev/null || echo "could not remove all of $run_tmp"; fi
}
trap remove_tmp EXIT

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
from annotated_transformer.translator import REPOSITORY_URL
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
  nbval --durations=30 $(grep -v '^#' tools/outputs_by_place.txt) \
    $(test -d tests && echo tests --ignore=tests/site)
}

book_and_site() {  # stage 3, the book, then stage 4, its check; each one's time said
  local t=$SECONDS
  rm -rf book/_build
  $BIN/jupyter-book build . --path-output book -W --keep-going
  PY=$BIN/python bash tools/build_try.sh book/_build/html
  echo "stage 3, the book: $((SECONDS - t)) s"; t=$SECONDS
  $BIN/python tools/check_site.py book/_build/html
  $BIN/python -m pytest -q tests/site   # the Try it page in headless Chromium
  echo "stage 4, the site check: $((SECONDS - t)) s"
}

stage "1 sync and clean" sync_check
# Stages 3-6 use nothing that stage 2 makes, much of their time goes to pip (the network)
# and to work on one thread, and the book (stage 3, then its check, stage 4) leaves a core
# idle if it runs alone after stage 2: they run beside stage 2, each in a process group of its
# own (stopped if the command fails first); their logs are printed after stage 2.
declare -A beside_pid=() beside_log=() beside_t0=()
beside() {  # beside NAME COMMAND...: start it in the background
  local name=$1; shift
  beside_log[$name]=$(mktemp) beside_t0[$name]=$SECONDS
  echo "=== stage: $name, beside stage 2: its log follows stage 2"
  VENV=$VENV TORCH_SPEC=$TORCH_SPEC BIN=$BIN setsid "$@" >"${beside_log[$name]}" 2>&1 &
  beside_pid[$name]=$!
}
collect() {  # collect NAME: wait for it, print its log, fail if it failed
  local rc=0
  wait "${beside_pid[$1]}" || rc=$?
  echo "=== stage $1, its log"
  cat "${beside_log[$1]}"
  rm -f "${beside_log[$1]}"
  TIMES+=("$(printf '%-28s %4ds' "$1 (beside)" $((SECONDS - ${beside_t0[$1]})))")
  [ "$rc" -eq 0 ] || { echo "stage $1 failed" >&2; exit "$rc"; }
}
beside "6 chapters, fresh" bash tools/fresh_runtime.sh
beside "5 wheel + CLI" bash tools/test_wheel.sh
export -f book_and_site
beside "3-4 book (-W), site check" bash -c "set -euo pipefail; book_and_site"
trap 'for p in "${beside_pid[@]}"; do kill -- -"$p" 2>/dev/null || true; done
      wait "${beside_pid[@]}" 2>/dev/null || true; remove_tmp' EXIT
stage "2 tests, chapters by place" checkout
collect "3-4 book (-W), site check"
collect "5 wheel + CLI"
collect "6 chapters, fresh"
trap remove_tmp EXIT
stage "7 workflows and dists" bash tools/lint.sh

echo "=== stage times"
printf '%s\n' "${TIMES[@]}"
