// The sign-in view: the API key is checked with one request, then kept for this tab.
import { getJSONSignin } from "./api.js";
import { $ } from "./dom.js";
import { mount, page } from "./page.js";
import { AFTER_SIGNIN, KEY, resetFilters } from "./session.js";

export async function showSignin() {
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
