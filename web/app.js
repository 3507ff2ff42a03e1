// kvcalc's page: the form and the URL are the state; every figure is kvcalc's own command line,
// run in the browser's Python (Pyodide, vendored beside this file) through bridge.py. This file
// builds argv lists and draws their --json: it computes no figure itself.
import { loadPyodide } from "./pyodide/pyodide.mjs";

// The state's keys, their defaults, and the form control each is read from. A default is left out
// of the URL, so a link says only what differs.
const DEFAULTS = {
  source: "preset", model: "llama-3.1-8b", config: "", hub: "",
  engine: "theoretical", release: "", kv: "auto",
  gpu: "h100-sxm", tp: "1", pp: "1", dp: "1",
  tokens: "2048", users: "1", theme: "auto",
};
// Where a Hub id's config.json is fetched from when the user asks (only then: the page makes no other
// request off its own host). `hub_endpoint` in the URL points it at a mirror.
const HUB = "https://huggingface.co";
const CONFIG_PATH = "/tmp/kvcalc-page/config.json";

const $ = (id) => document.getElementById(id);
let bridge = null;
let renders = 0;
let hubConfig = { id: "", text: "", error: "" };
let summaries = {};
let releases = {};

// ---- the state: form <-> URL -------------------------------------------------------------------

function readForm() {
  const state = {};
  for (const key of Object.keys(DEFAULTS)) {
    if (key === "source") state.source = document.querySelector("input[name=source]:checked").value;
    else state[key] = $(key).value.trim();
  }
  return state;
}

function writeForm(state) {
  for (const [key, value] of Object.entries(state)) {
    if (key === "source") document.querySelector(`input[name=source][value=${value}]`).checked = true;
    else if ($(key)) setControl($(key), value);
  }
  syncSlider();
  showSource(state.source);
  applyTheme(state.theme);
}

// A value the choices lack (an alias, a typo in a link) is added as it is, so kvcalc reads it and
// answers or refuses in its own words, rather than the select falling back to another choice.
function setControl(control, value) {
  if (control.tagName === "SELECT" && value && ![...control.options].some((o) => o.value === value)) {
    control.append(el("option", { value, text: value }));
  }
  control.value = value;
}

async function stateFromURL() {
  const params = new URLSearchParams(location.search);
  const state = { ...DEFAULTS };
  for (const key of Object.keys(DEFAULTS)) if (params.has(key)) state[key] = params.get(key);
  if (params.has("config")) state.config = await inflate(params.get("config"));
  return state;
}

async function writeURL(state) {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(state)) {
    if (value === DEFAULTS[key]) continue;
    if (key === "config") params.set(key, await deflate(value));
    else if (key === "model" && state.source !== "preset") continue;
    else if (key === "hub" && state.source !== "hub") continue;
    else params.set(key, value);
  }
  const endpoint = new URLSearchParams(location.search).get("hub_endpoint");
  if (endpoint) params.set("hub_endpoint", endpoint);
  const query = params.toString();
  history.replaceState(null, "", query ? `?${query}` : location.pathname);
}

// A pasted config.json travels in the URL compressed (deflate, base64url): a few hundred characters.
async function deflate(text) {
  const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("deflate-raw"));
  const bytes = new Uint8Array(await new Response(stream).arrayBuffer());
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

async function inflate(encoded) {
  try {
    const binary = atob(encoded.replaceAll("-", "+").replaceAll("_", "/"));
    const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
    return await new Response(stream).text();
  } catch {
    return "";  // a damaged link: the empty config is refused below, in kvcalc's words
  }
}

// ---- running kvcalc ----------------------------------------------------------------------------

function kvcalc(argv) {
  const result = JSON.parse(bridge.run(JSON.stringify(argv)));
  result.argv = argv;
  return result;
}

function sizes(bytes) {
  return bridge.format_exact(BigInt(bytes));
}

function engineName(state) {
  return state.release ? `${state.engine}@${state.release}` : state.engine;
}

async function modelArgument(state) {
  if (state.source === "preset") return state.model;
  if (state.source === "config") return bridge.write_config(CONFIG_PATH, state.config);
  if (hubConfig.id !== state.hub || hubConfig.error) await fetchHubConfig(state.hub);
  return hubConfig.error ? null : bridge.write_config(CONFIG_PATH, hubConfig.text);
}

