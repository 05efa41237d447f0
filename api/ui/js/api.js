// The REST client: every request to /v1 goes through `api`, which sends the key, counts the request (`net`) and
// turns an error answer into an ApiError.
import { KEY } from "./session.js";

export class ApiError extends Error {
  constructor(status, body) {
    super(typeof body?.detail === "string" ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// Requests counted per resource (method and path, without the query): how many were sent, how many are in flight
// now and the most that ever were at once. Tests read it; the run page keeps every resource at one in flight.
export const net = { count: {}, inflight: {}, maxInflight: {}, urls: {} };
function track(method, path) {
  const k = `${method} ${path.split("?")[0]}`;
  net.count[k] = (net.count[k] || 0) + 1;
  net.urls[`${method} ${path}`] = (net.urls[`${method} ${path}`] || 0) + 1;
  net.inflight[k] = (net.inflight[k] || 0) + 1;
  net.maxInflight[k] = Math.max(net.maxInflight[k] || 0, net.inflight[k]);
  let done = false;
  return () => { if (!done) { done = true; net.inflight[k]--; } };
}

// `options.signin`: a refused key is the caller's to report (no redirect); `options.keepOpen`: the caller releases
// the request's count when it has read the body (a stream), through `response.release()`.
export async function api(path, options = {}) {
  const release = track(options.method || "GET", path);
  try {
    const headers = Object.assign({ Authorization: `Bearer ${sessionStorage.getItem(KEY) || ""}` }, options.headers);
    const response = await fetch(path, Object.assign({}, options, { headers }));
    if (response.status === 401) {
      if (!options.signin) {
        sessionStorage.removeItem(KEY);
        if (location.hash !== "#/signin") location.hash = "#/signin";
      }
      throw new ApiError(401, { detail: "the API key was refused" });
    }
    if (!response.ok) {
      let body = null;
      try { body = await response.json(); } catch (e) { body = { detail: response.statusText }; }
      throw new ApiError(response.status, body);
    }
    if (options.keepOpen) response.release = release; else release();
    return response;
  } catch (e) {
    release();
    throw e;
  }
}
export const getJSON = async (path) => (await api(path)).json();
export const getJSONSignin = async (path) => (await api(path, { signin: true })).json();

export const postJSON = async (path, body) => (await api(path, {
  method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })).json();

// A 4xx's message, naming the field where the API gives one.
export const problem = (e) => (Array.isArray(e.body?.detail)
  ? e.body.detail.map((d) => `${d.loc.filter((p) => p !== "body").join(".")}: ${d.msg}`).join("; ") : e.message);
