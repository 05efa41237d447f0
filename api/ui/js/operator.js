// The operator (cluster) view: Ray's nodes and their workers, the queue, and the tenant's quota.
import { getJSON } from "./api.js";
import { $, el, setText } from "./dom.js";
import { bytes, fmt } from "./format.js";
import { mount, page } from "./page.js";

export async function showOperator() {
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
