// A run's workers: their table (τ, round trips, idle time, what each sent) and the τ-over-time plot with the run's
// marks (lost workers, resumes, status changes).
import { $, el } from "./dom.js";
import { fmt, kib } from "./format.js";

// A worker's release ledger in the workers table: its totals by mode, each kind of message in the tooltip.
const ledgerCell = (l) => el("td", {
  class: "num",
  text: l ? `${kib(l.masked_bytes)} / ${kib(l.sealed_bytes)} / ${kib(l.plain_bytes)}` : "–",
  title: l ? l.releases.map((r) => `${r.quantity} [${r.shape.join("×")}] ×${r.messages}: ${kib(r.bytes)} ${r.mode}`)
    .join("\n") : "",
});

// The workers table, redrawn at each run-info answer.
export function renderWorkers(r) {
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
}

// τ_i of each shard at each run-info answer (a new point only when a worker's numbers changed).
export function sampleWorkers(state, plots) {
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

export function drawWorkers(state, plots) {
  const node = $("#workers-plot");
  if (!node || (!state.tau.t.length && !state.marks.length)) return;
  const shards = [...state.tau.byShard.keys()].sort((a, b) => a - b);
  plots.workers(node, { shards, t: state.tau.t, tau: shards.map((s) => state.tau.byShard.get(s)),
                        marks: state.marks });
}
