// raysampler dashboard: a small single-page front end over the public REST API (/v1), nothing else.
// The API key lives in sessionStorage and goes out as the Bearer header on every request.
"use strict";

const KEY = "raysampler.apiKey";
const POLL_MS = 2000;
const TRACE_POINTS = 2000;   // per chain: the API thins the stored draws evenly to at most this many
const PAGE = 20;

const $ = (sel, root = document) => root.querySelector(sel);
const view = $("#view");
let timers = [];
let plots = [];

class ApiError extends Error {
  constructor(status, body) {
    super(typeof body?.detail === "string" ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(path, options = {}) {
  const headers = Object.assign({ Authorization: `Bearer ${sessionStorage.getItem(KEY) || ""}` }, options.headers);
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) {
    sessionStorage.removeItem(KEY);
    if (location.hash !== "#/signin") location.hash = "#/signin";
    throw new ApiError(401, { detail: "the API key was refused" });
  }
  if (!response.ok) {
    let body = null;
    try { body = await response.json(); } catch (e) { body = { detail: response.statusText }; }
    throw new ApiError(response.status, body);
  }
  return response;
}
const getJSON = async (path) => (await api(path)).json();

// `style` takes an object of CSS properties, set through the CSSOM: the page's Content-Security-Policy refuses
// inline style attributes (setAttribute("style", ...)) but not this.
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k === "style") Object.assign(node.style, v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}
const fmt = (v, digits = 3) => (v === null || v === undefined || Number.isNaN(v) ? "–" :
  (typeof v === "number" ? (Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(2)
                                                                                 : v.toFixed(digits)) : String(v)));
const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "–");
function every(ms, fn) { fn(); timers.push(setInterval(fn, ms)); }
function clearView() {
  timers.forEach(clearInterval);
  timers = [];
  plots.forEach((p) => p.destroy());
  plots = [];
  view.replaceChildren();
}
function mount(id) { view.append($(`#${id}`).content.cloneNode(true)); }

// ------------------------------------------------------------------------------------------------ sign-in

async function showSignin() {
  $("#nav").hidden = true;
  mount("tpl-signin");
  $("#signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, $("#key").value.trim());
    try {
      await getJSON("/v1/runs?limit=1");
      location.hash = "#/runs";
    } catch (e) {
      sessionStorage.removeItem(KEY);
      $("#signin-error").textContent = e.status === 401 ? "That API key was refused." : e.message;
    }
  });
}

// ------------------------------------------------------------------------------------------------ runs list

async function showRuns() {
  mount("tpl-runs");
  const cursors = [null];  // cursor of each page seen; the last is the current page's
  let next = null;
  const filter = $("#status-filter");
  filter.value = sessionStorage.getItem("raysampler.filter") || "";
  const refresh = async () => {
    const q = new URLSearchParams({ limit: PAGE });
    if (filter.value) q.set("status", filter.value);
    if (cursors[cursors.length - 1]) q.set("cursor", cursors[cursors.length - 1]);
    try {
      const page = await getJSON(`/v1/runs?${q}`);
      next = page.next_cursor;
      renderRuns(page.runs);
      $("#runs-error").textContent = "";
    } catch (e) { $("#runs-error").textContent = e.message; }
    $("#next-page").disabled = !next;
    $("#prev-page").disabled = cursors.length === 1;
  };
  filter.addEventListener("change", () => {
    sessionStorage.setItem("raysampler.filter", filter.value);
    cursors.splice(1);
    refresh();
  });
  $("#next-page").addEventListener("click", () => { if (next) { cursors.push(next); refresh(); } });
  $("#prev-page").addEventListener("click", () => { if (cursors.length > 1) { cursors.pop(); refresh(); } });
  every(POLL_MS, refresh);
}

