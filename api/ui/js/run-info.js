// What a run page shows of the run itself: status, progress, convergence, privacy, warnings, the parameter pickers,
// the chain list and the summary table.
import { $, el, setText } from "./dom.js";
import { fmt, fraction, tagText } from "./format.js";
import { chainColour } from "./plots.js";
import { renderWorkers } from "./workers.js";

const TERMINAL = ["SUCCEEDED", "FAILED", "CANCELLED"];

export function renderRunInfo(state, plots) {
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
  renderWorkers(r);
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

export function renderSummary(s) {
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
