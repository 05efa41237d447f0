// The status line under the header: a message for the reader, and every error nobody caught.
import { $ } from "./dom.js";

// Errors nobody caught (a page changed under a request, a bug) are shown here, not thrown at the console.
export function say(message) {
  const line = $("#status-line");
  line.textContent = message || "";
  line.hidden = !message;
}
window.addEventListener("error", (ev) => { ev.preventDefault(); say(`Something went wrong: ${ev.message}`); });
window.addEventListener("unhandledrejection", (ev) => {
  ev.preventDefault();
  say(`Something went wrong: ${ev.reason?.message || ev.reason}`);
});
