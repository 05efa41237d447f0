// DOM helpers shared by every view: query, build and update elements.

export const $ = (sel, root = document) => root.querySelector(sel);

// `style` takes an object of CSS properties, set through the CSSOM: the page's Content-Security-Policy refuses
// inline style attributes (setAttribute("style", ...)) but not this.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k === "style") Object.assign(node.style, v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}
export const setText = (node, text) => { if (node.textContent !== text) node.textContent = text; };

export const table = (node, head, rows) => node.replaceChildren(
  el("tr", {}, ...head.map((h, i) => el("th", { class: i ? "num" : "", text: h }))),
  ...rows.map((r) => el("tr", {}, ...r.map((v, i) => el("td", { class: i ? "num" : "", text: v })))));
