// raysampler dashboard: a small single-page front end over the public REST API (/v1), nothing else.
// The API key lives in sessionStorage and goes out as the Bearer header on every request.
"use strict";

const KEY = "raysampler.apiKey";
const FILTERS = "raysampler.filters";
const AFTER_SIGNIN = "raysampler.afterSignin";
const LIST_POLL_MS = 2000;     // the runs list: the API has no list stream
const SAFETY_POLL_MS = 15000;  // a run page learns of changes from its event stream; this only guards against a stall
const INFO_GAP_MS = 1000;      // at most one run-info request a second, however many events arrive
const TRACE_POINTS = 2000;     // per chain: the API thins the stored draws evenly to at most this many
const PAGE = 20;
const TERMINAL = ["SUCCEEDED", "FAILED", "CANCELLED"];

const $ = (sel, root = document) => root.querySelector(sel);
const view = $("#view");
let page = null;  // the current view's lifetime: stopped (timers, streams, plots) when the view changes

// ------------------------------------------------------------------------------------------------ status line

// Errors nobody caught (a page changed under a request, a bug) are shown here, not thrown at the console.
function say(message) {
  const line = $("#status-line");
  line.textContent = message || "";
  line.hidden = !message;
}
window.addEventListener("error", (ev) => { ev.preventDefault(); say(`Something went wrong: ${ev.message}`); });
window.addEventListener("unhandledrejection", (ev) => {
  ev.preventDefault();
  say(`Something went wrong: ${ev.reason?.message || ev.reason}`);
});

// ------------------------------------------------------------------------------------------------ requests

