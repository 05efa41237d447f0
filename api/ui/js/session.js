// What the dashboard keeps in sessionStorage (this tab only): the API key, the runs list's filters, and where to go
// back to after signing in.

export const KEY = "raysampler.apiKey";
export const FILTERS = "raysampler.filters";
export const AFTER_SIGNIN = "raysampler.afterSignin";

export function resetFilters() { sessionStorage.removeItem(FILTERS); }

export function loadFilters() {
  try { return Object.assign({ status: "", name: "", tag: "" }, JSON.parse(sessionStorage.getItem(FILTERS) || "{}")); }
  catch (e) { return { status: "", name: "", tag: "" }; }
}