async function fetchHubConfig(id) {
  hubConfig = { id, text: "", error: "" };
  const endpoint = new URLSearchParams(location.search).get("hub_endpoint") || HUB;
  const url = `${endpoint}/${id}/resolve/main/config.json`;
  if (!/^[\w.-]+\/[\w.-]+$/.test(id)) {
    hubConfig.error = `kvcalc: error: '${id}' is not a Hub repo id (org/name)`;
    return;
  }
  setStatus(`Fetching ${id}'s config.json…`);
  try {
    const response = await fetch(url);
    if (response.ok) hubConfig.text = await response.text();
    else hubConfig.error = `kvcalc: error: ${url} answered HTTP ${response.status}`;
  } catch {
    hubConfig.error = `kvcalc: error: could not fetch ${url} (offline, or the host refuses this page)`;
  }
}

function commonFlags(state) {
  const flags = ["--engine", engineName(state)];
  if (state.kv !== "auto") flags.push("--kv-dtype", state.kv);
  return [...flags, "--tokens", state.tokens, "--batch", state.users];
}

function layoutFlags(state) {
  const flags = [];
  for (const key of ["tp", "pp", "dp"]) if (state[key] !== "1") flags.push(`--${key}`, state[key]);
  return flags;
}

// The compare chart's lengths: powers of four from 1k to 256k and the asked length itself.
function contextLadder(state) {
  const lengths = ["1k", "4k", "16k", "64k", "256k"];
  return lengths.includes(state.tokens) ? lengths : [...lengths, state.tokens];
}

// The argv of each view, exactly as a user types it after `kvcalc`.
function commands(model, state) {
  const common = [model, ...commonFlags(state), ...layoutFlags(state)];
  return {
    estimate: ["estimate", ...common, "--json"],
    explain: ["estimate", ...common, "--explain"],
    fit: ["fit", ...common, "--gpu", state.gpu, "--json"],
    compare: ["compare", model, "--engine", engineName(state), ...(state.kv !== "auto" ? ["--kv-dtype", state.kv] : []),
      "--tokens", contextLadder(state).join(","), "--batch", state.users, "--json"],
  };
}

// ---- drawing -----------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined) continue;
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function figure(name, label, value, text) {
  return [el("dt", { text: label }), el("dd", { "data-figure": name, "data-value": String(value), text })];
}

function messages(json) {
  const list = el("ul", { class: "messages" });
  for (const warning of json.warnings) list.append(el("li", { class: "warning", text: `warning: ${warning}` }));
  for (const note of json.notes) list.append(el("li", { class: "note", text: `note: ${note}` }));
  return list.children.length ? list : null;
}

function failure(result) {
  const line = result.stderr.trim().split("\n").filter(Boolean).at(-1) ?? `exit ${result.code}`;
  return el("p", { class: "error", role: "alert", "data-exit": String(result.code), text: line });
}

function command(result) {
  return el("details", { class: "argv" }, el("summary", { text: "The command line" }),
    el("code", { text: `kvcalc ${result.argv.map(quote).join(" ")}` }));
}