class ApiError extends Error {
  constructor(status, body) {
    super(typeof body?.detail === "string" ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// Requests counted per resource (method and path, without the query): how many were sent, how many are in flight
// now and the most that ever were at once. Tests read it; the run page keeps every resource at one in flight.
const net = { count: {}, inflight: {}, maxInflight: {}, urls: {} };
function track(method, path) {
  const k = `${method} ${path.split("?")[0]}`;
  net.count[k] = (net.count[k] || 0) + 1;
  net.urls[`${method} ${path}`] = (net.urls[`${method} ${path}`] || 0) + 1;
  net.inflight[k] = (net.inflight[k] || 0) + 1;
  net.maxInflight[k] = Math.max(net.maxInflight[k] || 0, net.inflight[k]);
  let done = false;
  return () => { if (!done) { done = true; net.inflight[k]--; } };
}

// `options.signin`: a refused key is the caller's to report (no redirect); `options.keepOpen`: the caller releases
// the request's count when it has read the body (a stream), through `response.release()`.
async function api(path, options = {}) {
  const release = track(options.method || "GET", path);
  try {
    const headers = Object.assign({ Authorization: `Bearer ${sessionStorage.getItem(KEY) || ""}` }, options.headers);
    const response = await fetch(path, Object.assign({}, options, { headers }));
    if (response.status === 401) {
      if (!options.signin) {
        sessionStorage.removeItem(KEY);
        if (location.hash !== "#/signin") location.hash = "#/signin";
      }
      throw new ApiError(401, { detail: "the API key was refused" });
    }
    if (!response.ok) {
      let body = null;
      try { body = await response.json(); } catch (e) { body = { detail: response.statusText }; }
      throw new ApiError(response.status, body);
    }
    if (options.keepOpen) response.release = release; else release();
    return response;
  } catch (e) {
    release();
    throw e;
  }
}
const getJSON = async (path) => (await api(path)).json();

// One resource (the run, its trace, its summary, ...) loaded by `load`: at most one request in flight; asks while
// one is in flight are merged into one more load after it; at least `minGapMs` between loads; after an error the
// next try waits 1, 2, 4, ... 30 s, and after a slow answer as long as it took. `lost(e)` may stop it (404/403).
class Resource {
  constructor(load, { minGapMs = 0, onError = () => {} } = {}) {
    Object.assign(this, { load, minGapMs, onError, busy: false, again: false, timer: null, failures: 0,
                          stopped: false });
  }

  poke() {
    if (this.stopped) return;
    if (this.busy || this.timer) { this.again = true; return; }
    this.run();
  }

  async run() {
    this.busy = true;
    this.again = false;
    const t0 = performance.now();
    let failed = false;
    try {
      await this.load();
      this.failures = 0;
    } catch (e) {
      failed = true;
      this.failures++;
      this.onError(e);
    } finally {
      this.busy = false;
    }
    if (this.stopped) return;
    const took = performance.now() - t0;
    const gap = failed ? Math.min(30000, 1000 * 2 ** (this.failures - 1)) : Math.max(this.minGapMs, took > 1000 ? took : 0);
    if (!failed && !this.again && gap === 0) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      if (failed || this.again) this.run();
    }, gap);
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

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
const kib = (n) => (n == null ? "–" : n < 1024 ? `${n} B` : `${(n / 1024).toFixed(1)} KiB`);
// A worker's release ledger in the workers table: its totals by mode, each kind of message in the tooltip.
const ledgerCell = (l) => el("td", {
  class: "num",
  text: l ? `${kib(l.masked_bytes)} / ${kib(l.sealed_bytes)} / ${kib(l.plain_bytes)}` : "–",
  title: l ? l.releases.map((r) => `${r.quantity} [${r.shape.join("×")}] ×${r.messages}: ${kib(r.bytes)} ${r.mode}`)
    .join("\n") : "",
});
const clock = (t) => new Date(t * 1000).toLocaleTimeString();
const setText = (node, text) => { if (node.textContent !== text) node.textContent = text; };
const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

class Page {
  constructor() { this.alive = true; this.stops = []; }
  onStop(fn) { this.stops.push(fn); }
  every(ms, fn) { fn(); const t = setInterval(fn, ms); this.onStop(() => clearInterval(t)); }
  resource(load, opts) { const r = new Resource(load, opts); this.onStop(() => r.stop()); return r; }
  stop() { this.alive = false; for (const fn of this.stops) { try { fn(); } catch (e) { /* already gone */ } } }
}

function clearView() {
  if (page) page.stop();
  page = new Page();
  view.replaceChildren();
  return page;
}
function mount(id) { view.append($(`#${id}`).content.cloneNode(true)); }

// ------------------------------------------------------------------------------------------------ sign-in

function resetFilters() { sessionStorage.removeItem(FILTERS); }

async function showSignin() {
  $("#nav").hidden = true;
  if (location.hash !== "#/signin") {
    if (location.hash) sessionStorage.setItem(AFTER_SIGNIN, location.hash);  // back there once signed in
    history.replaceState(null, "", "#/signin");
  }
  mount("tpl-signin");
  const pg = page;
  $("#signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const box = $("#key");
    const key = box.value.trim();
    if (!key) { $("#signin-error").textContent = "Paste an API key first."; return; }
    sessionStorage.setItem(KEY, key);
    try {
      await getJSONSignin("/v1/runs?limit=1");
      if (!pg.alive) return;
      resetFilters();  // filters belong to the tenant that set them
      location.hash = sessionStorage.getItem(AFTER_SIGNIN) || "#/runs";
      sessionStorage.removeItem(AFTER_SIGNIN);
    } catch (e) {
      sessionStorage.removeItem(KEY);
      if (!pg.alive) return;
      $("#signin-error").textContent = e.status === 401 ? "That API key was refused. Check it and try again."
                                                         : e.message;
      box.select();
    }
  });
}
const getJSONSignin = async (path) => (await api(path, { signin: true })).json();

// ------------------------------------------------------------------------------------------------ runs list

function loadFilters() {
  try { return Object.assign({ status: "", name: "", tag: "" }, JSON.parse(sessionStorage.getItem(FILTERS) || "{}")); }
  catch (e) { return { status: "", name: "", tag: "" }; }
}

async function showRuns() {
  mount("tpl-runs");
  const pg = page;
  const cursors = [null];  // cursor of each page seen; the last is the current page's
  let next = null;
  const selected = new Set();
  const f = loadFilters();
  $("#status-filter").value = f.status;
  $("#name-filter").value = f.name;
  $("#tag-filter").value = f.tag;
  const list = pg.resource(async () => {
    const q = new URLSearchParams({ limit: PAGE });
    const cur = loadFilters();
    if (cur.status) q.set("status", cur.status);
    if (cur.name) q.set("name", cur.name);
    if (cur.tag) q.append("tag", cur.tag);
    if (cursors[cursors.length - 1]) q.set("cursor", cursors[cursors.length - 1]);
    const got = await getJSON(`/v1/runs?${q}`);
    if (!pg.alive) return;
    next = got.next_cursor;
    renderRuns(got.runs, selected);
    $("#runs-error").textContent = "";
    $("#next-page").disabled = !next;
    $("#prev-page").disabled = cursors.length === 1;
  }, { onError: (e) => {
    if (!pg.alive) return;
    if (e.status === 422 && Array.isArray(e.body?.detail)) {
      $("#filter-error").textContent = e.body.detail.map((d) => `${d.loc.slice(1).join(".")}: ${d.msg}`).join("; ");
    } else $("#runs-error").textContent = e.message;
  } });
  $("#runs-filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    $("#filter-error").textContent = "";
    const tag = $("#tag-filter").value.trim();
    if (tag && !tag.includes(":")) { $("#filter-error").textContent = "tag: write it as key:value"; return; }
    sessionStorage.setItem(FILTERS, JSON.stringify({ status: $("#status-filter").value,
                                                     name: $("#name-filter").value.trim(), tag }));
    cursors.splice(1);
    list.poke();
  });
  $("#status-filter").addEventListener("change", () => $("#runs-filters").requestSubmit());
  $("#next-page").addEventListener("click", () => { if (next) { cursors.push(next); list.poke(); } });
  $("#prev-page").addEventListener("click", () => { if (cursors.length > 1) { cursors.pop(); list.poke(); } });
  $("#runs-body").addEventListener("change", (ev) => {
    if (ev.target.type !== "checkbox") return;
    if (ev.target.checked) selected.add(ev.target.value); else selected.delete(ev.target.value);
    $("#compare").disabled = selected.size < 2;
  });
  $("#compare").addEventListener("click", () => { location.hash = `#/compare/${[...selected].join(",")}`; });
  pg.every(LIST_POLL_MS, () => list.poke());
}

const fraction = (p) => Math.max(0, Math.min(1, p.fraction ?? (p.rounds_total ? p.rounds_done / p.rounds_total : 0)));
const progressTitle = (r) => (r.progress.basis === "convergence"
  ? `${(100 * fraction(r.progress)).toFixed(0)}% of the way to the convergence targets`
  : `${r.progress.rounds_done} / ${r.progress.rounds_total} rounds`);
const tagText = (tags) => Object.entries(tags || {}).map(([k, v]) => `${k}=${v}`).join(", ");

// Rows are kept and updated in place (keyed by run id), so focus and selection survive a refresh.
function renderRuns(runs, selected) {
  const body = $("#runs-body");
  $("#runs-empty").hidden = runs.length > 0;
  const old = new Map([...body.rows].map((tr) => [tr.dataset.run, tr]));
  let prev = null;
  for (const r of runs) {
    let row = old.get(r.id);
    if (!row) row = newRunRow(r, selected);
    old.delete(r.id);
    updateRunRow(row, r);
    const want = prev ? prev.nextSibling : body.firstChild;
    if (want !== row) body.insertBefore(row, want);
    prev = row;
  }
  for (const row of old.values()) row.remove();
}

function newRunRow(r, selected) {
  const box = el("input", { type: "checkbox", value: r.id, "aria-label": `select run ${r.id} to compare` });
  box.checked = selected.has(r.id);
  const cells = ["name", "tags", "status", "family", "algorithm", "chains", "progress", "draws", "ess", "rhat",
                 "started", "finished"];
  const row = el("tr", { class: "clickable", "data-run": r.id }, el("td", {}, box),
                 el("td", {}, el("a", { href: `#/run/${r.id}`, text: r.id })),
                 ...cells.map((c) => el("td", { "data-col": c })));
  for (const c of ["chains", "draws", "ess", "rhat"]) row.querySelector(`[data-col=${c}]`).className = "num";
  row.querySelector("[data-col=status]").append(el("span", { class: "status" }));
  row.querySelector("[data-col=progress]").append(el("div", { class: "bar" }, el("div")));
  row.addEventListener("click", (ev) => {
    if (!["A", "INPUT"].includes(ev.target.tagName)) location.hash = `#/run/${r.id}`;
  });
  return row;
}

function updateRunRow(row, r) {
  const cell = (c) => row.querySelector(`[data-col=${c}]`);
  const d = r.diagnostics || {};
  setText(cell("name"), r.name || "–");
  setText(cell("tags"), tagText(r.tags) || "–");
  const status = cell("status").firstChild;
  setText(status, r.status);
  status.className = `status ${r.status}`;
  setText(cell("family"), r.spec.model.family);
  setText(cell("algorithm"), r.spec.algorithm.name);
  setText(cell("chains"), String(r.chains || r.spec.chains));
  const bar = cell("progress").firstChild;
  bar.title = progressTitle(r);
  bar.firstChild.style.width = `${(100 * fraction(r.progress)).toFixed(1)}%`;
  setText(cell("draws"), String(r.progress.draws_stored));
  setText(cell("ess"), fmt(d.min_ess_bulk, 0));
  setText(cell("rhat"), fmt(d.max_rhat));
  setText(cell("started"), when(r.started_at));
  setText(cell("finished"), when(r.finished_at));
}

// ------------------------------------------------------------------------------------------------ one run

async function showRun(id) {
  mount("tpl-run");
  const pg = page;
  $("#run-id").textContent = id;
  const plots = new RunPlots();
  pg.onStop(() => plots.destroy());
  const state = { info: null, param: 0, pairParam: 1, traceKey: null, pairKey: null, trace: null, pair: null,
                  summaryAt: -1, summaryShown: -1, diagKey: null, eventsAfter: 0, lost: false, streaming: false,
                  infoAt: 0, tau: { t: [], byShard: new Map(), last: "" }, marks: [] };
  window.rsDashboard.state = state;
  window.rsDashboard.plots = plots;
  wireChecks(id, plots);
  wirePpc(id, plots);
  wireEffects(id);

  // A run this key cannot see (404, or 403): say so once and stop asking.
  const lose = (e) => {
    if (!pg.alive || state.lost) return;
    state.lost = true;
    $("#run-error").textContent = e.status === 404 ? `No run ${id} for this key.` : `Not allowed: ${e.message}`;
    pg.stop();
  };
  const onError = (where) => (e) => {
    if (!pg.alive) return;
    if (e.status === 404 || e.status === 403) {
      if (where === "run" || e.status === 403) lose(e); else $(`#${where}-note`).textContent = e.message;
      return;
    }
    const target = where === "run" ? $("#run-error") : $(`#${where}-note`);
    target.textContent = `${e.message} (retrying)`;
  };

  const res = {};
  res.info = pg.resource(async () => {
    const r = await getJSON(`/v1/runs/${id}`);
    if (!pg.alive) return;
    state.info = r;
    state.infoAt = performance.now();
    if ($("#run-error").textContent.endsWith("(retrying)")) $("#run-error").textContent = "";
    renderRunInfo(state, plots);
    sampleWorkers(state, plots);
    res.trace.poke();
    res.summary.poke();
    res.diag.poke();
  }, { minGapMs: INFO_GAP_MS, onError: onError("run") });

  res.trace = pg.resource(async () => {
    const r = state.info;
    if (!r || !r.param_names || r.param_names.length === 0 || r.progress.draws_stored < 1) return;
    const draws = r.progress.draws_stored;
    const key = `${state.param}|${draws}`;
    if (key !== state.traceKey) {
      const t = await getJSON(`/v1/runs/${id}/trace?param=${state.param}&max_points=${TRACE_POINTS}`);
      if (!pg.alive) return;
      state.traceKey = `${t.param}|${draws}`;
      state.trace = t;
      $("#trace-note").textContent = `${t.draws_stored} draws per chain${t.step > 1 ? `, 1 in ${t.step} shown` : ""}`;
      plots.trace($("#trace-plot"), t);
      plots.histogram($("#hist-plot"), t);
    }
    if (r.param_names.length < 2) return;
    const pairKey = `${state.pairParam}|${draws}`;
    if (pairKey !== state.pairKey) {
      const t = await getJSON(`/v1/runs/${id}/trace?param=${state.pairParam}&max_points=${TRACE_POINTS}`);
      if (!pg.alive) return;
      state.pairKey = `${t.param}|${draws}`;
      state.pair = t;
    }
    if (state.trace && state.pair) plots.pair($("#pair-plot"), state.trace, state.pair);
  }, { minGapMs: INFO_GAP_MS, onError: onError("trace") });

  res.summary = pg.resource(async () => {
    const r = state.info;
    if (!r || r.progress.draws_stored < 4 || r.progress.draws_stored === state.summaryAt) return;
    if (state.summaryAt < 0) {
      setText($("#summary-note"), `Computing the summary of ${r.progress.draws_stored} draws per chain…`);
    }
    const asked = r.progress.draws_stored;
    const s = await getJSON(`/v1/runs/${id}/summary`);
    if (!pg.alive) return;
    // asked again only once more draws are stored; the table may be an earlier one (a running run's latest), and
    // is drawn only when it is a new one
    state.summaryAt = asked;
    if (s.draws_per_chain === state.summaryShown) return;
    state.summaryShown = s.draws_per_chain;
    renderSummary(s);
    plots.forest($("#forest-plot"), s);
  }, { minGapMs: INFO_GAP_MS, onError: onError("summary") });

  res.diag = pg.resource(async () => {
    const r = state.info;
    if (!r || !r.param_names || r.progress.draws_stored < 4) return;
    const draws = r.progress.draws_stored;  // progress events update it while the request is out
    if (`${state.param}|${draws}` === state.diagKey) return;
    const d = await getJSON(`/v1/runs/${id}/diagnostics?param=${state.param}`);
    if (!pg.alive) return;
    state.diagKey = `${d.param}|${draws}`;
    state.diag = d;
    $("#diag-note").textContent = `${d.name}: ${d.draws_used} draws per chain`
      + (d.step > 1 ? ` (1 in ${d.step})` : "") + ` · R-hat ${fmt(d.r_hat)}`;
    plots.ranks($("#rank-plot"), d);
    plots.autocorr($("#autocorr-plot"), d);
    plots.ess($("#ess-plot"), d);
  }, { minGapMs: INFO_GAP_MS, onError: onError("diag") });

  $("#param").addEventListener("change", (ev) => {
    state.param = Number(ev.target.value);
    res.trace.poke();
    res.diag.poke();
  });
  $("#pair-param").addEventListener("change", (ev) => {
    state.pairParam = Number(ev.target.value);
    res.trace.poke();
  });
  $("#cancel").addEventListener("click", () => act(async () => {
    await api(`/v1/runs/${id}/cancel`, { method: "POST" });
    res.info.poke();
  }));
  $("#delete").addEventListener("click", () => act(async () => {
    if (!confirm(`Delete run ${id} and its draws?`)) return;
    await api(`/v1/runs/${id}`, { method: "DELETE" });
    location.hash = "#/runs";
  }));
  $("#dl-netcdf").addEventListener("click", () => act(() => download(`/v1/runs/${id}/arviz`, `${id}.nc`)));
  $("#dl-ndjson").addEventListener("click", () => act(() => download(`/v1/runs/${id}/draws`, `${id}.ndjson`)));
  const onResize = () => plots.resize();
  window.addEventListener("resize", onResize);
  pg.onStop(() => window.removeEventListener("resize", onResize));

  // A progress event carries the new draw count: the plots and the summary follow it at once; the rest of the run
  // (workers, diagnostics) is asked for at most every 5 s of progress, and at once on any other event.
  // Events come in bursts (a run's whole history when the page opens): the page is redrawn once per frame.
  let drawing = false;
  const render = () => {
    if (drawing) return;
    drawing = true;
    requestAnimationFrame(() => {
      drawing = false;
      if (!pg.alive) return;
      if (state.info) renderRunInfo(state, plots);
      drawWorkers(state, plots);
    });
  };
  const onEvent = (kind, d) => {
    const r = state.info;
    if (["worker_lost", "resumed", "status"].includes(kind) && d.ts) {
      const label = kind === "status" ? d.status : kind === "resumed" ? "resumed" : `shard ${d.failure?.shard ?? "?"} lost`;
      state.marks.push({ t: d.ts, kind, label });
      render();
    }
    if (kind === "progress" && r) {
      Object.assign(r.progress, { rounds_done: d.rounds_done, rounds_total: d.rounds_total,
                                  draws_stored: d.draws_stored },
                    d.fraction != null ? { fraction: d.fraction, basis: d.basis } : {});
      if (d.min_ess_bulk != null) {
        // a progress event's max_rhat is the R-hat the convergence rule reads (nested R-hat with many chains)
        r.diagnostics = Object.assign({}, r.diagnostics, { min_ess_bulk: d.min_ess_bulk, rule_rhat: d.max_rhat });
      }
      render();
      res.trace.poke();
      res.summary.poke();
      res.diag.poke();
      if (performance.now() - state.infoAt > 5000) res.info.poke();
    } else res.info.poke();
  };
  res.info.poke();
  followEvents(pg, id, state, res, lose, onEvent);
  pg.every(SAFETY_POLL_MS, () => { if (!state.streaming) res.info.poke(); });
}

// The run's event stream (SSE read with fetch, which can send the key): each event goes into the log and asks for
// the run again (at most once a second). The stream ends after the run's final status; a broken stream is resumed
// from the last event id, waiting longer after each failure.
async function followEvents(pg, id, state, res, lose, onEvent) {
  let failures = 0;
  const abort = new AbortController();
  pg.onStop(() => abort.abort());
  while (pg.alive) {
    let response = null;
    try {
      response = await api(`/v1/runs/${id}/events?after=${state.eventsAfter}`, { signal: abort.signal, keepOpen: true });
      state.streaming = true;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const ev = pg.alive ? onFrame(frame, state) : null;
          if (ev) onEvent(ev.kind, ev.data);
        }
        failures = 0;
      }
      state.streaming = false;
      response.release();
      if (!pg.alive) return;
      res.info.poke();
      return;  // the run has ended (or is gone): nothing more will come
    } catch (e) {
      state.streaming = false;
      if (response) response.release();
      if (!pg.alive || e.name === "AbortError") return;
      if (e.status === 404 || e.status === 403) { lose(e); return; }
      failures++;
      await sleep(Math.min(30000, 1000 * 2 ** (failures - 1)));
    }
  }
}

