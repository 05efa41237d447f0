// The choices the API accepts, read from its own description (/openapi.json, no key needed, fetched once) and the
// registered model families (/v1/models).
import { getJSON } from "./api.js";

let openapi = null;
let families = null;
// The API's own description (no key needed, fetched once): the choices it accepts.
export async function apiDoc() {
  if (!openapi) openapi = await (await fetch("/openapi.json")).json();
  return openapi;
}
export const ppcStats = async () => (await apiDoc()).paths["/v1/runs/{run_id}/ppc"].get.parameters
  .find((q) => q.name === "stat").schema.enum;
export const builtinDatasets = async () => (await apiDoc()).components.schemas.DataRef.properties.dataset.enum
  .filter((v) => v);
export async function enums() {
  const schema = (await apiDoc()).components.schemas;
  // the registered model families (built-in and from installed packages), as the service lists them
  if (!families) families = (await getJSON("/v1/models")).families.map((f) => f.name);
  return {
    datasets: await builtinDatasets(),
    families,
    formulaFamilies: schema.ModelSpec.properties.formula["x-families"],
    algorithms: schema.AlgorithmSpec.properties.name.enum,
  };
}
