// A run's live event stream (server-sent events read with fetch) and its readable log.
import { api } from "./api.js";
import { $, el } from "./dom.js";
import { clock, fmt } from "./format.js";

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// The run's event stream (SSE read with fetch, which can send the key): each event goes into the log and asks for
// the run again (at most once a second). The stream ends after the run's final status; a broken stream is resumed
// from the last event id, waiting longer after each failure.
export async function followEvents(pg, id, state, res, lose, onEvent) {
  let failures = 0;
  const abort = new AbortController();
  pg.onStop(() => abort.abort());
  while (pg.alive) {
    let response = null;
    try {
      response = await api(`/v1/runs/${id}/events?after=${state.eventsAfter}`, { signal: abort.signal, keepOpen: true });
      state.streaming = true;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const ev = pg.alive ? onFrame(frame, state) : null;
          if (ev) onEvent(ev.kind, ev.data);
        }
        failures = 0;
      }
      state.streaming = false;
      response.release();
      if (!pg.alive) return;
      res.info.poke();
      return;  // the run has ended (or is gone): nothing more will come
    } catch (e) {
      state.streaming = false;
      if (response) response.release();
      if (!pg.alive || e.name === "AbortError") return;
      if (e.status === 404 || e.status === 403) { lose(e); return; }
      failures++;
      await sleep(Math.min(30000, 1000 * 2 ** (failures - 1)));
    }
  }
}

function onFrame(frame, state) {
  const fields = {};
  for (const line of frame.split("\n")) {
    if (line.startsWith(":")) continue;
    const i = line.indexOf(":");
    if (i > 0) fields[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  if (!fields.id || !fields.event) return null;
  state.eventsAfter = Math.max(state.eventsAfter, Number(fields.id));
  let data = {};
  try { data = JSON.parse(fields.data || "{}"); } catch (e) { data = { text: fields.data }; }
  logEvent(fields.event, data);
  return { kind: fields.event, data };
}

// One readable line per event, at the browser's local time; consecutive progress events share one line.
function describeEvent(kind, d) {
  switch (kind) {
    case "status":
      return `status ${d.status}` + (d.stop_reason ? ` (stopped: ${d.stop_reason.replaceAll("_", " ")})` : "")
        + (d.error ? ` — ${d.error}` : "");
    case "setup": return `workers ready: ${d.dim} parameters, set up in ${fmt(d.setup_time_s, 1)} s`;
    case "progress":
      return `progress: ${d.rounds_done} of ${d.rounds_total} rounds, ${d.draws_stored} draws per chain`
        + (d.min_ess_bulk != null ? `, min bulk ESS ${fmt(d.min_ess_bulk, 0)}` : "")
        + (d.max_rhat != null ? `, max R-hat ${fmt(d.max_rhat)}` : "");
    case "warning": return `warning: ${d.message}`;
    case "worker_lost":
      return `worker lost at round ${d.round}` + (d.failure?.shard != null ? ` (shard ${d.failure.shard}` : " (")
        + (d.failure?.site ? `, site ${d.failure.site}` : "") + `): ${d.failure?.message || d.failure?.kind || ""}`;
    case "resumed": return `resumed from round ${d.round} (restart ${d.restarts})`;
    default: return `${kind}`;
  }
}

function logEvent(kind, d) {
  const list = $("#events");
  if (!list) return;
  const text = `${d.ts ? clock(d.ts) : ""} ${describeEvent(kind, d)}`.trim();
  const last = list.lastElementChild;
  if (kind === "progress" && last?.dataset.kind === "progress") { last.textContent = text; return; }
  const item = el("li", { text, class: `ev-${kind}` });
  item.dataset.kind = kind;
  list.append(item);
}
