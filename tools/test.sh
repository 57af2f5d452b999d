#!/usr/bin/env bash
# The test command (`make test`): seven stages, each timed. Run from the repository root.
set -euo pipefail
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
BIN=$VENV/bin
# Chapters that train shrink their sizes and steps when AT_QUICK is set (see the chapters).
export AT_QUICK=1
# Nothing in the tests may reach a hub.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export PYTHONHASHSEED=0

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
  # the repository URL lives in _config.yml; the library's copy (model downloads) must agree
  $BIN/python - <<'PY'
import yaml
from annotated_transformer.hub import REPOSITORY_URL
url = yaml.safe_load(open("_config.yml"))["repository"]["url"]
assert REPOSITORY_URL == url, f"REPOSITORY_URL {REPOSITORY_URL} != _config.yml {url}"
PY
}

notebooks() {
  $BIN/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with tools/nbval_sanitize.cfg \
    nbs $(test -d tests && echo tests)
}

book() {
  rm -rf book/_build
  $BIN/jupyter-book build . --path-output book -W --keep-going
}

site() {
  $BIN/python tools/check_site.py book/_build/html
}

cli_from_wheel() {  # the installed console script: train a tiny model, translate, evaluate
  local tmp=$1 data; data=$(cd .. && pwd)/shared/data/multi30k
  if [ ! -d "$data" ]; then echo "no Multi30k files at $data: CLI check skipped"; return; fi
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

wheel() {
  local tmp; tmp=$(mktemp -d)
  $BIN/python -m build --wheel --outdir "$tmp/dist" . >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; return 1; }
  python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install -q $TORCH_SPEC
  local wheel; wheel=$(ls "$tmp"/dist/*.whl)
  "$tmp/venv/bin/pip" install -q "$wheel[data]"
  (cd "$tmp" && "$tmp/venv/bin/python" - <<'PY'
import annotated_transformer as at, pathlib
assert "site-packages" in pathlib.Path(at.__file__).parts, at.__file__
names = [n for n in dir(at) if not n.startswith("_")]
print("installed", at.__version__, "from", pathlib.Path(at.__file__).parent)
print("top-level names:", ", ".join(sorted(names)))
from annotated_transformer import attention, MultiHeadAttention, TransformerConfig, make_model
import torch
model = make_model(11, 11, TransformerConfig.preset("tiny"))
src = torch.tensor([[1, 5, 6, 7, 2]])
print("tiny model forward:", tuple(model(src, src).shape))
PY
  )
  cli_from_wheel "$tmp"
  rm -rf "$tmp"
}

stage "1 sync and clean" sync_check
stage "2 notebooks (nbval)" notebooks
stage "3 book (-W)" book
stage "4 site check" site
stage "5 wheel + CLI in fresh venv" wheel
stage "6 fresh runtime (chapters)" bash tools/fresh_runtime.sh
stage "7 workflows and dists" bash tools/lint.sh

echo "=== stage times"
printf '%s\n' "${TIMES[@]}"
