#!/usr/bin/env bash
# The chapters' stage: every chapter as a Colab reader meets it, its stored outputs compared.
# For each notebook:
#   - a virtual environment holding only what the kernel brings (PyTorch, ipykernel and
#     the scientific stack a Colab-like runtime has, on Colab's Python 3.12 where this machine
#     has it; kept between runs, as a runtime's image is) and what the chapter's own install
#     requirement installs. Chapters whose install cells name the same requirement (the
#     cells are one template, tools/nbclean.py) share one environment, made new for the
#     first of them, whose cell runs the real `pip install`; the others find the package
#     installed and skip pip. So each of the six requirements is installed from the real
#     URL and ref once per run, not once per chapter (Colab gives each notebook a runtime
#     of its own);
#   - the notebook copied alone into an empty folder outside the checkout: no ../shared, no
#     runs/, no models/ beside it;
#   - executed top to bottom under nbval: every cell runs, every assertion counts, and every
#     output is compared with the stored one (sanitized as tools/nbval_sanitize.cfg says).
#     The chapters listed in tools/second_path.txt run on a reader's other kernel path (AVX2
#     without bf16, emulated; one thread), so that their stored outputs, which come from a run
#     on this machine's own kernels, must hold on both.
#     The chapters listed in tools/outputs_by_place.txt print where their data or model came
#     from, which differs here by design: they run with their outputs not compared (nbval's
#     lax mode), and the test command compares them in the checkout.
# Only hosts are swapped, never refs or paths: git's `url.<mirror>.insteadOf` sends
# github.com/<org>/<repo> to a bare mirror of this repository holding its branches and tags;
# AT_MODEL_HOST sends the model download to tools/raw_server.py, which answers
# /<org>/<repo>/<ref>/<path> from `git show <ref>:<path>` in that mirror (404 otherwise); the
# data comes from a folder in the Hub's layout built from ../shared. A ref or file that the
# repository lacks fails here as it fails for a reader.
# What the mirror's main holds: main itself on a clean checkout of main (CI). Anywhere else
# (uncommitted changes, another branch) it holds a snapshot of the working tree, untracked
# files that git does not ignore included, so that the test command tests the code in front
# of it; the script says so when it does.
# Chapters run in full, except those in SHRUNK below, whose full runs take minutes; with
# AT_QUICK set (the test command sets it) every chapter runs shrunk, as in the checkout.
# A shrunk chapter runs with the code tools/shrunk.json gives it inserted after its cell
# tagged `parameters`, in the copy (tools/shrunk.py); its kernel never sees AT_QUICK.
# Usage: tools/fresh_runtime.sh [NOTEBOOK ...]   (default: every chapter in nbs/)
set -euo pipefail
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
REPO=$(pwd)
DATA=${MULTI30K_DIR:-$(cd .. && pwd)/shared/data/multi30k}
# what a Colab-like runtime has before the reader installs anything
KERNEL_REQS="ipykernel numpy matplotlib pandas pyarrow"
notebooks=("$@")
[ ${#notebooks[@]} -gt 0 ] || notebooks=(nbs/*.ipynb)

URL=$(grep -A2 '^repository:' _config.yml | sed -n 's/^ *url: *//p')   # https://github.com/<org>/<repo>
ORG_REPO=${URL#https://github.com/}
# Colab's Python where this machine has it (pyenv's shims answer only for the global version)
KERNEL_PYTHON=python3
for p in python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
  if "$p" -c "import sys; assert sys.version_info[:2] == (3, 12)" 2>/dev/null; then
    KERNEL_PYTHON=$p; break
  fi
done
tmp=$(mktemp -d)
server=""
cleanup() {  # KEEP_TMP=1 keeps the folders for a look after a failure
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  if [ -n "${KEEP_TMP:-}" ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

t0=$SECONDS
quiet() { "$@" >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; return 1; }; }
# What the kernel brings is kept between runs, as a hosted runtime's image is: PyTorch with
# its CUDA libraries is gigabytes from PyPI (minutes to fetch and unpack). One environment
# per Python, requirements and ISO week (unpinned packages are fetched anew each week), made
# under a lock and marked complete last, so an interrupted one is made again; those made over
# a week ago are removed. The chapters' own installs are never kept: each run makes their
# environments anew.
kernels=${XDG_CACHE_HOME:-$HOME/.cache}/annotated_transformer/kernels
key=$(printf '%s\n' "$("$KERNEL_PYTHON" -VV)" "$TORCH_SPEC" "$KERNEL_REQS" \
        "$(date -u +%G-W%V)" | sha256sum | cut -c1-16)
kernel=$kernels/$key kernel_how="kept from an earlier run"
mkdir -p "$kernels"
exec 9>"$kernels/.lock"
flock 9
if [ ! -f "$kernel/.complete" ]; then
  kernel_how="made now"
  rm -rf "$kernel"
  find "$kernels" -mindepth 1 -maxdepth 1 -type d -mtime +7 -exec rm -rf {} +
  "$KERNEL_PYTHON" -m venv "$kernel"
  # --no-compile: the runtime compiles what it imports, once (PYTHONDONTWRITEBYTECODE is
  # unset below), not all of PyTorch at install (about 50 s)
  quiet "$kernel/bin/pip" install --no-compile $TORCH_SPEC
  quiet "$kernel/bin/pip" install --no-compile $KERNEL_REQS
  touch "$kernel/.complete"
fi
flock -u 9
kernel_site=$("$kernel/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "kernel requirements ready ($((SECONDS - t0)) s, $kernel_how): $("$kernel/bin/python" -V)," \
     "$TORCH_SPEC $KERNEL_REQS"

# the Hub's layout (train/val/test.jsonl), read through the same load_dataset call
hub=""
if [ -d "$DATA" ]; then
  hub=$tmp/hub_multi30k
  "$VENV/bin/python" tests/make_hub_standin.py "$DATA" "$hub" >/dev/null
else
  echo "no Multi30k files at $DATA: chapters 10 and 11 will reach for the real Hub"
fi

# the repository as github.com serves it: its branches and tags, in a bare mirror
git clone --quiet --bare "$REPO" "$tmp/mirror.git"
# main there: this working tree, as a commit, where it differs from main
main=$(git rev-parse --verify --quiet main || true)
if [ -n "$(git status --porcelain)" ] || [ "$(git rev-parse HEAD)" != "$main" ]; then
  cp "$(git rev-parse --git-path index)" "$tmp/index"
  GIT_INDEX_FILE=$tmp/index git add -A
  tree=$(GIT_INDEX_FILE=$tmp/index git write-tree)
  main=$(git -c user.name=fresh_runtime.sh -c user.email=fresh_runtime@localhost \
           commit-tree "$tree" -p HEAD -m "the working tree, for tools/fresh_runtime.sh")
  git push --quiet --force "$tmp/mirror.git" "$main:refs/heads/main"
  echo "note: the mirror's main is this working tree (uncommitted changes or another branch);" \
       "on the real host, readers get main as committed and pushed"
fi
cat >"$tmp/gitconfig" <<CFG
[url "file://$tmp/mirror.git"]
	insteadOf = $URL
CFG
# raw.githubusercontent.com: files at a ref of that mirror
"$VENV/bin/python" tools/raw_server.py "$tmp/mirror.git" "$ORG_REPO" "$tmp/port" \
  2>"$tmp/http.log" &
server=$!
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
port=$(cat "$tmp/port")

cat >"$tmp/pytest.ini" <<'INI'
[pytest]
addopts = -p no:cacheprovider
INI

# shrunk even by hand: their full runs take minutes (bench/run_all.py times them; the
# introduction's table)
SHRUNK=" 08_copy 09_decoding 09c_decoding_details 11_translator 11b_translator_details 11d_export 11e_onnx 12_why_attention 13_inside "
listed() {  # the chapters a list file names, as " name name ... "
  echo " $(grep -v '^#' "$1" | xargs -n1 basename | sed 's/\.ipynb$//' | xargs) "
}
BY_PLACE=$(listed tools/outputs_by_place.txt)
# the other kernel path (tools/second_path.txt): an AVX2 CPU without bf16, one thread
SECOND=$(listed tools/second_path.txt)
AVX2=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
      OMP_NUM_THREADS=1 MKL_NUM_THREADS=1)
echo "the other kernel path: $(env -u PYTHONDONTWRITEBYTECODE "${AVX2[@]}" "$kernel/bin/python" \
  -c 'import torch; print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())'
  ) (kernels, threads)"
spec_of() {  # the chapter's install requirement, as its install cell names it (on main)
  # (sed reads to the end: quitting early would kill git with SIGPIPE, fatal under pipefail)
  local spec
  spec=$(git -C "$REPO" show "$main:nbs/$1.ipynb" | sed -n 's/.*SPEC = (\\"\([^ "]*\).*/\1/p')
  echo "${spec%%$'\n'*}"
}
group_of() { echo "${1:-none}" | tr -c 'a-z0-9\n' '_'; }  # a name for a requirement
run_chapter() {  # run_chapter NOTEBOOK: its lines go to $tmp/out_NAME, a failure to $tmp/failed_NAME
  local nb=$1 name t1 quick compare how path spec env_dir run runtime site
  name=$(basename "$nb" .ipynb)
  t1=$SECONDS
  quick=${AT_QUICK:+1}; [[ "$SHRUNK" == *" $name "* ]] && quick=1
  compare=(--nbval --nbval-sanitize-with "$REPO/tools/nbval_sanitize.cfg"); how="outputs compared"
  [[ "$BY_PLACE" == *" $name "* ]] && { compare=(--nbval-lax); how="outputs by place, not compared"; }
  path=(); [[ "$SECOND" == *" $name "* ]] && { path=("${AVX2[@]}"); how="$how; AVX2, 1 thread"; }
  spec=$(spec_of "$name")
  env_dir=$tmp/venv_$(group_of "$spec") run=$tmp/run_$name
  runtime="found in the runtime"
  if [ ! -d "$env_dir" ]; then
    runtime="installed in a new runtime"
    "$KERNEL_PYTHON" -m venv "$env_dir"
    site=$("$env_dir/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    echo "$kernel_site" >"$site/_kernel_requirements.pth"
  fi
  mkdir -p "$tmp/jupyter/kernels/$name" "$run"
  cat >"$tmp/jupyter/kernels/$name/kernel.json" <<JSON
{"argv": ["$env_dir/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
 "display_name": "fresh $name", "language": "python"}
JSON
  # the notebook as Colab opens it: from the main branch the mirror serves
  git -C "$REPO" show "$main:nbs/$name.ipynb" >"$run/$name.ipynb"
  # shrunk: the sizes tools/shrunk.json gives it, a cell after its `parameters` cell, in
  # this copy only (the notebook a reader opens has none)
  if [ -n "$quick" ] && ! "$REPO/$VENV/bin/python" "$REPO/tools/shrunk.py" "$run/$name.ipynb" \
        >"$tmp/$name.log" 2>&1; then
    cat "$tmp/$name.log"
    echo "fresh runtime: $name FAILED (tools/shrunk.json)"
    touch "$tmp/failed_$name"
    return
  fi
  if (cd "$run" && env -u PYTHONPATH -u VIRTUAL_ENV -u MULTI30K_DIR -u AT_TRANSLATION_DIR \
        -u AT_QUICK -u MPLBACKEND -u PYTHONDONTWRITEBYTECODE JUPYTER_PATH="$tmp/jupyter" \
        HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 AT_CACHE_DIR="$tmp/cache_$name" \
        "${path[@]}" \
        GIT_CONFIG_GLOBAL="$tmp/gitconfig" AT_MODEL_HOST="http://127.0.0.1:$port" \
        ${hub:+AT_MULTI30K_HUB="$hub"} \
        "$REPO/$VENV/bin/python" -m pytest -c "$tmp/pytest.ini" --rootdir "$run" -q \
          "${compare[@]}" --nbval-kernel-name "$name" "$name.ipynb" >"$tmp/$name.log" 2>&1)
  then
    echo "fresh runtime: $name passed ($((SECONDS - t1)) s${quick:+, shrunk}; $how;" \
         "${spec:-no install cell}, $runtime)"
  else
    cat "$tmp/$name.log"
    echo "fresh runtime: $name FAILED ($((SECONDS - t1)) s)"
    touch "$tmp/failed_$name"
  fi
  # the package must have come from the install cell, not from anywhere else (found where
  # an import would find it, without running it: that would import PyTorch)
  (cd "$run" && "$env_dir/bin/python" -c "import importlib.util as u, sys; s = u.find_spec('annotated_transformer'); sys.exit(0 if s and '$env_dir' in s.origin else 1)") \
    || { echo "fresh runtime: $name did not install the package into its own venv"; touch "$tmp/failed_$name"; }
}

# Two workers share the cores (much of a chapter's time is pip, or work on one thread). Each
# takes whole groups of chapters, those whose install cells name the same requirement, in the
# book's order: the first chapter of a group makes its environment, so no environment is made
# twice or used before it is ready. A worker claims the next unclaimed group by renaming it.
mkdir -p "$tmp/queue"
declare -A queued=()     # requirement -> its group's file, numbered in the book's order
for nb in "${notebooks[@]}"; do
  group=$(group_of "$(spec_of "$(basename "$nb" .ipynb)")")
  [ -n "${queued[$group]:-}" ] \
    || queued[$group]=$tmp/queue/$(printf '%02d' "${#queued[@]}")_$group
  echo "$nb" >>"${queued[$group]}"
done
worker() {
  local w=$1 g
  mkdir -p "$tmp/claimed_$w"
  for g in "$tmp/queue/"*; do
    mv "$g" "$tmp/claimed_$w/" 2>/dev/null || continue   # the other worker has it
    while read -r nb; do
      run_chapter "$nb" >"$tmp/out_$(basename "$nb" .ipynb)" 2>&1
    done <"$tmp/claimed_$w/$(basename "$g")"
  done
}
worker 1 & w1=$!
worker 2 & w2=$!
wait "$w1" "$w2"
failed=()
for nb in "${notebooks[@]}"; do
  name=$(basename "$nb" .ipynb)
  cat "$tmp/out_$name"
  [ ! -e "$tmp/failed_$name" ] || failed+=("$name")
done
echo "fresh runtime: ${#notebooks[@]} chapters in $((SECONDS - t0)) s"
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}" >&2; exit 1; }
