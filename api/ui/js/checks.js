// The run page's model checks: PSIS-LOO, Bayesian R², held-out metrics, posterior predictive checks and the
// brms-style effects tables.
import { getJSON, postJSON, problem } from "./api.js";
import { $, el, table } from "./dom.js";
import { fmt } from "./format.js";
import { builtinDatasets, ppcStats } from "./openapi.js";
import { page } from "./page.js";

// The run page's checks: PSIS-LOO of the run's own rows, and held-out metrics on a data set (uploaded or built-in),
// both computed on the shards; the reliability curve of a classifier.
export async function wireChecks(id, plots) {
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
export async function wirePpc(id, plots) {
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
export function wireEffects(id) {
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
