// The "Try it" page: the shipped English→German model, exported to ONNX by part 11e, run in the
// browser by onnxruntime-web (WebAssembly), with sentencepiece compiled to WebAssembly.
// tools/build_try.sh puts ort/, sentencepiece.mjs and model/ beside this file in the built site;
// they are imported in load(), so that a file that fails to load is reported on the page.
let ort, SentencePieceProcessor;

const here = (path) => new URL(path, import.meta.url).href;
const $ = (id) => document.getElementById(id);
const root = $("try-it");
const FILES = ["model/onnx.json", "model/tokenizer.model", "model/encoder.onnx",
               "model/decoder_step.onnx", "ort/ort-wasm-simd-threaded.wasm"];

function say(text, state) {
  $("try-status").textContent = text;
  if (state) root.dataset.state = state;
}

const reason = (e) => String(e?.message ?? e);   // onnxruntime-web may throw a plain string

// Chapter 10's normalize_line: NFKC, zero-width spaces dropped, each run of whitespace (as
// Python's str.split sees it) one space, the ends stripped.
const WHITESPACE =
  /[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/;
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
  // a compressed response's length is not the length of what it unpacks to: no total then
  const total = responses.some((r) => r.headers.get("content-encoding")) ? 0
    : responses.reduce((n, r) => n + Number(r.headers.get("content-length") || 0), 0);
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
  ort = await import("./ort/ort.wasm.bundle.min.mjs");
  ({ SentencePieceProcessor } = await import("./sentencepiece.mjs"));
  const [config, tokenizer, encoder, step, wasm] = await fetchAll(FILES, (loaded, total) => {
    if (total) {
      bar.max = total;
      bar.value = Math.min(loaded, total);
    } else {
      bar.removeAttribute("value");      // an indeterminate bar
    }
    say(`Loading the model… ${(loaded / 1e6).toFixed(1)} MB`);
  });
  ort.env.wasm.wasmBinary = wasm;       // the bytes fetched above, not a second download
  ort.env.wasm.numThreads = 1;          // threads need cross-origin isolation (the page says)
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

// Part 11e's graphs, for R rows at a time (one sentence: 1 row greedy, K rows in a beam).
async function encode(model, src) {
  const c = model.config, S = src.length;
  const enc = await model.encoder.run(
    { src: new ort.Tensor("int64", BigInt64Array.from(src, BigInt), [1, S]) });
  return c.graphs.encoder.outputs.map((n) => enc[n]);      // (1, h, S, d_k) per layer
}

function repeatRows(t, R) {   // (1, ...) → (R, ...)
  const data = new t.data.constructor(t.data.length * R);
  for (let r = 0; r < R; r++) data.set(t.data, r * t.data.length);
  return new ort.Tensor(t.type, data, [R, ...t.dims.slice(1)]);
}

function pickRows(t, rows) {  // (R, ...) → (rows.length, ...), as part 9c's reorder_cache
  const n = t.data.length / t.dims[0], data = new t.data.constructor(n * rows.length);
  rows.forEach((r, k) => data.set(t.data.subarray(r * n, (r + 1) * n), k * n));
  return new ort.Tensor(t.type, data, [rows.length, ...t.dims.slice(1)]);
}

function emptyCache(model, R) {
  const c = model.config;
  const empty = new ort.Tensor("float32", new Float32Array(0), [R, c.model.n_heads, 0, c.d_k]);
  return Array(2 * c.model.n_layers).fill(empty);
}

// One decoder step for R rows: log-probabilities (R·V, padding and BOS set to -∞ as in
// part 9c's forbid_tokens), the grown caches, and each layer's attention (R·h·S).
async function step(model, tokens, mask, past, cross) {
  const c = model.config, names = c.graphs.decoder_step, L = c.model.n_layers;
  const values = [new ort.Tensor("int64", BigInt64Array.from(tokens, BigInt), [tokens.length, 1]),
                  mask, ...past, ...cross];
  const res = await model.step.run(Object.fromEntries(names.inputs.map((n, k) => [n, values[k]])));
  const logp = res[names.outputs[0]].data, V = logp.length / tokens.length;
  for (let r = 0; r < tokens.length; r++) {
    logp[r * V + c.pad_id] = logp[r * V + c.bos_id] = -Infinity;
  }
  return { logp, V, past: names.outputs.slice(1, 1 + 2 * L).map((n) => res[n]),
           attn: names.outputs.slice(1 + 2 * L).map((n) => res[n].data) };
}

// Greedy search, as part 11e's _onnx_greedy for one sentence: the first best id on a tie.
async function greedy(model, src) {
  const c = model.config, S = src.length;
  const cross = await encode(model, src);
  const mask = new ort.Tensor("bool", new Uint8Array(S).fill(1), [1, 1, S]);
  let past = emptyCache(model, 1), token = c.bos_id;
  const out = [], attn = [];
  for (let i = 1; i <= S + c.max_len_b; i++) {
    const r = await step(model, [token], mask, past, cross);
    token = 0;
    for (let v = 1; v < r.V; v++) if (r.logp[v] > r.logp[token]) token = v;
    past = r.past;
    attn.push(r.attn.map((a) => a.slice()));
    if (token === c.eos_id) break;
    out.push(token);
  }
  return { out, attn };
}

// GNMT's length penalty (Wu et al., 2016), chapter 9's length_penalty.
const penalty = (length, alpha) => ((5 + length) / 6) ** alpha;
// Chapter 9 keeps scores in float32: sums and quotients are rounded to float32 here too (the
// penalty itself is computed in double, which can move a score by one float32 step at most).
const f32 = Math.fround;

// Beam search of §6.1, as chapter 9's beam_search for one sentence: each step keeps the best
// 2K extensions of the K beams; those of the best K that end (EOS, or the length limit) join
// the finished ones, scored log P / lp; the best K that do not end form the next beams; the
// search stops when no live beam can beat the best finished hypothesis.
async function beam(model, src, K, alpha) {
  const c = model.config, S = src.length, limit = S + c.max_len_b;
  const cross = (await encode(model, src)).map((t) => repeatRows(t, K));
  const mask = new ort.Tensor("bool", new Uint8Array(K * S).fill(1), [K, 1, S]);
  let past = emptyCache(model, K);
  let beams = [...Array(K).keys()].map((k) => ({ score: k ? -Infinity : 0, ids: [], attn: [],
                                                 last: c.bos_id }));
  let finished = [];
  for (let i = 1; i <= limit; i++) {
    const r = await step(model, beams.map((b) => b.last), mask, past, cross);
    const top = [];                       // the best 2K (score, beam, token), best first
    for (let k = 0; k < K; k++) {
      if (beams[k].score === -Infinity) continue;
      for (let v = 0; v < r.V; v++) {
        const score = f32(beams[k].score + r.logp[k * r.V + v]);
        if (score === -Infinity) continue;
        if (top.length === 2 * K && score <= top[2 * K - 1].score) continue;
        let at = top.length;
        while (at > 0 && top[at - 1].score < score) at--;
        top.splice(at, 0, { score, k, v });
        if (top.length > 2 * K) top.pop();
      }
    }
    const attnOf = (k) => r.attn.map((a) => a.slice(k * a.length / K, (k + 1) * a.length / K));
    top.slice(0, K).forEach((t) => {
      if (t.v === c.eos_id || i >= limit) {
        finished.push({ score: f32(t.score / f32(penalty(i, alpha))),
                        ids: t.v === c.eos_id ? beams[t.k].ids : [...beams[t.k].ids, t.v],
                        attn: [...beams[t.k].attn, attnOf(t.k)] });
      }
    });
    finished = finished.sort((a, b) => b.score - a.score).slice(0, K);
    const next = top.filter((t) => t.v !== c.eos_id).slice(0, K);
    const bound = f32(next[0].score / f32(Math.max(penalty(i + 1, alpha), penalty(limit, alpha))));
    if (i >= limit || (finished.length && bound <= finished[0].score)) break;
    past = r.past.map((cache) => pickRows(cache, next.map((t) => t.k)));
    beams = next.map((t) => ({ score: t.score, ids: [...beams[t.k].ids, t.v],
                               attn: [...beams[t.k].attn, attnOf(t.k)], last: t.v }));
  }
  return { out: finished[0].ids, attn: finished[0].attn };
}

async function translate(model, line, beamSize) {
  const c = model.config;
  let src = model.sp.encodeIds(line);
  const maxSrc = Math.max(1, c.model.max_len - c.max_len_b);   // as encode_sources
  const cut = src.length > maxSrc;
  if (cut) src = src.slice(0, maxSrc);
  const t0 = performance.now();
  if (!src.length) return null;        // no pieces at all: nothing to translate
  const { out, attn } = beamSize > 1 ? await beam(model, src, beamSize, c.alpha)
                                     : await greedy(model, src);
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
    say(`The model could not be loaded (${reason(e)}).`, "error");
    return;
  }
  const c = model.config, button = $("try-translate"), source = $("try-source");
  const output = $("try-output");
  const clear = () => {
    output.textContent = $("try-time").textContent = "";
    $("try-heatmap").replaceChildren();
    $("try-controls").hidden = true;
  };
  const run = async () => {
    if (root.dataset.state === "busy") return;
    const line = normalizeLine(source.value);
    if (!line) {
      say("Type an English sentence first.", "ready");
      return;
    }
    button.disabled = true;
    say("Translating…", "busy");
    try {
      const beamSize = Number($("try-search").value);
      const r = await translate(model, line, beamSize);
      clear();
      if (r === null) {
        say("The tokenizer finds no pieces in this text.", "ready");
        return;
      }
      output.textContent = r.text;
      // what the page computed, for a reader's console and for the book's checks
      output.dataset.ids = JSON.stringify(r.out);
      output.dataset.srcIds = JSON.stringify(r.src);
      root.dataset.ms = r.ms.toFixed(1);
      $("try-time").textContent = (beamSize > 1 ? `Beam search, ${beamSize} beams`
                                                : "Greedy search")
        + `: ${r.out.length} pieces from ${r.src.length} in ${r.ms.toFixed(0)} ms`
        + (r.cut ? `; the source was cut to ${r.src.length} pieces to fit the model` : "");
      showAttention(model, r);
      say(r.out.length ? "Ready." : "Ready. The model ended the translation at once.", "ready");
    } catch (e) {
      clear();
      say(`The translation failed (${reason(e)}).`, "error");
      throw e;                 // and to the console, with its stack, for a bug report
    } finally {
      root.dataset.done = String(Number(root.dataset.done) + 1);
      button.disabled = false;
    }
  };
  button.onclick = run;
  source.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); run(); }
  });
  $("try-search").replaceChildren(
    new Option(`beam search, ${c.beam_size} beams (§6.1)`, String(c.beam_size)),
    new Option("greedy search", "1"));
  button.disabled = false;
  say("Ready: type an English sentence and press Enter.", "ready");
}

main();