function quote(arg) {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", "'\\''")}'`;
}

function drawEstimate(result) {
  const box = $("estimate-body");
  box.replaceChildren();
  if (result.code !== 0) return box.append(failure(result), command(result));
  const json = JSON.parse(result.stdout);
  const per = json.gpus > 1 ? figure("per_gpu_bytes", "per GPU", json.per_gpu_bytes, sizes(json.per_gpu_bytes)) : [];
  box.append(
    el("p", { class: "headline", "data-figure": "headline", text:
      `${json.model}: ${json.batch.toLocaleString("en")} × ${json.tokens.toLocaleString("en")} tokens, ` +
      `${json.kv_dtype}${json.v_dtype !== json.kv_dtype ? `/${json.v_dtype}` : ""} (${json.engine})` }),
    el("dl", { class: "figures" },
      ...figure("total_bytes", "total", json.total_bytes, sizes(json.total_bytes)),
      ...per,
      ...figure("per_sequence_bytes", "per sequence", json.per_sequence_bytes, sizes(json.per_sequence_bytes)),
      ...figure("per_token_bytes", "per token", json.per_token_bytes, sizes(json.per_token_bytes))),
    groupsTable(json), ...present(messages(json)), command(result));
}

function present(node) {
  return node ? [node] : [];
}

function groupsTable(json) {
  const head = ["layers", "kind", "KV heads", "head dim", "tokens kept", "bytes/token", "bytes"];
  const table = el("table", { class: "groups" }, el("caption", { text: "Layer groups" }),
    el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col", text: h })))));
  const body = el("tbody");
  for (const g of json.groups) {
    const cells = [g.layers, g.kind.replaceAll("_", " "), g.kv_heads ?? "–", g.k_head_dim ?? "–",
      g.tokens_kept, g.bytes_per_token, g.bytes];
    body.append(el("tr", {}, ...cells.map((c, i) => el("td", {
      class: i === 1 ? "" : "num", text: typeof c === "number" ? c.toLocaleString("en") : String(c) }))));
  }
  table.append(body);
  return el("div", { class: "scroll" }, table);
}

function drawExplain(result) {
  const box = $("explain-body");
  box.replaceChildren(result.code === 0 ? el("pre", { tabindex: "0", text: result.stdout.trimEnd() }) : failure(result));
}

// fit's bounds as its table words them: null is no bound from the cache, and a capped search
// ("the search stops there") is a floor, never the answer.
function count(value, unit, { unbounded = null, capped = false } = {}) {
  if (value === null) return `unbounded (${unbounded})`;
  return `${capped ? "at least " : ""}${value.toLocaleString("en")} ${unit}`;
}

function drawFit(result) {
  const box = $("fit-body");
  box.replaceChildren();
  if (result.code !== 0) return box.append(failure(result), command(result));
  const json = JSON.parse(result.stdout);
  const verdict = json.verdict;
  const fits = el("p", { class: `verdict ${verdict.fits ? "fits" : "no"}`, "data-figure": "fits",
    "data-value": String(verdict.fits), text: verdict.fits
      ? `Fits: ${json.batch.toLocaleString("en")} × ${json.tokens.toLocaleString("en")} tokens need ` +
        `${sizes(verdict.needed_bytes)}, leaving ${sizes(verdict.headroom_bytes)}.`
      : `Does not fit: ${verdict.reason ?? "the cache needs more than the budget"}` });
  const budget = el("table", { class: "budget" }, el("caption", { text: `Budget per GPU: ${json.gpu}` }));
  const rows = el("tbody");
  for (const row of json.budget) {
    rows.append(el("tr", {}, el("th", { scope: "row", text: row.label }),
      el("td", { class: "num", "data-budget": row.label, "data-value": String(row.bytes), text: bridge.format_bytes(BigInt(row.bytes)) }),
      el("td", { class: "detail", text: row.detail ?? "" })));
  }
  budget.append(rows);
  const line = json.command ? el("div", { class: "engine-line" },
    el("h3", { text: "The engine's command line" }),
    el("pre", { tabindex: "0" }, el("code", { "data-figure": "command", text: json.command.text })),
    el("button", { type: "button", class: "copy", "data-copy": json.command.text, text: "Copy" }),
    ...(json.command.notes.length ? [el("ul", { class: "messages" },
      ...json.command.notes.map((n) => el("li", { class: "note", text: `note: ${n}` })))] : [])) : null;
  box.append(fits, el("dl", { class: "figures" },
    ...figure("kv_budget_bytes", "KV budget per GPU", json.kv_budget_bytes, sizes(json.kv_budget_bytes)),
    ...figure("max_tokens", "tokens that fit", json.max_tokens,
      count(json.max_tokens, "tokens", { unbounded: "no per-token cache" })),
    ...figure("max_concurrency", "requests at once", json.max_concurrency,
      count(json.max_concurrency, `of ${json.tokens.toLocaleString("en")} tokens`, { capped: json.max_concurrency_capped })),
    ...figure("max_context", "longest context", json.max_context, count(json.max_context, "tokens",
      { unbounded: "every layer is windowed or a fixed state", capped: json.max_context_capped }))),
  el("div", { class: "scroll" }, budget), ...present(line), ...present(messages(json)), command(result));
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

function drawCompare(result) {
  const box = $("compare-body");
  box.replaceChildren();
  if (result.code !== 0) return box.append(failure(result), command(result));
  const json = JSON.parse(result.stdout);
  const series = new Map();
  for (const row of json.rows) {
    if (!series.has(row.label)) series.set(row.label, { own: row.own, points: [] });
    series.get(row.label).points.push([row.tokens, row.total_bytes]);
  }
  const tokens = [...json.tokens].sort((a, b) => a - b);
  for (const { points } of series.values()) points.sort((a, b) => a[0] - b[0]);
  const all = json.rows.map((r) => r.total_bytes).filter((b) => b > 0);
  const [w, h, left, bottom, top, right] = [680, 320, 72, 36, 12, 170];
  const x = (t) => left + (Math.log2(t / tokens[0]) / Math.max(1, Math.log2(tokens.at(-1) / tokens[0]))) * (w - left - right);
  const lo = Math.log2(Math.min(...all)), hi = Math.log2(Math.max(...all));
  const y = (b) => top + (1 - (Math.log2(Math.max(b, 1)) - lo) / Math.max(1, hi - lo)) * (h - top - bottom);
  const chart = svg("svg", { viewBox: `0 0 ${w} ${h}`, role: "img", "aria-labelledby": "compare-title" });
  chart.append(svg("title", { id: "compare-title" }, `KV cache bytes by context length, ${json.batch} sequence(s), log scales`));
  for (const t of tokens) {
    chart.append(svg("line", { x1: x(t), x2: x(t), y1: top, y2: h - bottom, class: "grid" }));
    chart.append(svg("text", { x: x(t), y: h - bottom + 16, "text-anchor": "middle", class: "tick" }, shortTokens(t)));
  }
  const step = Math.max(1, Math.ceil((Math.floor(hi) - Math.ceil(lo)) / 4));
  for (let exp = Math.ceil(lo); exp <= Math.floor(hi); exp += step) {
    chart.append(svg("line", { x1: left, x2: w - right, y1: y(2 ** exp), y2: y(2 ** exp), class: "grid" }));
    chart.append(svg("text", { x: left - 6, y: y(2 ** exp) + 4, "text-anchor": "end", class: "tick" }, bridge.format_binary(BigInt(2 ** exp))));
  }
  let index = 0;
  for (const [label, { own, points }] of series) {
    const path = points.map(([t, b], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(b).toFixed(1)}`).join(" ");
    chart.append(svg("path", { d: path, class: `series s${index % 6}${own ? " own" : ""}` }));
    const [lt, lb] = points.at(-1);
    chart.append(svg("text", { x: x(lt) + 6, y: y(lb) + 4, class: `label s${index % 6}${own ? " own" : ""}` }, own ? `${label} (this model)` : label));
    index += 1;
  }
  const table = el("table", { class: "compare" }, el("caption", { text: "The chart's figures (bytes)" }),
    el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "variant" }),
      ...tokens.map((t) => el("th", { scope: "col", class: "num", text: `${t.toLocaleString("en")} tokens` })))));
  const body = el("tbody");
  for (const [label, { own, points }] of series) {
    body.append(el("tr", { class: own ? "own" : "" }, el("th", { scope: "row", text: own ? `${label} (this model)` : label }),
      ...points.map(([t, b]) => el("td", { class: "num", "data-compare": `${label}@${t}`, "data-value": String(b), text: b.toLocaleString("en") }))));
  }
  table.append(body);
  box.append(chart, el("details", {}, el("summary", { text: "Figures" }), el("div", { class: "scroll" }, table)),
    ...present(messages(json)), command(result));
}