function onFrame(frame, state) {
  const fields = {};
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) continue;
    const i = line.indexOf(":");
    if (i > 0) fields[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  if (!fields.id || !fields.event) return null;
  state.eventsAfter = Math.max(state.eventsAfter, Number(fields.id));
  let data = {};
  try { data = JSON.parse(fields.data || "{}"); } catch (e) { data = { text: fields.data }; }
  logEvent(fields.event, data);
  return { kind: fields.event, data };
}

// One readable line per event, at the browser's local time; consecutive progress events share one line.
function describeEvent(kind, d) {
  switch (kind) {
    case "status":
      return `status ${d.status}` + (d.stop_reason ? ` (stopped: ${d.stop_reason.replaceAll("_", " ")})` : "")
        + (d.error ? ` — ${d.error}` : "");
    case "setup": return `workers ready: ${d.dim} parameters, set up in ${fmt(d.setup_time_s, 1)} s`;
    case "progress":
      return `progress: ${d.rounds_done} of ${d.rounds_total} rounds, ${d.draws_stored} draws per chain`
        + (d.min_ess_bulk != null ? `, min bulk ESS ${fmt(d.min_ess_bulk, 0)}` : "")
        + (d.max_rhat != null ? `, max R-hat ${fmt(d.max_rhat)}` : "");
    case "warning": return `warning: ${d.message}`;
    case "worker_lost":
      return `worker lost at round ${d.round}` + (d.failure?.shard != null ? ` (shard ${d.failure.shard}` : " (")
        + (d.failure?.site ? `, site ${d.failure.site}` : "") + `): ${d.failure?.message || d.failure?.kind || ""}`;
    case "resumed": return `resumed from round ${d.round} (restart ${d.restarts})`;
    default: return `${kind}`;
  }
}

