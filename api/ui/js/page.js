// The current view's lifetime (`page`): what it started (timers, streams, resources, plots) is stopped when the view
// changes; `mount` puts a view's template into #view.
import { $ } from "./dom.js";
import { Resource } from "./resource.js";

export const view = $("#view");
export let page = null;  // the current view's lifetime: stopped (timers, streams, plots) when the view changes

export class Page {
  constructor() { this.alive = true; this.stops = []; }
  onStop(fn) { this.stops.push(fn); }
  every(ms, fn) { fn(); const t = setInterval(fn, ms); this.onStop(() => clearInterval(t)); }
  resource(load, opts) { const r = new Resource(load, opts); this.onStop(() => r.stop()); return r; }
  stop() { this.alive = false; for (const fn of this.stops) { try { fn(); } catch (e) { /* already gone */ } } }
}

export function clearView() {
  if (page) page.stop();
  page = new Page();
  view.replaceChildren();
  return page;
}
export function mount(id) { view.append($(`#${id}`).content.cloneNode(true)); }