function renderRuns(runs) {
  const body = $("#runs-body");
  $("#runs-empty").hidden = runs.length > 0;
  body.replaceChildren(...runs.map((r) => {
    const p = r.progress;
    const frac = p.rounds_total ? Math.min(1, p.rounds_done / p.rounds_total) : 0;
    const bar = el("div", { class: "bar", title: `${p.rounds_done} / ${p.rounds_total} rounds` },
                   el("div", { style: { width: `${(100 * frac).toFixed(1)}%` } }));
    const d = r.diagnostics || {};
    const row = el("tr", { class: "clickable", "data-run": r.id },
      el("td", {}, el("a", { href: `#/run/${r.id}`, text: r.id })),
      el("td", {}, el("span", { class: `status ${r.status}`, text: r.status })),
      el("td", { text: r.spec.model.family }), el("td", { text: r.spec.algorithm.name }),
      el("td", { class: "num", text: r.spec.chains }), el("td", {}, bar),
      el("td", { class: "num", text: p.draws_stored }),
      el("td", { class: "num", text: fmt(d.min_ess_bulk, 0) }), el("td", { class: "num", text: fmt(d.max_rhat) }),
      el("td", { text: when(r.started_at) }), el("td", { text: when(r.finished_at) }));
    row.addEventListener("click", (ev) => { if (ev.target.tagName !== "A") location.hash = `#/run/${r.id}`; });
    return row;
  }));
}

// ------------------------------------------------------------------------------------------------ one run

const chainColour = (c, n) => `hsl(${Math.round((360 * c) / Math.max(n, 1))}, 65%, 45%)`;

async function showRun(id) {
  mount("tpl-run");
  $("#run-id").textContent = id;
  const state = { info: null, param: 0, eventsAfter: 0, summaryAt: -1, traceAt: -1, trace: null, hist: null };
  window.rsDashboard.state = state;
  $("#param").addEventListener("change", (ev) => {
    state.param = Number(ev.target.value);
    state.traceAt = -1;
    refreshTrace(id, state);
  });
  $("#cancel").addEventListener("click", () => act(() => api(`/v1/runs/${id}/cancel`, { method: "POST" })));
  $("#delete").addEventListener("click", () => act(async () => {
    if (!confirm(`Delete run ${id} and its draws?`)) return;
    await api(`/v1/runs/${id}`, { method: "DELETE" });
    location.hash = "#/runs";
  }));
  $("#dl-netcdf").addEventListener("click", () => act(() => download(`/v1/runs/${id}/arviz`, `${id}.nc`)));
  $("#dl-ndjson").addEventListener("click", () => act(() => download(`/v1/runs/${id}/draws`, `${id}.ndjson`)));
  every(POLL_MS, async () => {
    try {
      state.info = await getJSON(`/v1/runs/${id}`);
    } catch (e) {
      $("#run-error").textContent = e.status === 404 ? `No run ${id} for this key.` : e.message;
      return;
    }
    renderRunInfo(state);
    await Promise.all([refreshTrace(id, state), refreshSummary(id, state), refreshEvents(id, state)]);
  });
}

async function act(fn) {
  try { await fn(); $("#run-error").textContent = ""; } catch (e) { $("#run-error").textContent = e.message; }
}

async function download(path, name) {
  const blob = await (await api(path)).blob();
  const a = el("a", { href: URL.createObjectURL(blob), download: name });
  document.body.append(a);
  a.click();
  a.remove();
}