function logEvent(kind, d) {
  const list = $("#events");
  if (!list) return;
  const text = `${d.ts ? clock(d.ts) : ""} ${describeEvent(kind, d)}`.trim();
  const last = list.lastElementChild;
  if (kind === "progress" && last?.dataset.kind === "progress") { last.textContent = text; return; }
  const item = el("li", { text, class: `ev-${kind}` });
  item.dataset.kind = kind;
  list.append(item);
}

// τ_i of each shard at each run-info answer (a new point only when a worker's numbers changed).
function sampleWorkers(state, plots) {
  const workers = state.info.workers.filter((w) => w.tau_s != null);
  const key = workers.map((w) => `${w.shard}:${w.tau_s}:${w.local_steps}`).join("|");
  if (!workers.length || key === state.tau.last) return;
  state.tau.last = key;
  state.tau.t.push(Date.now() / 1000);
  const n = state.tau.t.length;
  for (const w of workers) {
    if (!state.tau.byShard.has(w.shard)) state.tau.byShard.set(w.shard, new Array(n - 1).fill(null));
  }
  for (const [shard, values] of state.tau.byShard) {
    const w = workers.find((x) => x.shard === shard);
    values.push(w ? 1e3 * w.tau_s : null);
  }
  drawWorkers(state, plots);
}

function drawWorkers(state, plots) {
  const node = $("#workers-plot");
  if (!node || (!state.tau.t.length && !state.marks.length)) return;
  const shards = [...state.tau.byShard.keys()].sort((a, b) => a - b);
  plots.workers(node, { shards, t: state.tau.t, tau: shards.map((s) => state.tau.byShard.get(s)),
                        marks: state.marks });
}

async function act(fn) {
  try { await fn(); if ($("#run-error")) $("#run-error").textContent = ""; } catch (e) {
    if ($("#run-error")) $("#run-error").textContent = e.message;
  }
}

async function download(path, name) {
  const blob = await (await api(path)).blob();
  const a = el("a", { href: URL.createObjectURL(blob), download: name });
  document.body.append(a);
  a.click();
  a.remove();
}

function renderRunInfo(state, plots) {
  const r = state.info;
  const p = r.progress;
  setText($("#run-status"), r.status);
  $("#run-status").className = `status ${r.status}`;
  setText($("#run-name"), [r.name, tagText(r.tags)].filter((v) => v).join(" · "));
  $("#run-progress").style.width = `${(100 * fraction(p)).toFixed(1)}%`;
  setText($("#run-progress-text"), `${p.rounds_done} of ${p.rounds_total} rounds · ${p.draws_stored} draws `
    + `per chain stored · ${r.chains || r.spec.chains} chains · ${r.spec.model.family} · ${r.spec.algorithm.name}`
    + (r.restarts ? ` · ${r.restarts} restarts` : ""));
  const d = r.diagnostics;
  let conv = "";
  if (p.basis === "convergence") {
    conv = `Runs until converged: ${(100 * fraction(p)).toFixed(0)}% there. `
      + `Min bulk ESS ${d && d.min_ess_bulk != null ? fmt(d.min_ess_bulk, 0) : "–"} of the target ${r.spec.target_ess}`
      + ` · max ${d && d.rule === "nested_rhat" ? "nested " : ""}R-hat ${fmt(ruleRhat(d))} (target below ${r.spec.max_rhat})`
      + (d ? ` · checked on ${d.draws} draws per chain` : " · not checked yet");
  }
  setText($("#run-convergence"), conv);
  setText($("#run-stop"), r.stop_reason ? `Stopped: ${r.stop_reason.replaceAll("_", " ")}.` : "");
  setText($("#run-privacy"), privacyLine(r));
  const terminal = TERMINAL.includes(r.status);
  $("#cancel").disabled = terminal;
  $("#delete").disabled = !terminal;
  if (r.error) setText($("#run-error"), r.error);
  const warnings = $("#run-warnings");
  if (warnings.children.length !== r.warnings.length) {
    warnings.replaceChildren(...r.warnings.map((w) => el("li", { text: w })));
  }
  const names = r.param_names || [];
  for (const [sel, chosen] of [["#param", state.param], ["#pair-param", state.pairParam]]) {
    const select = $(sel);
    if (select.options.length !== names.length) {
      select.replaceChildren(...names.map((n, i) => el("option", { value: i, text: n })));
      select.value = Math.min(chosen, Math.max(0, names.length - 1));
    }
  }
  if (names.length && state.pairParam >= names.length) state.pairParam = 0;
  renderChains(r.chains || (typeof r.spec.chains === "number" ? r.spec.chains : 0), plots);
  const ms = (s) => (s == null ? "–" : (1e3 * s).toFixed(1));
  $("#workers").replaceChildren(
    el("tr", {}, ...["shard", "site", "host", "N", "τ (ms)", "RTT (ms)", "idle", "sent (masked / sealed / plain)"]
      .map((h) => el("th", { text: h }))),
    ...r.workers.map((w) => el("tr", {},
      el("td", { class: "num", text: w.shard }), el("td", { text: w.site || "–" }),
      el("td", { text: w.hostname || "–", title: w.node_id || "" }),
      el("td", { class: "num", text: w.local_steps ?? "–" }),
      el("td", { class: "num", text: w.tau_s == null ? "–" : (1e3 * w.tau_s).toFixed(3) }),
      el("td", { class: "num", text: ms(w.rtt_s ?? w.setup_rtt_s),
                 title: `${w.channel || "in-process"}; at set-up ${ms(w.setup_rtt_s)} ms, median ${ms(w.rtt_median_s)} ms` }),
      el("td", {}, el("div", { class: "bar", title: fmt(w.idle_fraction) },
                      el("div", { style: { width: `${(100 * (w.idle_fraction || 0)).toFixed(1)}%` } }))),
      ledgerCell(w.ledger))));
  const trips = r.network && r.network.trips;
  setText($("#trips"), trips ? `Round trips: ${trips.total} (set-up ${trips.setup}, warm-up ${trips.warmup}, `
                               + `sampling ${trips.sampling}, captures ${trips.capture}).` : "");
  setText($("#plan"), r.plan ? JSON.stringify(r.plan, null, 1) : "(set when the run starts)");
}

