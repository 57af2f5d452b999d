#!/usr/bin/env bash
# The "Try it" page's files, added to a site that jupyter-book has built (`make book` and the
# test command's book stage call this after the build):
#   - onnxruntime-web and sentencepiece for the browser, from npm at the versions pinned in
#     web/package-lock.json (`npm ci`); sentencepiece's package is written for bundlers, so
#     esbuild (pinned there too) bundles it into one browser module;
#   - the shipped model, exported to ONNX by the package's own command (part 11e).
# Usage: tools/build_try.sh [SITE]   (default: book/_build/html)
set -euo pipefail
SITE=${1:-book/_build/html}
OUT=$(cd "$SITE" && pwd)/_static/try
cd "$(dirname "$0")/.."                  # web/ and models/ are the repository's
PY=${PY:-.venv/bin/python}
test -f "$OUT/try.js" || { echo "$OUT/try.js is missing: build the book first" >&2; exit 1; }
command -v npm >/dev/null \
  || { echo "npm is needed for the Try it page (Debian: apt-get install npm)" >&2; exit 1; }
(cd web && npm ci --no-audit --no-fund --loglevel=error \
   && node_modules/.bin/esbuild sentencepiece.js --bundle --format=esm --platform=browser \
        --minify --alias:fs=./no-fs.js --external:module --log-level=warning \
        --outfile="$OUT/sentencepiece.mjs")
mkdir -p "$OUT/ort"
dist=web/node_modules/onnxruntime-web/dist
cp "$dist/ort.wasm.bundle.min.mjs" "$dist/ort-wasm-simd-threaded.wasm" "$OUT/ort/"
# what was vendored, and under which licence
(cd web && node -e '
  for (const name of ["onnxruntime-web", "@sctg/sentencepiece-js"]) {
    const p = require(`./node_modules/${name}/package.json`);
    console.log(`${p.name} ${p.version}, licence ${p.license}: ${p.homepage || p.repository.url}`);
  }') >"$OUT/THIRD_PARTY.txt"
"$PY" -m annotated_transformer export --to onnx --model-dir models/multi30k_en_de --force \
  "$OUT/model"
echo "Try it page: $(du -sh "$OUT" | cut -f1) in $OUT"
