// The run-submission form: fields that write the request's JSON (which can be edited by hand), an optional upload,
// and the API's 422 shown at the field it names.
import { api } from "./api.js";
import { $, el } from "./dom.js";
import { enums } from "./openapi.js";
import { mount, page } from "./page.js";

// "k=v, k2=v2" -> {k: v, k2: v2}; the API checks the keys and says which is wrong.
// "key=value, key2=value2" → {key: "value", key2: "value2"} (a part without "=" maps to ""): tags, and the
// formula's priors of single coefficients
function parsePairs(text) {
  const pairs = {};
  for (const part of text.split(",").map((s) => s.trim()).filter((s) => s)) {
    const i = part.indexOf("=");
    if (i < 0) pairs[part] = ""; else pairs[part.slice(0, i).trim()] = part.slice(i + 1).trim();
  }
  return pairs;
}

export async function showSubmit() {
  mount("tpl-submit");
  const pg = page;
  // until the form is wired (the enums below come from the API), a submit must not reload the page
  $("#submit-form").addEventListener("submit", (ev) => ev.preventDefault());
  const e = await enums();
  if (!pg.alive) return;
  const fill = (sel, values, chosen) => {
    $(sel).replaceChildren(...values.map((v) => el("option", { value: v, text: v.replace("builtin:", "") })));
    $(sel).value = chosen;
  };
  fill("#f-dataset", e.datasets, "builtin:breast_cancer");
  fill("#f-family", e.families, "logistic_regression");
  fill("#f-formula-family", e.formulaFamilies, "bernoulli");
  fill("#f-algorithm", e.algorithms, "dglmc");
  const form = $("#submit-form");
  const json = $("#spec-json");
  let edited = false;  // the JSON was edited by hand: the form no longer rewrites it
  const source = () => form.querySelector("input[name=source]:checked").value;
  const modelKind = () => form.querySelector("input[name=model-kind]:checked").value;
  const num = (sel) => ($(sel).value === "" ? null : Number($(sel).value));
  // A formula names its response, terms and groups itself: its family is brms', its priors are by kind (b, sd,
  // sigma for the families with a σ); the family fields below it do not apply.
  const sigmaFamilies = ["gaussian", "lognormal", "student"];
  // each family's own parameter besides σ (brms' class) and the spec field of its prior: a gamma(shape, rate) prior
  const ownPriors = {
    student: "nu_prior", Gamma: "shape_prior", weibull: "shape_prior", Beta: "phi_prior", negbinomial: "phi_prior",
    zero_inflated_negbinomial: "phi_prior", hurdle_negbinomial: "phi_prior",
  };
  const formulaModel = () => {
    const model = { formula: $("#f-formula").value.trim(), family: $("#f-formula-family").value };
    if (num("#f-b-scale") !== null) model.coef_prior = { normal: { scale: num("#f-b-scale") } };
    if (num("#f-sd-scale") !== null) model.sd_prior = { half_normal: { scale: num("#f-sd-scale") } };
    // a coefficient's own normal prior: its sd as typed (a number, else the text, which the API refuses naming
    // the coefficient)
    const ownCoefs = Object.entries(parsePairs($("#f-coef-priors").value));
    if (ownCoefs.length) {
      model.coef_priors = Object.fromEntries(ownCoefs.map(([name, v]) => {
        const scale = v !== "" && Number.isFinite(Number(v)) ? Number(v) : v;
        return [name, { normal: { scale } }];
      }));
    }
    const sigmaFormula = $("#f-sigma-formula").value.trim();
    if (sigmaFormula) model.sigma_formula = sigmaFormula;  // sent for any family: the API says which take one
    else if (num("#f-sigma-scale") !== null && sigmaFamilies.includes(model.family)) {
      model.sigma_prior = { half_normal: { scale: num("#f-sigma-scale") } };
    }
    const own = ownPriors[model.family];
    $("#f-own-field").dataset.loc = `model.${own || "nu_prior"}`;  // a 422 at the prior shows next to the field
    if (own && num("#f-own-shape") !== null && num("#f-own-rate") !== null) {
      model[own] = { gamma: { shape: num("#f-own-shape"), rate: num("#f-own-rate") } };
    }
    return model;
  };
  const build = () => {
    const formula = modelKind() === "formula";
    const spec = {
      model: formula ? formulaModel() : { family: $("#f-family").value },
      algorithm: { name: $("#f-algorithm").value, params: {} },
      chains: num("#f-chains") ?? "auto",
      num_shards: num("#f-shards-n"),
      num_rounds: $("#f-auto").checked ? "auto" : num("#f-rounds"),
      seed: num("#f-seed"),
    };
    if ($("#f-name").value.trim()) spec.name = $("#f-name").value.trim();
    const tags = parsePairs($("#f-tags").value);
    if (Object.keys(tags).length) spec.tags = tags;
    if (!formula) {
      if ($("#f-prior-scale").value !== "") spec.model.prior_scale = num("#f-prior-scale");
      const noise = $("#f-noise-sd").value.trim();
      if (noise) spec.model.noise_sd = Number.isFinite(Number(noise)) ? Number(noise) : noise;
      const group = $("#f-group").value.trim();
      if (group) {
        const slopes = $("#f-group-slopes").value.split(",").map((v) => v.trim()).filter(Boolean);
        const effects = slopes.length ? { group, slopes } : { group };
        if ($("#f-group-correlated").checked) effects.correlated = true;
        spec.model.group_effects = [effects];
      }
    }
    if (num("#f-burn") !== null) spec.burn_in = num("#f-burn");
    if (num("#f-max-chains") !== null) spec.max_chains = num("#f-max-chains");
    if ($("#f-secure-sums").checked) spec.secure_sums = true;
    if ($("#f-dp").checked) {
      spec.privacy = { epsilon: num("#f-dp-epsilon"), delta: num("#f-dp-delta"), clip: num("#f-dp-clip"),
                       clip_rule: $("#f-dp-rule").value };
    }
    if (source() === "dataset") spec.data = { dataset: $("#f-dataset").value };
    else if (source() === "upload") spec.data = { dataset_id: "(set on submit, from the uploaded file)" };
    else {
      let shards = [];
      try { shards = JSON.parse($("#f-shards").value || "[]"); } catch (err) { shards = $("#f-shards").value; }
      spec.data = formula ? { shards } : { shards, y_column: $("#f-shards-ycol").value };  // a formula names y
    }
    return JSON.stringify(spec, null, 2);
  };
  // a select's pick is a "change" (not every driver of the page sends "input" for it): both rewrite the JSON
  const edit = (ev) => {
    if (ev.target.name === "source") {
      form.querySelectorAll("[data-source]").forEach((d) => { d.hidden = d.dataset.source !== source(); });
    }
    if (ev.target.name === "model-kind") {
      form.querySelectorAll("[data-model]").forEach((d) => { d.hidden = d.dataset.model !== modelKind(); });
    }
    $("#f-rounds").disabled = $("#f-auto").checked;
    for (const sel of ["#f-dp-epsilon", "#f-dp-delta", "#f-dp-clip", "#f-dp-rule"]) {
      $(sel).disabled = !$("#f-dp").checked;
    }
    if (!edited) json.value = build();
    $("#spec-note").hidden = !edited || json.value === build();
  };
  form.addEventListener("input", edit);
  form.addEventListener("change", edit);
  json.addEventListener("input", () => {
    edited = json.value !== build();
    $("#spec-note").hidden = !edited;
  });
  $("#spec-reset").addEventListener("click", () => {
    json.value = build();
    edited = false;
    $("#spec-note").hidden = true;
  });
  json.value = build();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearFieldErrors();
    let spec;
    try { spec = JSON.parse(json.value); } catch (err) {
      $("#submit-error").textContent = `The request is not valid JSON: ${err.message}`;
      return;
    }
    $("#submit").disabled = true;
    try {
      if (source() === "upload" && !edited) {
        const file = $("#f-file").files[0];
        if (!file) { showFieldError("file", "Choose a file to upload."); return; }
        const body = new FormData();
        body.append("file", file);
        body.append("y_column", $("#f-ycol").value || "y");
        const ds = await (await api("/v1/datasets", { method: "POST", body })).json();
        spec.data = { dataset_id: ds.id };
      }
      const run = await (await api("/v1/runs", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(spec),
      })).json();
      if (!pg.alive) return;
      if (run.warnings.length) {
        // the service accepted it but warns (e.g. planned draws over RAYSAMPLER_WARN_DRAW_BYTES): say so first
        $("#submit-warnings").replaceChildren(...run.warnings.map((w) => el("li", { text: w })),
          el("li", {}, "Submitted anyway: ", el("a", { href: `#/run/${run.id}`, text: `open run ${run.id}` })));
        return;
      }
      location.hash = `#/run/${run.id}`;
    } catch (err) {
      if (!pg.alive) return;
      if (err.status === 422 && Array.isArray(err.body?.detail)) {
        for (const d of err.body.detail) showFieldError(d.loc.filter((p) => p !== "body").join("."), d.msg);
      } else if (err.status === 429) {
        $("#submit-error").textContent = `Refused by the tenant's quota (429): ${err.message}`;
      } else {
        $("#submit-error").textContent = err.message;
      }
    } finally {
      if (pg.alive) $("#submit").disabled = false;
    }
  });
}

