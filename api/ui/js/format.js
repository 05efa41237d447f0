// How numbers, times, sizes, progress and tags are written on the page.

export const fmt = (v, digits = 3) => (v === null || v === undefined || Number.isNaN(v) ? "–" :
  (typeof v === "number" ? (Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(2)
                                                                                 : v.toFixed(digits)) : String(v)));
export const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "–");
export const kib = (n) => (n == null ? "–" : n < 1024 ? `${n} B` : `${(n / 1024).toFixed(1)} KiB`);
export const clock = (t) => new Date(t * 1000).toLocaleTimeString();
export const bytes = (n) => (n == null ? "no limit" : n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : n >= 1e6
  ? `${(n / 1e6).toFixed(1)} MB` : `${(n / 1e3).toFixed(1)} kB`);
export const fraction = (p) => Math.max(0, Math.min(1, p.fraction ?? (p.rounds_total ? p.rounds_done / p.rounds_total : 0)));
export const progressTitle = (r) => (r.progress.basis === "convergence"
  ? `${(100 * fraction(r.progress)).toFixed(0)}% of the way to the convergence targets`
  : `${r.progress.rounds_done} / ${r.progress.rounds_total} rounds`);
export const tagText = (tags) => Object.entries(tags || {}).map(([k, v]) => `${k}=${v}`).join(", ");
