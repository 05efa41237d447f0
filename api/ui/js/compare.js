// Runs side by side: their posterior summaries and a PSIS-LOO comparison.
import { getJSON, postJSON, problem } from "./api.js";
import { $, el, table } from "./dom.js";
import { fmt, tagText } from "./format.js";
import { mount, page } from "./page.js";

export async function showCompare(ids) {
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