function shortTokens(t) {
  return t % 1024 === 0 ? `${t / 1024}k` : t.toLocaleString("en");
}

// ---- the page's life ---------------------------------------------------------------------------

function setStatus(text) {
  $("status").textContent = text;
}

async function render() {
  const state = readForm();
  await writeURL(state);
  document.body.dataset.busy = "true";
  setStatus("Computing…");
  const model = await modelArgument(state);
  if (model === null) {
    const refused = { code: 1, stdout: "", stderr: hubConfig.error, argv: [] };
    for (const id of ["estimate-body", "explain-body", "fit-body", "compare-body"]) $(id).replaceChildren(failure(refused));
  } else {
    const argv = commands(model, state);
    drawEstimate(kvcalc(argv.estimate));
    drawExplain(kvcalc(argv.explain));
    drawFit(kvcalc(argv.fit));
    drawCompare(kvcalc(argv.compare));
  }
  $("share").href = location.href;
  $("engine-summary").textContent = summaries[state.engine] ?? "";
  // The release box offers the selected engine's releases (kvcalc engines --json), none for one without.
  $("release-list").replaceChildren(...(releases[state.engine] ?? []).map((v) => el("option", { value: v })));
  renders += 1;
  document.body.dataset.renders = String(renders);
  document.body.dataset.busy = "false";
  setStatus("");
}