function renderRunInfo(state) {
  const r = state.info;
  const p = r.progress;
  $("#run-status").textContent = r.status;
  $("#run-status").className = `status ${r.status}`;
  const frac = p.rounds_total ? Math.min(1, p.rounds_done / p.rounds_total) : 0;
  $("#run-progress").style.width = `${(100 * frac).toFixed(1)}%`;
  $("#run-progress-text").textContent = `${p.rounds_done} of ${p.rounds_total} rounds · ${p.draws_stored} draws `
    + `per chain stored · ${r.spec.chains} chains · ${r.spec.model.family} · ${r.spec.algorithm.name}`
    + (r.restarts ? ` · ${r.restarts} restarts` : "");
  const terminal = ["SUCCEEDED", "FAILED", "CANCELLED"].includes(r.status);
  $("#cancel").disabled = terminal;
  $("#delete").disabled = !terminal;
  if (r.error) $("#run-error").textContent = r.error;
  $("#run-warnings").replaceChildren(...r.warnings.map((w) => el("li", { text: w })));
  const select = $("#param");
  const names = r.param_names || [];
  if (select.options.length !== names.length) {
    select.replaceChildren(...names.map((n, i) => el("option", { value: i, text: n })));
    select.value = state.param;
  }
  $("#workers").replaceChildren(
    el("tr", {}, ...["shard", "site", "host", "N", "τ (ms)", "idle"].map((h) => el("th", { text: h }))),
    ...r.workers.map((w) => el("tr", {},
      el("td", { class: "num", text: w.shard }), el("td", { text: w.site || "–" }),
      el("td", { text: w.hostname || "–", title: w.node_id || "" }),
      el("td", { class: "num", text: w.local_steps ?? "–" }),
      el("td", { class: "num", text: w.tau_s == null ? "–" : (1e3 * w.tau_s).toFixed(3) }),
      el("td", {}, el("div", { class: "bar", title: fmt(w.idle_fraction) },
                      el("div", { style: { width: `${(100 * (w.idle_fraction || 0)).toFixed(1)}%` } }))))));
  $("#plan").textContent = r.plan ? JSON.stringify(r.plan, null, 1) : "(set when the run starts)";
}

async function refreshTrace(id, state) {
  const r = state.info;
  if (!r || !r.param_names || r.param_names.length === 0) return;
  const stored = r.progress.draws_stored;
  if (stored === state.traceAt) return;
  const t = await getJSON(`/v1/runs/${id}/trace?param=${state.param}&max_points=${TRACE_POINTS}`);
  state.traceAt = t.draws_stored;
  state.trace = t;
  $("#trace-note").textContent = `${t.draws_stored} draws per chain${t.step > 1 ? `, 1 in ${t.step} shown` : ""}`;
  drawTrace(t);
  drawHistogram(t);
}

function plotWidth(node) { return Math.max(300, node.clientWidth || 600); }

function drawTrace(t) {
  const node = $("#trace-plot");
  const n = t.values.length;
  const data = [t.index, ...t.values];
  if (plots[0] && plots[0].series.length === n + 1) {
    plots[0].setData(data);
    return;
  }
  if (plots[0]) plots[0].destroy();
  node.replaceChildren();
  const series = [{ label: "draw" }];
  for (let c = 0; c < n; c++) series.push({ label: `chain ${c}`, stroke: chainColour(c, n), width: 1, points: { show: false } });
  plots[0] = new uPlot({ width: plotWidth(node), height: 300, series, legend: { show: n <= 8 },
                         scales: { x: { time: false } }, axes: [{ label: "draw" }, { label: t.name }] }, data, node);
}

function drawHistogram(t) {
  const node = $("#hist-plot");
  const all = t.values.flat().filter((v) => v !== null);
  if (all.length < 2) return;
  let lo = Math.min(...all), hi = Math.max(...all);
  if (hi === lo) { lo -= 0.5; hi += 0.5; }
  const bins = 40, width = (hi - lo) / bins;
  const centres = Array.from({ length: bins }, (_, i) => lo + (i + 0.5) * width);
  const dens = t.values.map((chain) => {
    const counts = new Array(bins).fill(0);
    let m = 0;
    for (const v of chain) if (v !== null) { counts[Math.min(bins - 1, Math.floor((v - lo) / width))]++; m++; }
    return counts.map((k) => (m ? k / (m * width) : 0));
  });
  const n = dens.length;
  const data = [centres, ...dens];
  if (plots[1] && plots[1].series.length === n + 1) { plots[1].setData(data); return; }
  if (plots[1]) plots[1].destroy();
  node.replaceChildren();
  const series = [{ label: t.name }];
  for (let c = 0; c < n; c++) {
    series.push({ label: `chain ${c}`, stroke: chainColour(c, n), width: 1, paths: uPlot.paths.stepped({ align: 0 }),
                  points: { show: false } });
  }
  plots[1] = new uPlot({ width: plotWidth(node), height: 300, series, legend: { show: false },
                         scales: { x: { time: false } }, axes: [{ label: t.name }, { label: "density" }] }, data, node);
}

