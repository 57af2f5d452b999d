// The "Try it" page: the shipped English→German model, exported to ONNX by part 9d, run in the
// browser by onnxruntime-web (WebAssembly), with sentencepiece compiled to WebAssembly.
// tools/build_try.sh puts ort/, sentencepiece.mjs and model/ beside this file in the built site.
import * as ort from "./ort/ort.wasm.bundle.min.mjs";
import { SentencePieceProcessor } from "./sentencepiece.mjs";

const here = (path) => new URL(path, import.meta.url).href;
const $ = (id) => document.getElementById(id);
const root = $("try-it");
const FILES = ["model/onnx.json", "model/tokenizer.model", "model/encoder.onnx",
               "model/decoder_step.onnx", "ort/ort-wasm-simd-threaded.wasm"];

function say(text, state) {
  $("try-status").textContent = text;
  if (state) root.dataset.state = state;
}

// Chapter 8's normalize_line: NFKC, zero-width spaces dropped, each run of whitespace (as
// Python's str.split sees it) one space, the ends stripped.
const WHITESPACE = /[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/;
function normalizeLine(line) {
  return line.normalize("NFKC").replace(/[\u200b\ufeff]/g, "")
    .split(WHITESPACE).filter(Boolean).join(" ");
}

// Every file the page needs, read as bytes with one progress bar over all of them.
async function fetchAll(names, progress) {
  const responses = await Promise.all(names.map(async (name) => {
    const r = await fetch(here(name));
    if (!r.ok) throw new Error(`${name}: HTTP ${r.status}`);
    return r;
  }));
  const total = responses.reduce((n, r) => n + Number(r.headers.get("content-length") || 0), 0);
  let loaded = 0;
  return Promise.all(responses.map(async (r) => {
    const reader = r.body.getReader(), chunks = [];
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      loaded += value.length;
      progress(loaded, total);
    }
    const bytes = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
    let at = 0;
    for (const c of chunks) { bytes.set(c, at); at += c.length; }
    return bytes;
  }));
}

