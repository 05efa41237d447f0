// Accessibility checks written for these tests: WCAG relative-luminance contrast of visible text (4.5:1, 3:1 for
// large text), a label (accessible name) for every form control, names for buttons, alt on images, lang on html.
const lum = (rgb) => {
  const c = rgb.map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
};
const parse = (s) => { const m = s.match(/rgba?\(([^)]+)\)/); if (!m) return null;
  const p = m[1].split(/[ ,\/]+/).filter((x) => x).map(Number); return { rgb: p.slice(0, 3), a: p.length > 3 ? p[3] : 1 }; };
const background = (node) => {
  let layers = [];
  for (let n = node; n && n.nodeType === 1; n = n.parentElement) {
    const c = parse(getComputedStyle(n).backgroundColor);
    if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; }
  }
  let out = [255, 255, 255];
  for (const l of layers.reverse()) out = out.map((v, i) => l.a * l.rgb[i] + (1 - l.a) * v);
  return out;
};
const visible = (n) => { const r = n.getBoundingClientRect(); const s = getComputedStyle(n);
  return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
const problems = [];
for (const n of document.querySelectorAll('body *')) {
  if (!visible(n) || ['SCRIPT', 'STYLE', 'TEMPLATE', 'OPTION'].includes(n.tagName)) continue;
  if (n.closest('[disabled], .visually-hidden')) continue;
  const own = [...n.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim());
  if (!own) continue;
  const s = getComputedStyle(n);
  const fg = parse(s.color); const bg = background(n);
  const f = fg.rgb.map((v, i) => fg.a * v + (1 - fg.a) * bg[i]);
  const [hi, lo] = [lum(f), lum(bg)].sort((a, b) => b - a);
  const ratio = (hi + 0.05) / (lo + 0.05);
  const size = parseFloat(s.fontSize), bold = Number(s.fontWeight) >= 700;
  const need = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
  if (ratio < need) problems.push(`contrast ${ratio.toFixed(2)} < ${need}: ${n.tagName}.${n.className} "${n.textContent.trim().slice(0, 40)}"`);
}
const named = (n) => (n.getAttribute('aria-label') || '').trim() || (n.getAttribute('aria-labelledby') && document.getElementById(n.getAttribute('aria-labelledby'))?.textContent.trim())
  || (n.id && document.querySelector(`label[for="${n.id}"]`)?.textContent.trim()) || n.closest('label')?.textContent.trim();
for (const n of document.querySelectorAll('input, select, textarea')) {
  if (n.type === 'hidden') continue;
  if (!named(n)) problems.push(`no label: ${n.tagName}#${n.id}`);
}
for (const n of document.querySelectorAll('button')) {
  if (!(n.textContent.trim() || n.getAttribute('aria-label'))) problems.push(`button without a name: ${n.outerHTML.slice(0, 60)}`);
}
for (const n of document.querySelectorAll('img')) if (!n.hasAttribute('alt')) problems.push(`img without alt: ${n.src}`);
if (!document.documentElement.lang) problems.push('html without lang');
return problems;