async function refreshSummary(id, state) {
  const r = state.info;
  if (r.progress.draws_stored < 4 || r.progress.draws_stored === state.summaryAt) return;
  let s;
  try { s = await getJSON(`/v1/runs/${id}/summary`); } catch (e) { $("#summary-note").textContent = e.message; return; }
  state.summaryAt = s.draws_per_chain;
  const minEss = 100 * s.chains;
  const head = el("tr", {}, el("th", { text: "parameter" }), ...s.columns.map((c) => el("th", { class: "num", text: c })));
  const rows = s.rows.map((row) => el("tr", { "data-param": row.param }, el("td", { text: row.param }),
    ...s.columns.map((c) => {
      const v = row[c];
      const bad = (c === "r_hat" && v !== null && v >= 1.01) || (c.startsWith("ess") && v !== null && v < minEss);
      return el("td", { class: `num${bad ? " bad" : ""}`, text: fmt(v, c.startsWith("ess") ? 0 : 3) });
    })));
  $("#summary").replaceChildren(head, ...rows);
  $("#summary-note").textContent = `${s.draws_per_chain} draws per chain × ${s.chains} chains, ${s.ci_prob} HDI`;
}

async function refreshEvents(id, state) {
  const text = await (await api(`/v1/runs/${id}/events?follow=false&after=${state.eventsAfter}`)).text();
  const list = $("#events");
  for (const frame of text.split("\n\n")) {
    const fields = {};
    for (const line of frame.split("\n")) {
      const i = line.indexOf(":");
      if (i > 0) fields[line.slice(0, i)] = line.slice(i + 1).trim();
    }
    if (!fields.id || !fields.event) continue;
    state.eventsAfter = Math.max(state.eventsAfter, Number(fields.id));
    if (fields.event === "progress" && list.lastElementChild?.dataset.kind === "progress") list.lastElementChild.remove();
    const item = el("li", { text: `${fields.event}: ${fields.data}` });
    item.dataset.kind = fields.event;
    list.append(item);
  }
}

// ------------------------------------------------------------------------------------------------ submit

let schema = null;
let families = null;
async function enums() {
  if (!schema) schema = (await (await fetch("/openapi.json")).json()).components.schemas;
  // the registered model families (built-in and from installed packages), as the service lists them
  if (!families) families = (await getJSON("/v1/models")).families.map((f) => f.name);
  return {
    datasets: schema.DataRef.properties.dataset.enum.filter((v) => v),
    families,
    algorithms: schema.AlgorithmSpec.properties.name.enum,
  };
}