function clearFieldErrors() {
  document.querySelectorAll(".field-error.dynamic").forEach((n) => n.remove());
  document.querySelectorAll(".field.invalid").forEach((n) => n.classList.remove("invalid"));
  document.querySelectorAll("[data-error-for]").forEach((n) => { n.textContent = ""; });
  $("#submit-error").textContent = "";
  $("#submit-warnings").replaceChildren();
}

// The API's 422 names the field by its location (e.g. "chains", "model.prior_scale", "data.shards.0"): the message
// goes next to the form field with the longest matching data-loc, else under the form.
function showFieldError(loc, msg) {
  const fixed = document.querySelector(`[data-error-for="${loc}"]`);
  if (fixed) { fixed.textContent = msg; return; }
  let best = null;
  for (const f of document.querySelectorAll(".field[data-loc]")) {
    if (f.closest("[hidden]")) continue;  // a field of the other kind of model or data source
    const l = f.dataset.loc;
    if ((loc === l || loc.startsWith(`${l}.`)) && (!best || l.length > best.dataset.loc.length)) best = f;
  }
  const target = best && !best.hidden ? best : null;
  const note = el("span", { class: "field-error dynamic", "data-loc": loc, text: `${loc}: ${msg}` });
  if (target) { target.classList.add("invalid"); target.append(note); } else $("#submit-error").append(note);
}