function base64(bytes) {  // the package loads a model from base64 text
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

async function load() {
  const bar = $("try-progress");
  bar.hidden = false;
  say("Loading the model…", "loading");
  const [config, tokenizer, encoder, step, wasm] = await fetchAll(FILES, (loaded, total) => {
    bar.max = Math.max(total, loaded);
    bar.value = loaded;
    say(`Loading the model… ${(loaded / 1e6).toFixed(1)} MB`);
  });
  ort.env.wasm.wasmBinary = wasm;       // the bytes fetched above, not a second download
  ort.env.wasm.numThreads = 1;          // threads need cross-origin isolation (see below)
  const sp = new SentencePieceProcessor();
  await sp.loadFromB64StringModel(base64(tokenizer));
  const options = { executionProviders: ["wasm"], graphOptimizationLevel: "all" };
  const model = {
    config: JSON.parse(new TextDecoder().decode(config)), sp,
    encoder: await ort.InferenceSession.create(encoder, options),
    step: await ort.InferenceSession.create(step, options),
  };
  bar.hidden = true;
  return model;
}

// The most probable id, never padding or BOS (chapter 7's _restrict); the first on a tie.
function argmax(logp, banned) {
  let best = -1;
  for (let i = 0; i < logp.length; i++) {
    if (!banned.includes(i) && (best < 0 || logp[i] > logp[best])) best = i;
  }
  return best;
}

// Greedy search over the two graphs, as part 9d's _onnx_greedy for one sentence.
async function translate(model, line) {
  const c = model.config, L = c.model.n_layers;
  const names = c.graphs.decoder_step;
  let src = model.sp.encodeIds(line);
  const maxSrc = Math.max(1, c.model.max_len - c.max_len_b);   // as encode_sources
  const cut = src.length > maxSrc;
  if (cut) src = src.slice(0, maxSrc);
  const S = src.length;
  const t0 = performance.now();
  const enc = await model.encoder.run(
    { src: new ort.Tensor("int64", BigInt64Array.from(src, BigInt), [1, S]) });
  const cross = c.graphs.encoder.outputs.map((n) => enc[n]);
  const mask = new ort.Tensor("bool", new Uint8Array(S).fill(1), [1, 1, S]);
  const empty = new ort.Tensor("float32", new Float32Array(0), [1, c.model.n_heads, 0, c.d_k]);
  let past = cross.map(() => empty);
  let token = c.bos_id;
  const out = [], attn = [];    // attn[step][layer]: Float32Array (h·S), head-major
  for (let i = 1; i <= S + c.max_len_b; i++) {
    const values = [new ort.Tensor("int64", BigInt64Array.of(BigInt(token)), [1, 1]), mask,
                    ...past, ...cross];
    const feeds = Object.fromEntries(names.inputs.map((n, k) => [n, values[k]]));
    const res = await model.step.run(feeds);
    token = argmax(res[names.outputs[0]].data, [c.pad_id, c.bos_id]);
    past = names.outputs.slice(1, 1 + 2 * L).map((n) => res[n]);
    attn.push(names.outputs.slice(1 + 2 * L).map((n) => res[n].data));
    if (token === c.eos_id) break;
    out.push(token);
  }
  return { src, out, attn, cut, ms: performance.now() - t0, text: model.sp.decodeIds(out) };
}

function heatmap(model, result, layer, head) {
  const h = model.config.model.n_heads, S = result.src.length;
  const label = (ids) => ids.map((id) => model.sp.decodeIds([id]).trim() || "▁");
  const cols = label(result.src);
  const rows = [...label(result.out), ...(result.attn.length > result.out.length ? ["</s>"] : [])];
  const table = document.createElement("table");
  const head_row = table.createTHead().insertRow();
  head_row.appendChild(document.createElement("th"));
  for (const name of cols) {
    const th = document.createElement("th");
    th.textContent = name;
    head_row.appendChild(th);
  }
  const body = table.createTBody();
  rows.forEach((name, r) => {
    const tr = body.insertRow(), th = document.createElement("th");
    th.textContent = name;
    tr.appendChild(th);
    const w = result.attn[r][layer];
    for (let s = 0; s < S; s++) {
      let v = 0;
      if (head < 0) { for (let k = 0; k < h; k++) v += w[k * S + s] / h; } else v = w[head * S + s];
      const td = tr.insertCell();
      td.style.background = `rgba(31, 119, 180, ${v.toFixed(3)})`;
      td.title = `${name} → ${cols[s]}: ${v.toFixed(3)}`;
    }
  });
  $("try-heatmap").replaceChildren(table);
}

function showAttention(model, result) {
  const L = model.config.model.n_layers, h = model.config.model.n_heads;
  let layer = L - 1;
  const select = $("try-head");
  if (!select.options.length) {
    select.add(new Option("mean of the heads", "-1"));
    for (let k = 0; k < h; k++) select.add(new Option(`head ${k + 1}`, String(k)));
  }
  const buttons = [...Array(L).keys()].map((l) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = `layer ${l + 1}`;
    b.onclick = () => { layer = l; draw(); };
    return b;
  });
  const draw = () => {
    buttons.forEach((b, l) => b.setAttribute("aria-pressed", String(l === layer)));
    heatmap(model, result, layer, Number(select.value));
  };
  select.onchange = draw;
  $("try-layers").replaceChildren(...buttons);
  $("try-controls").hidden = false;
  draw();
}

async function main() {
  if (typeof WebAssembly !== "object") {
    say("This browser cannot run WebAssembly, so it cannot translate here.", "error");
    return;
  }
  let model;
  try {
    model = await load();
  } catch (e) {
    say(`The model could not be loaded (${e.message}).`, "error");
    return;
  }
  const button = $("try-translate"), source = $("try-source"), output = $("try-output");
  const run = async () => {
    const line = normalizeLine(source.value);
    if (!line || root.dataset.state === "busy") return;
    button.disabled = true;
    say("Translating…", "busy");
    try {
      const r = await translate(model, line);
      output.textContent = r.text;
      output.dataset.ids = JSON.stringify(r.out);
      output.dataset.srcIds = JSON.stringify(r.src);
      root.dataset.ms = r.ms.toFixed(1);
      $("try-time").textContent = `Greedy search: ${r.out.length} pieces from ${r.src.length} `
        + `in ${r.ms.toFixed(0)} ms (${r.attn.length} decoder steps)`
        + (r.cut ? `; the source was cut to ${r.src.length} pieces to fit the model` : "");
      showAttention(model, r);
      say("Ready.", "ready");
    } catch (e) {
      say(`The translation failed (${e.message}).`, "error");
      throw e;
    } finally {
      root.dataset.done = String(Number(root.dataset.done) + 1);
      button.disabled = false;
    }
  };
  button.onclick = run;
  source.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); run(); }
  });
  button.disabled = false;
  say("Ready: type an English sentence and press Enter.", "ready");
}

main();