async function showSubmit() {
  mount("tpl-submit");
  const e = await enums();
  const fill = (sel, values, chosen) => {
    $(sel).replaceChildren(...values.map((v) => el("option", { value: v, text: v.replace("builtin:", "") })));
    $(sel).value = chosen;
  };
  fill("#f-dataset", e.datasets, "builtin:breast_cancer");
  fill("#f-family", e.families, "logistic_regression");
  fill("#f-algorithm", e.algorithms, "dglmc");
  const form = $("#submit-form");
  const source = () => form.querySelector("input[name=source]:checked").value;
  const num = (sel) => ($(sel).value === "" ? null : Number($(sel).value));
  const build = () => {
    const spec = {
      model: { family: $("#f-family").value },
      algorithm: { name: $("#f-algorithm").value, params: {} },
      chains: num("#f-chains"),
      num_shards: num("#f-shards-n"),
      num_rounds: $("#f-auto").checked ? "auto" : num("#f-rounds"),
      seed: num("#f-seed"),
    };
    if ($("#f-prior-scale").value !== "") spec.model.prior_scale = num("#f-prior-scale");
    if (num("#f-burn") !== null) spec.burn_in = num("#f-burn");
    if (source() === "dataset") spec.data = { dataset: $("#f-dataset").value };
    else if (source() === "upload") spec.data = { dataset_id: "(set on submit, from the uploaded file)" };
    else {
      let shards = [];
      try { shards = JSON.parse($("#f-shards").value || "[]"); } catch (err) { shards = $("#f-shards").value; }
      spec.data = { shards, y_column: $("#f-shards-ycol").value };
    }
    $("#spec-json").value = JSON.stringify(spec, null, 2);
  };
  form.addEventListener("input", (ev) => {
    if (ev.target.name === "source") {
      form.querySelectorAll("[data-source]").forEach((d) => { d.hidden = d.dataset.source !== source(); });
    }
    $("#f-rounds").disabled = $("#f-auto").checked;
    build();
  });
  build();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearFieldErrors();
    let spec;
    try { spec = JSON.parse($("#spec-json").value); } catch (err) {
      $("#submit-error").textContent = `The request is not valid JSON: ${err.message}`;
      return;
    }
    $("#submit").disabled = true;
    try {
      if (source() === "upload") {
        const file = $("#f-file").files[0];
        if (!file) { showFieldError("file", "Choose a file to upload."); return; }
        const body = new FormData();
        body.append("file", file);
        body.append("y_column", $("#f-ycol").value || "y");
        const ds = await (await api("/v1/datasets", { method: "POST", body })).json();
        spec.data = { dataset_id: ds.id };
      }
      const run = await (await api("/v1/runs", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(spec),
      })).json();
      location.hash = `#/run/${run.id}`;
    } catch (err) {
      if (err.status === 422 && Array.isArray(err.body?.detail)) {
        for (const d of err.body.detail) showFieldError(d.loc.filter((p) => p !== "body").join("."), d.msg);
      } else {
        $("#submit-error").textContent = err.message;
      }
    } finally {
      $("#submit").disabled = false;
    }
  });
}

function clearFieldErrors() {
  document.querySelectorAll(".field-error.dynamic").forEach((n) => n.remove());
  document.querySelectorAll(".field.invalid").forEach((n) => n.classList.remove("invalid"));
  document.querySelectorAll("[data-error-for]").forEach((n) => { n.textContent = ""; });
  $("#submit-error").textContent = "";
}

// The API's 422 names the field by its location (e.g. "chains", "model.prior_scale", "data.shards.0"): the message
// goes next to the form field with the longest matching data-loc, else under the form.
function showFieldError(loc, msg) {
  const fixed = document.querySelector(`[data-error-for="${loc}"]`);
  if (fixed) { fixed.textContent = msg; return; }
  let best = null;
  for (const f of document.querySelectorAll(".field[data-loc]")) {
    const l = f.dataset.loc;
    if ((loc === l || loc.startsWith(`${l}.`)) && (!best || l.length > best.dataset.loc.length)) best = f;
  }
  const target = best && !best.hidden ? best : null;
  const note = el("span", { class: "field-error dynamic", "data-loc": loc, text: `${loc}: ${msg}` });
  if (target) { target.classList.add("invalid"); target.append(note); } else $("#submit-error").append(note);
}

// ------------------------------------------------------------------------------------------------ routing

window.rsDashboard = {
  state: null,
  // What the trace plot shows (tests read it): per-chain point counts of the plotted series.
  plotted() {
    const p = plots[0];
    if (!p) return [];
    return p.data.slice(1).map((s) => s.filter((v) => v !== null && v !== undefined).length);
  },
};

async function route() {
  clearView();
  const hash = location.hash || "#/runs";
  if (!sessionStorage.getItem(KEY) || hash === "#/signin") return showSignin();
  $("#nav").hidden = false;
  const run = hash.match(/^#\/run\/([A-Za-z0-9_.-]+)$/);
  if (run) return showRun(run[1]);
  if (hash === "#/submit") return showSubmit();
  return showRuns();
}

$("#signout").addEventListener("click", () => { sessionStorage.removeItem(KEY); location.hash = "#/signin"; });
window.addEventListener("hashchange", route);
route();
