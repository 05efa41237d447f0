// raysampler dashboard: a small single-page front end over the public REST API (/v1), nothing else.
// The API key lives in sessionStorage and goes out as the Bearer header on every request.
// This entry module routes the URL's hash to a view; each view and helper is an ES module under js/.
import { say } from "./js/status.js";
import { net } from "./js/api.js";
import { $ } from "./js/dom.js";
import { clearView } from "./js/page.js";
import { KEY, resetFilters } from "./js/session.js";
import { showSignin } from "./js/signin.js";
import { showRuns } from "./js/runs.js";
import { showRun } from "./js/run.js";
import { showCompare } from "./js/compare.js";
import { showOperator } from "./js/operator.js";
import { showSubmit } from "./js/submit.js";

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