// The DP mode: the budget per site and what each site has spent so far (ε(δ) over every release) with its clip rate.
function privacyLine(r) {
  const dp = r.spec.privacy;
  if (!dp) return "";
  const sites = r.workers.filter((w) => w.epsilon_spent != null)
    .map((w) => `${w.site || `shard ${w.shard}`} ε ${w.epsilon_spent.toFixed(3)}`
                + (w.clip_rate == null ? "" : ` (clipped ${(100 * w.clip_rate).toFixed(1)}%)`));
  return `Differential privacy: ε ≤ ${dp.epsilon} per site, δ ${dp.delta}, clip ${dp.clip}`
    + (sites.length ? `; spent: ${sites.join(", ")}.` : ".");
}

// The chain list: the legend of every per-chain plot, for any chain count. A box shows or hides a chain; hovering
// or focusing one highlights it.
// The R-hat the convergence rule reads: split R-hat, or with many chains nested R-hat over superchains.
function ruleRhat(d) {
  if (!d) return null;
  if (d.rule_rhat != null) return d.rule_rhat;
  return d.rule === "nested_rhat" ? d.max_nested_rhat : d.max_rhat;
}

function renderChains(n, plots) {
  const box = $("#chains");
  if (box.dataset.n === String(n)) return;
  box.dataset.n = String(n);
  plots.setChains(n);
  const items = [];
  for (let c = 0; c < n; c++) {
    const input = el("input", { type: "checkbox", value: c });
    input.checked = true;
    const label = el("label", { class: "chain" }, input,
                     el("span", { class: "swatch", style: { background: chainColour(c, n) } }),
                     el("span", { text: `chain ${c}` }));
    label.addEventListener("mouseenter", () => plots.focus(c));
    label.addEventListener("mouseleave", () => plots.focus(null));
    input.addEventListener("focus", () => plots.focus(c));
    input.addEventListener("blur", () => plots.focus(null));
    input.addEventListener("change", () => plots.toggle(c, input.checked));
    items.push(label);
  }
  const all = el("button", { type: "button", text: "all" });
  all.addEventListener("click", () => box.querySelectorAll("input").forEach((i, c) => {
    i.checked = true; plots.toggle(c, true);
  }));
  const none = el("button", { type: "button", text: "none" });
  none.addEventListener("click", () => box.querySelectorAll("input").forEach((i, c) => {
    i.checked = false; plots.toggle(c, false);
  }));
  box.replaceChildren(el("span", { class: "muted", text: `${n} chains:` }), all, none, ...items);
}

