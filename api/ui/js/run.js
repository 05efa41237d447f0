// One run's page: the resources it loads (the run, its trace, summary and diagnostics), the controls, and how the
// event stream drives them.
import { api, getJSON } from "./api.js";
import { wireChecks, wireEffects, wirePpc } from "./checks.js";
import { $, el, setText } from "./dom.js";
import { followEvents } from "./events.js";
import { fmt } from "./format.js";
import { mount, page } from "./page.js";
import { RunPlots } from "./plots.js";
import { renderRunInfo, renderSummary } from "./run-info.js";
import { drawWorkers, sampleWorkers } from "./workers.js";

const SAFETY_POLL_MS = 15000;  // a run page learns of changes from its event stream; this only guards against a stall
const INFO_GAP_MS = 1000;      // at most one run-info request a second, however many events arrive
const TRACE_POINTS = 2000;     // per chain: the API thins the stored draws evenly to at most this many

export async function showRun(id) {
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

  // One parameter's trace into state[field], fetched again only when the parameter or the stored draws changed
  // (its key in state[keyField]); true when it was fetched now.
  const refreshTrace = async (param, draws, field, keyField) => {
    if (`${param}|${draws}` === state[keyField]) return false;
    const t = await getJSON(`/v1/runs/${id}/trace?param=${param}&max_points=${TRACE_POINTS}`);
    if (!pg.alive) return false;
    state[keyField] = `${t.param}|${draws}`;
    state[field] = t;
    return true;
  };

  res.trace = pg.resource(async () => {
    const r = state.info;
    if (!r || !r.param_names || r.param_names.length === 0 || r.progress.draws_stored < 1) return;
    const draws = r.progress.draws_stored;
    if (await refreshTrace(state.param, draws, "trace", "traceKey")) {
      const t = state.trace;
      $("#trace-note").textContent = `${t.draws_stored} draws per chain${t.step > 1 ? `, 1 in ${t.step} shown` : ""}`;
      plots.trace($("#trace-plot"), t);
      plots.histogram($("#hist-plot"), t);
    }
    if (!pg.alive || r.param_names.length < 2) return;
    await refreshTrace(state.pairParam, draws, "pair", "pairKey");
    if (pg.alive && state.trace && state.pair) plots.pair($("#pair-plot"), state.trace, state.pair);
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
