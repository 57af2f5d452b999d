#!/usr/bin/env bash
# The test command's fifth stage (tools/test.sh runs it beside stages 2-4): the package as a
# user installs it. Builds the wheel, installs it with its [data] extra into a new virtual
# environment on the oldest PyTorch it supports, imports it, and runs the installed console
# script: train a tiny model, translate, evaluate. Run from the repository root.
set -euo pipefail
VENV=${VENV:-.venv}
BIN=$VENV/bin
# the oldest PyTorch the package supports (pyproject.toml's floor)
TORCH_FLOOR_SPEC=${TORCH_FLOOR_SPEC:-torch==2.3.1}
MULTI30K_DIR=${MULTI30K_DIR:?set MULTI30K_DIR to the Multi30k files}

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

t0=$SECONDS
wheel
echo "wheel stage: $((SECONDS - t0)) s"