function renderSummary(s) {
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

// ------------------------------------------------------------------------------------------------ checks

const postJSON = async (path, body) => (await api(path, {
  method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })).json();

// A 4xx's message, naming the field where the API gives one.
const problem = (e) => (Array.isArray(e.body?.detail)
  ? e.body.detail.map((d) => `${d.loc.filter((p) => p !== "body").join(".")}: ${d.msg}`).join("; ") : e.message);

const table = (node, head, rows) => node.replaceChildren(
  el("tr", {}, ...head.map((h, i) => el("th", { class: i ? "num" : "", text: h }))),
  ...rows.map((r) => el("tr", {}, ...r.map((v, i) => el("td", { class: i ? "num" : "", text: v })))));

// The run page's checks: PSIS-LOO of the run's own rows, and held-out metrics on a data set (uploaded or built-in),
// both computed on the shards; the reliability curve of a classifier.
async function wireChecks(id, plots) {
  const pg = page;
  const select = $("#eval-data");
  $("#loo-btn").addEventListener("click", async () => {
    $("#checks-error").textContent = "";
    $("#loo-btn").disabled = true;
    try {
      const mm = $("#loo-mm").checked;
      const lo = await getJSON(`/v1/runs/${id}/loo${mm ? "?moment_match=true" : ""}`);
      if (!pg.alive) return;
      const at = (r) => `shard ${r.shard} row ${r.row}${r.index == null ? "" : ` (#${r.index})`}`;
      table($("#loo-table"), ["PSIS-LOO", "value"], [
        ["elpd_loo", fmt(lo.elpd, 2)], ["SE", fmt(lo.se, 2)], ["p_loo", fmt(lo.p_loo, 2)],
        ["rows", String(lo.n_data_points)], ["draws", String(lo.n_samples)],
        [`flat rows (log-lik span < ${lo.flat_span}, uniform weights)`, String(lo.k_flat)],
        ["Pareto k < 0.7", String(lo.k_ok)], ["Pareto k ≥ 0.7", String(lo.k_high)],
        ...(lo.warning && lo.warning_rows.length ? [[
          `warning: ${lo.warning_rows.length} rows with k > ${fmt(lo.good_k, 2)}`,
          lo.warning_rows.slice(0, 5).map((w) => `${at(w.row)} (k ${fmt(w.k, 2)})`).join(", ")
            + (lo.warning_rows.length > 5 ? ", …" : ""),
        ]] : []),
      ]);
      const matched = lo.moment_matched || [];
      $("#loo-mm-table").hidden = lo.moment_matched == null;
      table($("#loo-mm-table"), ["moment matched row", "k (PSIS)", "k (matched)", "elpd_i (PSIS)", "elpd_i (matched)",
                                 "MCSE", "maps", "used"],
        matched.map((m) => [at(m.row), fmt(m.k_psis, 2), fmt(m.k_after, 2), fmt(m.elpd_psis, 4),
                            fmt(m.elpd_after, 4), fmt(m.mcse_after, 4), String(m.maps), m.used ? "yes" : "no"]));
    } catch (e) { if (pg.alive) $("#checks-error").textContent = problem(e); }
    finally { if (pg.alive) $("#loo-btn").disabled = false; }
  });
  $("#r2-btn").addEventListener("click", async () => {
    $("#checks-error").textContent = "";
    $("#r2-btn").disabled = true;
    try {
      const r2 = await getJSON(`/v1/runs/${id}/r2`);
      if (!pg.alive) return;
      table($("#r2-table"), ["Bayesian R² (residual)", "value"], [
        ["estimate", fmt(r2.estimate, 3)], ["Est.Error", fmt(r2.est_error, 3)],
        ["95% interval", `${fmt(r2.lower, 3)} – ${fmt(r2.upper, 3)}`], ["draws", String(r2.n_samples)],
      ]);
    } catch (e) { if (pg.alive) $("#checks-error").textContent = problem(e); }
    finally { if (pg.alive) $("#r2-btn").disabled = false; }
  });
  $("#eval-btn").addEventListener("click", async () => {
    $("#checks-error").textContent = "";
    const v = select.value;
    if (!v) return;
    const data = v.startsWith("id:") ? { dataset_id: v.slice(3) } : { dataset: v };
    $("#eval-btn").disabled = true;
    try {
      const m = await postJSON(`/v1/runs/${id}/evaluate`, { data });
      if (!pg.alive) return;
      const keys = m.kind === "classification" ? ["accuracy", "nll", "brier", "ece"]
        : ["rmse", "nll", "crps", "coverage_50", "coverage_90"];
      table($("#eval-table"), [`held-out (${m.n} rows)`, "value"], keys.map((k) => [k, fmt(m[k], 4)]));
      const bins = (m.reliability || []).filter((b) => b.count > 0);
      $("#reliability-fig").hidden = !bins.length;
      if (bins.length) plots.reliability($("#reliability-plot"), bins);
    } catch (e) { if (pg.alive) $("#checks-error").textContent = problem(e); }
    finally { if (pg.alive) $("#eval-btn").disabled = false; }
  });
  try {  // the held-out choices: the tenant's uploads, then the built-in data sets (from the API's description, so
    // no request of this key's is sent once the page has stopped, as it does when the run is not this key's)
    const uploaded = (await getJSON("/v1/datasets")).datasets || [];
    const builtins = await builtinDatasets();
    if (!pg.alive) return;
    select.replaceChildren(...uploaded.map((d) => el("option", { value: `id:${d.id}`, text: `${d.name} (${d.id})` })),
                           ...builtins.map((d) => el("option", { value: d, text: d })));
  } catch (e) { if (pg.alive) $("#checks-error").textContent = problem(e); }
}

// A posterior predictive check of the run's own rows (GET /ppc): replicated data drawn on the shards, only bin
// counts and sums back; a density overlay, histograms, or a statistic's distribution against its observed value.
async function wirePpc(id, plots) {
  const pg = page;
  const stat = $("#ppc-stat");
  const sync = () => { stat.disabled = $("#ppc-kind").value !== "stat"; };
  $("#ppc-kind").addEventListener("change", sync);
  sync();
  $("#ppc-btn").addEventListener("click", async () => {
    $("#ppc-error").textContent = "";
    $("#ppc-btn").disabled = true;
    try {
      const q = new URLSearchParams({ kind: $("#ppc-kind").value, stat: stat.value || "mean" });
      const c = await getJSON(`/v1/runs/${id}/ppc?${q}`);
      if (!pg.alive) return;
      window.rsDashboard.state.ppc = c;
      const sets = `${c.n} rows, ${c.replicated.length} replicated data sets`;
      if (c.kind === "stat") {
        $("#ppc-note").textContent = `${c.stat}: T(y) = ${fmt(c.observed, 4)} · P(T(y_rep) ≥ T(y)) = `
          + `${fmt(c.p_value, 3)} · ${sets}`;
      } else $("#ppc-note").textContent = sets;
      plots.ppc($("#ppc-plot"), c);
    } catch (e) { if (pg.alive) $("#ppc-error").textContent = problem(e); }
    finally { if (pg.alive) $("#ppc-btn").disabled = false; }
  });
  try {
    const stats = await ppcStats();
    if (!pg.alive) return;
    stat.replaceChildren(...stats.map((v) => el("option", { value: v, text: v.replace("_", " ") })));
  } catch (e) { if (pg.alive) $("#ppc-error").textContent = problem(e); }
}

// brms-style tables of the stored draws (GET /effects): fixef, ranef, coef or the priors.
function wireEffects(id) {
  const pg = page;
  $("#effects-btn").addEventListener("click", async () => {
    $("#effects-error").textContent = "";
    $("#effects-btn").disabled = true;
    try {
      const t = await getJSON(`/v1/runs/${id}/effects?kind=${$("#effects-kind").value}`);
      if (!pg.alive) return;
      const grouped = t.rows.some((r) => r.group);
      const head = [...(grouped ? ["group"] : []), "", ...t.columns];
      $("#effects-table").replaceChildren(
        el("tr", {}, ...head.map((h, i) => el("th", { class: i >= head.length - t.columns.length ? "num" : "", text: h }))),
        ...t.rows.map((r) => el("tr", {},
          ...(grouped ? [el("td", { text: r.group || "" })] : []), el("td", { text: r.index.join(", ") }),
          ...t.columns.map((c) => el("td", { class: typeof r[c] === "number" || r[c] === null ? "num" : "",
                                            text: typeof r[c] === "number" ? fmt(r[c], 3) : (r[c] ?? "–") })))));
    } catch (e) {
      if (!pg.alive) return;
      $("#effects-table").replaceChildren();
      $("#effects-error").textContent = problem(e);
    } finally { if (pg.alive) $("#effects-btn").disabled = false; }
  });
}

// ------------------------------------------------------------------------------------------------ compare

async function showCompare(ids) {
  mount("tpl-compare");
  const pg = page;
  const runs = [];
  for (const id of ids) {
    try {
      const info = await getJSON(`/v1/runs/${id}`);
      if (!pg.alive) return;  // left meanwhile: ask nothing more
      const summary = info.progress.draws_stored >= 4 ? await getJSON(`/v1/runs/${id}/summary`) : null;
      runs.push({ id, info, summary });
    } catch (e) {
      if (!pg.alive) return;
      $("#compare-error").append(el("span", { text: `${id}: ${e.status === 404 ? "not found for this key" : e.message}. ` }));
    }
    if (!pg.alive) return;
  }
  const cols = ["mean", "sd", "ess_bulk", "r_hat"];
  const head1 = el("tr", {}, el("th", { text: "" }),
                   ...runs.map((r) => el("th", { colspan: cols.length, class: "run-head" },
                     el("a", { href: `#/run/${r.id}`, text: r.info.name ? `${r.info.name} (${r.id})` : r.id }))));
  const meta = (label, f) => el("tr", {}, el("th", { text: label }),
                                ...runs.map((r) => el("td", { colspan: cols.length, text: f(r.info) })));
  const head2 = el("tr", {}, el("th", { text: "parameter" }),
                   ...runs.flatMap(() => cols.map((c) => el("th", { class: "num", text: c }))));
  const params = [];
  for (const r of runs) for (const row of r.summary?.rows || []) if (!params.includes(row.param)) params.push(row.param);
  const body = params.map((p) => el("tr", { "data-param": p }, el("td", { text: p }),
    ...runs.flatMap((r) => {
      const row = r.summary?.rows.find((x) => x.param === p);
      return cols.map((c) => el("td", { class: "num", text: row ? fmt(row[c], c === "ess_bulk" ? 0 : 3) : "–" }));
    })));
  $("#loo-compare").addEventListener("click", async () => {
    $("#loo-compare-error").textContent = "";
    try {
      const method = $("#loo-compare-method").value;
      const got = await postJSON("/v1/compare", { runs: runs.map((r) => r.id), method });
      if (!pg.alive) return;
      table($("#loo-compare-table"), ["run", "rank", "elpd_loo", "SE", "elpd_diff", "dSE", "p_loo",
                                      `weight (${got.method})`],
        got.rows.map((r) => [r.run_id, String(r.rank), fmt(r.elpd, 2), fmt(r.se, 2), fmt(r.elpd_diff, 2),
                             fmt(r.dse, 2), fmt(r.p_loo, 2), fmt(r.weight, 3)]));
    } catch (e) { if (pg.alive) $("#loo-compare-error").textContent = problem(e); }
  });
  $("#loo-compare").disabled = runs.length < 2;
  $("#compare-table").replaceChildren(head1,
    meta("status", (i) => `${i.status}${i.stop_reason ? ` (${i.stop_reason})` : ""}`),
    meta("model · algorithm", (i) => `${i.spec.model.family} · ${i.spec.algorithm.name}`),
    meta("draws × chains", (i) => `${i.progress.draws_stored} × ${i.chains || i.spec.chains}`),
    meta("tags", (i) => tagText(i.tags) || "–"), head2, ...body);
}

// ------------------------------------------------------------------------------------------------ operator

const bytes = (n) => (n == null ? "no limit" : n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : n >= 1e6
  ? `${(n / 1e6).toFixed(1)} MB` : `${(n / 1e3).toFixed(1)} kB`);

async function showOperator() {
  mount("tpl-operator");
  const pg = page;
  const cluster = pg.resource(async () => {
    const c = await getJSON("/v1/cluster");
    if (!pg.alive) return;
    renderOperator(c);
    $("#op-error").textContent = "";
  }, { onError: (e) => { if (pg.alive) $("#op-error").textContent = `${e.message} (retrying)`; } });
  pg.every(3000, () => cluster.poke());
}

function renderOperator(c) {
  const link = $("#ray-dashboard");
  link.hidden = !c.ray_dashboard_url;
  $("#ray-dashboard-none").hidden = Boolean(c.ray_dashboard_url);
  if (c.ray_dashboard_url) link.href = c.ray_dashboard_url;
  setText($("#op-summary"), `executor ${c.executor}${c.ray_connected ? " (Ray connected)" : ""} · `
    + `${c.running_runs} of at most ${c.max_concurrent_runs} runs sampling · ${c.queued_total} waiting (all tenants)`);
  $("#op-nodes-none").hidden = c.nodes.length > 0;
  $("#op-nodes").replaceChildren(
    el("tr", {}, ...["node", "host", "site", "CPUs", "alive", "your workers (run: shard, τ ms)", "other tenants' workers"]
      .map((h) => el("th", { text: h }))),
    ...c.nodes.map((n) => el("tr", { "data-node": n.node_id },
      el("td", { text: n.node_id.slice(0, 12), title: n.node_id }), el("td", { text: n.hostname || "–" }),
      el("td", { text: n.site || "–" }), el("td", { class: "num", text: fmt(n.cpus, 0) }),
      el("td", { text: n.alive ? "yes" : "no" }),
      el("td", {}, ...n.workers.map((w) => el("div", {},
        el("a", { href: `#/run/${w.run_id}`, text: w.run_id }),
        `: ${w.shard}${w.tau_s == null ? "" : `, ${(1e3 * w.tau_s).toFixed(3)}`}`))),
      el("td", { class: "num", text: String(n.other_workers) }))));
  $("#op-queue-none").hidden = c.queue.length > 0;
  $("#op-queue").replaceChildren(
    el("tr", {}, el("th", { text: "position" }), el("th", { text: "run" }), el("th", { text: "name" })),
    ...c.queue.map((q) => el("tr", { "data-run": q.run_id }, el("td", { class: "num", text: String(q.position) }),
      el("td", {}, el("a", { href: `#/run/${q.run_id}`, text: q.run_id })), el("td", { text: q.name || "–" }))));
  const q = c.quota;
  const row = (label, used, limit) => el("tr", {}, el("th", { text: label }), el("td", { text: used }),
                                         el("td", { text: limit }));
  $("#op-quota").replaceChildren(
    el("tr", {}, el("th", { text: "" }), el("th", { text: "used" }), el("th", { text: "limit" })),
    row("active runs (pending + running)", String(q.active_runs), q.max_active_runs == null ? "no limit"
      : String(q.max_active_runs)),
    row("stored (draws, checkpoints, data sets)", bytes(q.stored_bytes), bytes(q.max_stored_bytes)),
    row("per run: chains × dimension", "–", q.max_chains_x_dim == null ? "no limit" : String(q.max_chains_x_dim)),
    row("per run: planned draw bytes", "–", bytes(q.max_draw_bytes)));
}

// ------------------------------------------------------------------------------------------------ submit

let openapi = null;
let families = null;
// The API's own description (no key needed, fetched once): the choices it accepts.
async function apiDoc() {
  if (!openapi) openapi = await (await fetch("/openapi.json")).json();
  return openapi;
}
const ppcStats = async () => (await apiDoc()).paths["/v1/runs/{run_id}/ppc"].get.parameters
  .find((q) => q.name === "stat").schema.enum;
const builtinDatasets = async () => (await apiDoc()).components.schemas.DataRef.properties.dataset.enum
  .filter((v) => v);
async function enums() {
  const schema = (await apiDoc()).components.schemas;
  // the registered model families (built-in and from installed packages), as the service lists them
  if (!families) families = (await getJSON("/v1/models")).families.map((f) => f.name);
  return {
    datasets: await builtinDatasets(),
    families,
    formulaFamilies: schema.ModelSpec.properties.formula["x-families"],
    algorithms: schema.AlgorithmSpec.properties.name.enum,
  };
}

// "k=v, k2=v2" -> {k: v, k2: v2}; the API checks the keys and says which is wrong.
function parseTags(text) {
  const tags = {};
  for (const part of text.split(",").map((s) => s.trim()).filter((s) => s)) {
    const i = part.indexOf("=");
    if (i < 0) tags[part] = ""; else tags[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return tags;
}

async function showSubmit() {
  mount("tpl-submit");
  const pg = page;
  // until the form is wired (the enums below come from the API), a submit must not reload the page
  $("#submit-form").addEventListener("submit", (ev) => ev.preventDefault());
  const e = await enums();
  if (!pg.alive) return;
  const fill = (sel, values, chosen) => {
    $(sel).replaceChildren(...values.map((v) => el("option", { value: v, text: v.replace("builtin:", "") })));
    $(sel).value = chosen;
  };
  fill("#f-dataset", e.datasets, "builtin:breast_cancer");
  fill("#f-family", e.families, "logistic_regression");
  fill("#f-formula-family", e.formulaFamilies, "bernoulli");
  fill("#f-algorithm", e.algorithms, "dglmc");
  const form = $("#submit-form");
  const json = $("#spec-json");
  let edited = false;  // the JSON was edited by hand: the form no longer rewrites it
  const source = () => form.querySelector("input[name=source]:checked").value;
  const modelKind = () => form.querySelector("input[name=model-kind]:checked").value;
  const num = (sel) => ($(sel).value === "" ? null : Number($(sel).value));
  // A formula names its response, terms and groups itself: its family is brms', its priors are by kind (b, sd,
  // sigma for the families with a σ); the family fields below it do not apply.
  const sigmaFamilies = ["gaussian", "lognormal", "student"];
  // each family's own parameter besides σ (brms' class) and the spec field of its prior: a gamma(shape, rate) prior
  const ownPriors = {
    student: "nu_prior", Gamma: "shape_prior", weibull: "shape_prior", Beta: "phi_prior", negbinomial: "phi_prior",
    zero_inflated_negbinomial: "phi_prior",
  };
  const formulaModel = () => {
    const model = { formula: $("#f-formula").value.trim(), family: $("#f-formula-family").value };
    if (num("#f-b-scale") !== null) model.coef_prior = { normal: { scale: num("#f-b-scale") } };
    if (num("#f-sd-scale") !== null) model.sd_prior = { half_normal: { scale: num("#f-sd-scale") } };
    if (num("#f-sigma-scale") !== null && sigmaFamilies.includes(model.family)) {
      model.sigma_prior = { half_normal: { scale: num("#f-sigma-scale") } };
    }
    const own = ownPriors[model.family];
    $("#f-own-field").dataset.loc = `model.${own || "nu_prior"}`;  // a 422 at the prior shows next to the field
    if (own && num("#f-own-shape") !== null && num("#f-own-rate") !== null) {
      model[own] = { gamma: { shape: num("#f-own-shape"), rate: num("#f-own-rate") } };
    }
    return model;
  };
  const build = () => {
    const formula = modelKind() === "formula";
    const spec = {
      model: formula ? formulaModel() : { family: $("#f-family").value },
      algorithm: { name: $("#f-algorithm").value, params: {} },
      chains: num("#f-chains") ?? "auto",
      num_shards: num("#f-shards-n"),
      num_rounds: $("#f-auto").checked ? "auto" : num("#f-rounds"),
      seed: num("#f-seed"),
    };
    if ($("#f-name").value.trim()) spec.name = $("#f-name").value.trim();
    const tags = parseTags($("#f-tags").value);
    if (Object.keys(tags).length) spec.tags = tags;
    if (!formula) {
      if ($("#f-prior-scale").value !== "") spec.model.prior_scale = num("#f-prior-scale");
      const noise = $("#f-noise-sd").value.trim();
      if (noise) spec.model.noise_sd = Number.isFinite(Number(noise)) ? Number(noise) : noise;
      const group = $("#f-group").value.trim();
      if (group) {
        const slopes = $("#f-group-slopes").value.split(",").map((v) => v.trim()).filter(Boolean);
        const effects = slopes.length ? { group, slopes } : { group };
        if ($("#f-group-correlated").checked) effects.correlated = true;
        spec.model.group_effects = [effects];
      }
    }
    if (num("#f-burn") !== null) spec.burn_in = num("#f-burn");
    if ($("#f-secure-sums").checked) spec.secure_sums = true;
    if ($("#f-dp").checked) {
      spec.privacy = { epsilon: num("#f-dp-epsilon"), delta: num("#f-dp-delta"), clip: num("#f-dp-clip"),
                       clip_rule: $("#f-dp-rule").value };
    }
    if (source() === "dataset") spec.data = { dataset: $("#f-dataset").value };
    else if (source() === "upload") spec.data = { dataset_id: "(set on submit, from the uploaded file)" };
    else {
      let shards = [];
      try { shards = JSON.parse($("#f-shards").value || "[]"); } catch (err) { shards = $("#f-shards").value; }
      spec.data = formula ? { shards } : { shards, y_column: $("#f-shards-ycol").value };  // a formula names y
    }
    return JSON.stringify(spec, null, 2);
  };
  // a select's pick is a "change" (not every driver of the page sends "input" for it): both rewrite the JSON
  const edit = (ev) => {
    if (ev.target.name === "source") {
      form.querySelectorAll("[data-source]").forEach((d) => { d.hidden = d.dataset.source !== source(); });
    }
    if (ev.target.name === "model-kind") {
      form.querySelectorAll("[data-model]").forEach((d) => { d.hidden = d.dataset.model !== modelKind(); });
    }
    $("#f-rounds").disabled = $("#f-auto").checked;
    for (const sel of ["#f-dp-epsilon", "#f-dp-delta", "#f-dp-clip", "#f-dp-rule"]) {
      $(sel).disabled = !$("#f-dp").checked;
    }
    if (!edited) json.value = build();
    $("#spec-note").hidden = !edited || json.value === build();
  };
  form.addEventListener("input", edit);
  form.addEventListener("change", edit);
  json.addEventListener("input", () => {
    edited = json.value !== build();
    $("#spec-note").hidden = !edited;
  });
  $("#spec-reset").addEventListener("click", () => {
    json.value = build();
    edited = false;
    $("#spec-note").hidden = true;
  });
  json.value = build();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearFieldErrors();
    let spec;
    try { spec = JSON.parse(json.value); } catch (err) {
      $("#submit-error").textContent = `The request is not valid JSON: ${err.message}`;
      return;
    }
    $("#submit").disabled = true;
    try {
      if (source() === "upload" && !edited) {
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
      if (!pg.alive) return;
      if (run.warnings.length) {
        // the service accepted it but warns (e.g. planned draws over RAYSAMPLER_WARN_DRAW_BYTES): say so first
        $("#submit-warnings").replaceChildren(...run.warnings.map((w) => el("li", { text: w })),
          el("li", {}, "Submitted anyway: ", el("a", { href: `#/run/${run.id}`, text: `open run ${run.id}` })));
        return;
      }
      location.hash = `#/run/${run.id}`;
    } catch (err) {
      if (!pg.alive) return;
      if (err.status === 422 && Array.isArray(err.body?.detail)) {
        for (const d of err.body.detail) showFieldError(d.loc.filter((p) => p !== "body").join("."), d.msg);
      } else if (err.status === 429) {
        $("#submit-error").textContent = `Refused by the tenant's quota (429): ${err.message}`;
      } else {
        $("#submit-error").textContent = err.message;
      }
    } finally {
      if (pg.alive) $("#submit").disabled = false;
    }
  });
}

function clearFieldErrors() {
  document.querySelectorAll(".field-error.dynamic").forEach((n) => n.remove());
  document.querySelectorAll(".field.invalid").forEach((n) => n.classList.remove("invalid"));
  document.querySelectorAll("[data-error-for]").forEach((n) => { n.textContent = ""; });
  $("#submit-error").textContent = "";
  $("#submit-warnings").replaceChildren();
}

// The API's 422 names the field by its location (e.g. "chains", "model.prior_scale", "data.shards.0"): the message
// goes next to the form field with the longest matching data-loc, else under the form.
function showFieldError(loc, msg) {
  const fixed = document.querySelector(`[data-error-for="${loc}"]`);
  if (fixed) { fixed.textContent = msg; return; }
  let best = null;
  for (const f of document.querySelectorAll(".field[data-loc]")) {
    if (f.closest("[hidden]")) continue;  // a field of the other kind of model or data source
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
  plots: null,
  net,
  // What the trace plot shows (tests read it): per-chain point counts of the plotted series.
  plotted() {
    const p = window.rsDashboard.plots?.get("trace");
    if (!p) return [];
    return p.data.slice(1).map((s) => s.filter((v) => v !== null && v !== undefined).length);
  },
};

function route() {
  const pg = clearView();
  say("");
  const hash = location.hash || "#/runs";
  let shown;
  if (!sessionStorage.getItem(KEY) || hash === "#/signin") shown = showSignin();
  else {
    $("#nav").hidden = false;
    const run = hash.match(/^#\/run\/([A-Za-z0-9_.-]+)$/);
    const compare = hash.match(/^#\/compare\/([A-Za-z0-9_.,-]+)$/);
    if (run) shown = showRun(run[1]);
    else if (compare) shown = showCompare(compare[1].split(",").filter((s) => s));
    else if (hash === "#/submit") shown = showSubmit();
    else if (hash === "#/operator") shown = showOperator();
    else shown = showRuns();
  }
  Promise.resolve(shown).catch((e) => { if (pg.alive) say(`Could not show this page: ${e.message}`); });
}

$("#signout").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  resetFilters();
  location.hash = "#/signin";
});
window.addEventListener("hashchange", route);
route();
