// The runs list: filters, pages by cursor, rows updated in place, and runs picked to compare.
import { getJSON } from "./api.js";
import { $, el, setText } from "./dom.js";
import { fmt, fraction, progressTitle, tagText, when } from "./format.js";
import { mount, page } from "./page.js";
import { FILTERS, loadFilters } from "./session.js";

const LIST_POLL_MS = 2000;     // the runs list: the API has no list stream
const PAGE = 20;

export async function showRuns() {
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
