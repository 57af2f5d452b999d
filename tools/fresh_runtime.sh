#!/usr/bin/env bash
# The "fresh runtime" stage: every chapter as a Colab reader meets it. For each notebook:
#   - a new virtual environment holding only what the kernel brings (PyTorch, ipykernel and
#     the scientific stack a Colab-like runtime has), never the package;
#   - the notebook copied alone into an empty folder outside the checkout: no ../shared, no
#     runs/, no models/ beside it;
#   - executed top to bottom (nbval in lax mode: every cell runs, every assertion counts),
#     its install cell running its real `pip install`. Only the URLs are swapped for local
#     stand-ins: the package from this repository at HEAD (git+file://), the shipped model
#     from an HTTP server on 127.0.0.1 serving models/, the data from a folder in the Hub's
#     layout built from ../shared.
# Usage: tools/fresh_runtime.sh [NOTEBOOK ...]   (default: every chapter in nbs/)
set -euo pipefail
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
REPO=$(pwd)
DATA=$(cd .. && pwd)/shared/data/multi30k
# what a Colab-like runtime has before the reader installs anything
KERNEL_REQS="ipykernel numpy matplotlib pandas pyarrow"
notebooks=("$@")
[ ${#notebooks[@]} -gt 0 ] || notebooks=(nbs/*.ipynb)

if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "note: the package is installed from HEAD; uncommitted changes are not tested here"
fi
tmp=$(mktemp -d)
server=""
cleanup() {  # KEEP_TMP=1 keeps the folders for a look after a failure
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  if [ -n "${KEEP_TMP:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

t0=$SECONDS
python3 -m venv "$tmp/kernel"
quiet() { "$@" >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; return 1; }; }
quiet "$tmp/kernel/bin/pip" install $TORCH_SPEC
quiet "$tmp/kernel/bin/pip" install $KERNEL_REQS
kernel_site=$("$tmp/kernel/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "kernel requirements ready ($((SECONDS - t0)) s): $TORCH_SPEC $KERNEL_REQS"

# the Hub's layout (train/val/test.jsonl), read through the same load_dataset call
hub=""
if [ -d "$DATA" ]; then
  hub=$tmp/hub_multi30k
  "$VENV/bin/python" tests/make_hub_standin.py "$DATA" "$hub" >/dev/null
else
  echo "no Multi30k files at $DATA: chapters 8 and 9 will reach for the real Hub"
fi

# the shipped model, served as the repository would serve it
port=$("$VENV/bin/python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
mkdir -p "$tmp/www"
[ -d models ] && cp -r models/. "$tmp/www/"
"$VENV/bin/python" -m http.server "$port" --bind 127.0.0.1 --directory "$tmp/www" \
  >"$tmp/http.log" 2>&1 &
server=$!

cat >"$tmp/pytest.ini" <<'INI'
[pytest]
addopts = -p no:cacheprovider
INI

failed=()
for nb in "${notebooks[@]}"; do
  name=$(basename "$nb" .ipynb)
  t1=$SECONDS
  env_dir=$tmp/venv_$name run=$tmp/run_$name
  python3 -m venv "$env_dir"
  site=$("$env_dir/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$kernel_site" >"$site/_kernel_requirements.pth"
  mkdir -p "$tmp/jupyter/kernels/$name" "$run"
  cat >"$tmp/jupyter/kernels/$name/kernel.json" <<JSON
{"argv": ["$env_dir/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
 "display_name": "fresh $name", "language": "python"}
JSON
  cp "$nb" "$run/"
  if (cd "$run" && env -u PYTHONPATH -u VIRTUAL_ENV -u MULTI30K_DIR -u AT_TRANSLATION_DIR \
        JUPYTER_PATH="$tmp/jupyter" AT_QUICK=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
        MPLBACKEND=Agg AT_CACHE_DIR="$tmp/cache_$name" \
        AT_PACKAGE_URL="git+file://localhost$REPO@$(git -C "$REPO" rev-parse HEAD)" \
        AT_MODEL_URL="http://127.0.0.1:$port/multi30k_en_de" \
        ${hub:+AT_MULTI30K_HUB="$hub"} \
        "$REPO/$VENV/bin/python" -m pytest -c "$tmp/pytest.ini" --rootdir "$run" -q \
          --nbval-lax --nbval-kernel-name "$name" "$(basename "$nb")" >"$tmp/$name.log" 2>&1)
  then
    echo "fresh runtime: $name passed ($((SECONDS - t1)) s)"
  else
    cat "$tmp/$name.log"
    echo "fresh runtime: $name FAILED ($((SECONDS - t1)) s)"
    failed+=("$name")
  fi
  # the package must have come from the install cell, not from anywhere else
  (cd "$run" && "$env_dir/bin/python" -c "import annotated_transformer as m, sys; sys.exit(0 if '$env_dir' in m.__file__ else 1)") \
    || { echo "fresh runtime: $name did not install the package into its own venv"; failed+=("$name"); }
done
echo "fresh runtime: ${#notebooks[@]} chapters in $((SECONDS - t0)) s"
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}" >&2; exit 1; }