let pending = null;
function schedule() {
  clearTimeout(pending);
  pending = setTimeout(() => render(), 120);
}

// The tokens slider moves over powers of two (256 .. 1M); the text box takes any length kvcalc reads.
function syncSlider() {
  const match = /^(\d+)(k?)$/i.exec($("tokens").value.trim());
  if (!match) return;
  const tokens = Number(match[1]) * (match[2] ? 1024 : 1);
  $("tokens-slider").value = String(Math.round(Math.log2(Math.max(tokens, 1))));
}

function showSource(source) {
  for (const name of ["preset", "config", "hub"]) $(`source-${name}`).hidden = name !== source;
}

function applyTheme(theme) {
  if (theme === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
}

function fill(select, values, labels = values) {
  select.replaceChildren(...values.map((v, i) => el("option", { value: v, text: labels[i] })));
}

function lists() {
  const list = (argv) => JSON.parse(kvcalc(argv).stdout);
  const presets = list(["presets", "--json"]);
  fill($("model"), presets.map((p) => p.name), presets.map((p) => `${p.name} (${p.attention})`));
  const engines = list(["engines", "--json"]);
  fill($("engine"), engines.map((e) => e.name));
  summaries = Object.fromEntries(engines.map((e) => [e.name, e.summary]));
  releases = Object.fromEntries(engines.map((e) => [e.name, e.versions]));
  const gpus = list(["gpus", "--json"]);
  fill($("gpu"), gpus.map((g) => g.name));
  const dtypes = JSON.parse(bridge.kv_dtypes());
  fill($("kv"), dtypes, dtypes.map((d) => (d === "auto" ? "auto (the engine's default)" : d)));
}

async function boot() {
  setStatus("Loading Python (Pyodide)…");
  const build = await (await fetch("build.json")).json();
  const pyodide = await loadPyodide({ indexURL: new URL("./pyodide/", location.href).href });
  setStatus("Loading kvcalc…");
  const archive = await (await fetch(build.kvcalc_zip)).arrayBuffer();
  pyodide.unpackArchive(archive, "zip", { extractDir: "/opt/kvcalc" });
  pyodide.runPython("import sys; sys.path.insert(0, '/opt/kvcalc')");
  bridge = pyodide.pyimport("bridge");
  lists();
  $("versions").textContent = `kvcalc ${build.python_packages[0].split(" ")[1]} in Pyodide ${build.pyodide}, ` +
    "running in this page: nothing leaves it.";
  writeForm(await stateFromURL());
  await render();
  // From the navigation's start to the first figures on screen (benchmarks/web.py reads it).
  document.body.dataset.firstAnswerMs = String(Math.round(performance.now()));
  $("form").addEventListener("input", (event) => {
    if (event.target.id === "tokens-slider") {
      const exp = Number(event.target.value);
      $("tokens").value = exp >= 10 ? `${2 ** (exp - 10)}k` : String(2 ** exp);
    }
    if (event.target.id === "tokens") syncSlider();
    if (event.target.name === "source") showSource(event.target.value);
    if (event.target.id === "theme") applyTheme(event.target.value);
    schedule();
  });
  $("form").addEventListener("submit", (event) => { event.preventDefault(); render(); });
  document.addEventListener("click", (event) => {
    const text = event.target.dataset?.copy ?? (event.target.id === "share-copy" ? location.href : null);
    if (text === null || text === undefined) return;
    navigator.clipboard?.writeText(text).then(() => setStatus("Copied."), () => setStatus("Copy it by hand: the browser refused."));
  });
}

// What a test (or a console) drives the page with: set a state as if typed, wait for its figures.
window.kvcalcPage = {
  async show(partial) {
    writeForm({ ...DEFAULTS, ...partial });
    await render();
    return renders;
  },
  state: () => readForm(),
};

window.kvcalcPage.ready = boot().catch((error) => {
  setStatus(`kvcalc could not start: ${error.message ?? error}`);
  document.body.dataset.failed = "true";
  throw error;
});
