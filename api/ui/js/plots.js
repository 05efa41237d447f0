// raysampler dashboard: the run page's plots, drawn with uPlot from the thinned data the API prepares (/trace,
// /diagnostics, /summary). One chain list (always shown, any chain count) toggles and highlights chains in every
// per-chain plot. No spreads over data arrays (Math.max(...a) throws on long arrays): plain loops.

export const chainColour = (c, n) => `hsl(${Math.round((360 * c) / Math.max(n, 1))}, 65%, 40%)`;

function extent(arrays) {
  let lo = Infinity, hi = -Infinity;
  for (const a of arrays) {
    for (const v of a) {
      if (v === null || v === undefined || !Number.isFinite(v)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  return lo <= hi ? [lo, hi] : null;
}

// The plots of one run page: each is rebuilt when what its axes say changes (its `signature`: the parameter's name,
// the chain count), else given new data. `shown[c]` and the highlighted chain apply to every per-chain plot.
export class RunPlots {
  constructor() {
    this.plots = new Map();     // key -> {plot, signature, perChain}
    this.shown = [];
    this.highlight = null;
    this.latest = {};           // what the custom-drawn plots (forest, pair) draw: read by their draw hooks
  }

  destroy() {
    for (const p of this.plots.values()) p.plot.destroy();
    this.plots.clear();
  }

  get(key) { return this.plots.get(key)?.plot || null; }

  // What each plot's axes say (tests read it).
  axes() {
    const out = {};
    for (const [k, p] of this.plots) out[k] = p.plot.axes.map((a) => a.label);
    return out;
  }

  setChains(n) {
    if (this.shown.length !== n) { this.shown = new Array(n).fill(true); this.highlight = null; }
  }

  toggle(c, show) {
    this.shown[c] = show;
    for (const p of this.plots.values()) if (p.perChain && p.plot.series[c + 1]) p.plot.setSeries(c + 1, { show });
    this.get("pair")?.redraw(false);
  }

  focus(c) {
    this.highlight = c;
    for (const p of this.plots.values()) {
      if (!p.perChain) continue;
      if (c === null || !p.plot.series[c + 1]) p.plot.setSeries(null, { focus: true });
      else p.plot.setSeries(c + 1, { focus: true });
    }
    this.get("pair")?.redraw(false);
  }

  // Create (or update) plot `key` in `node`: `opts` uPlot options without width/size, `data` its data.
  draw(key, node, signature, perChain, opts, data) {
    const old = this.plots.get(key);
    if (old && old.signature === signature && old.plot.series.length === data.length) {
      old.plot.setData(data);
      return old.plot;
    }
    if (old) old.plot.destroy();
    node.replaceChildren();
    const width = Math.max(240, node.clientWidth || 600);
    const plot = new uPlot(Object.assign({ width, height: opts.height || 260, legend: { show: false },
                                           focus: { alpha: 0.25 }, cursor: { focus: { prox: 8 } } }, opts), data, node);
    this.plots.set(key, { plot, signature, perChain });
    if (perChain && this.highlight !== null && plot.series[this.highlight + 1]) {
      plot.setSeries(this.highlight + 1, { focus: true });
    }
    return plot;
  }

  chainSeries(n, extra = {}) {
    const out = [];
    for (let c = 0; c < n; c++) {
      out.push(Object.assign({ label: `chain ${c}`, stroke: chainColour(c, n), width: 1, points: { show: false },
                               show: this.shown[c] !== false }, extra));
    }
    return out;
  }

  resize() {
    for (const p of this.plots.values()) {
      const node = p.plot.root.parentNode;
      if (node && node.clientWidth) p.plot.setSize({ width: Math.max(240, node.clientWidth), height: p.plot.height });
    }
  }

  // ---------------------------------------------------------------------------------------------- the plots

  trace(node, t) {
    const n = t.values.length;
    this.draw("trace", node, `${t.name}|${n}`, true, {
      series: [{ label: "draw" }, ...this.chainSeries(n)], scales: { x: { time: false } },
      axes: [{ label: "draw" }, { label: t.name }],
    }, [t.index, ...t.values]);
  }

  histogram(node, t) {
    const range = extent(t.values);
    if (!range) return;
    let [lo, hi] = range;
    if (hi === lo) { lo -= 0.5; hi += 0.5; }
    const bins = 40, width = (hi - lo) / bins;
    const centres = Array.from({ length: bins }, (_, i) => lo + (i + 0.5) * width);
    const dens = t.values.map((chain) => {
      const counts = new Array(bins).fill(0);
      let m = 0;
      for (const v of chain) {
        if (v === null) continue;
        counts[Math.min(bins - 1, Math.max(0, Math.floor((v - lo) / width)))]++;
        m++;
      }
      return counts.map((k) => (m ? k / (m * width) : 0));
    });
    this.draw("hist", node, `${t.name}|${dens.length}`, true, {
      series: [{ label: t.name }, ...this.chainSeries(dens.length, { paths: uPlot.paths.stepped({ align: 0 }) })],
      scales: { x: { time: false } }, axes: [{ label: t.name }, { label: "density" }],
    }, [centres, ...dens]);
  }

  ranks(node, d) {
    const bins = Array.from({ length: d.rank_bins }, (_, i) => i);
    const uniform = d.draws_used / d.rank_bins;
    this.draw("rank", node, `${d.name}|${d.chains}|${d.rank_bins}`, true, {
      series: [{ label: "rank bin" }, ...this.chainSeries(d.chains, { paths: uPlot.paths.stepped({ align: 1 }) }),
               { label: "uniform", stroke: "#1d232b", dash: [4, 4], width: 1, points: { show: false } }],
      scales: { x: { time: false } },
      axes: [{ label: `rank bin of ${d.name} (all chains)` }, { label: "draws in bin" }],
    }, [bins, ...d.rank_counts, bins.map(() => uniform)]);
  }

  autocorr(node, d) {
    const lags = d.autocorr.length ? d.autocorr[0].length : 0;
    const x = Array.from({ length: lags }, (_, i) => i * d.step);
    this.draw("autocorr", node, `${d.name}|${d.chains}|${d.step}`, true, {
      series: [{ label: "lag" }, ...this.chainSeries(d.chains)], scales: { x: { time: false }, y: { range: [-1, 1] } },
      axes: [{ label: "lag (draws)" }, { label: `autocorrelation of ${d.name}` }],
    }, [x, ...d.autocorr]);
  }

  ess(node, d) {
    const target = d.ess_draws.map(() => 100 * d.chains);
    this.draw("ess", node, `${d.name}`, false, {
      series: [{ label: "draws" },
               { label: "bulk ESS", stroke: "#2f6fde", width: 2, points: { show: true } },
               { label: "tail ESS", stroke: "#b4581c", width: 2, points: { show: true } },
               { label: "100 per chain", stroke: "#687382", dash: [4, 4], width: 1, points: { show: false } }],
      scales: { x: { time: false } }, axes: [{ label: "draws per chain" }, { label: `ESS of ${d.name}` }],
    }, [d.ess_draws, d.ess_bulk, d.ess_tail, target]);
  }

  // Forest: every parameter's mean and interval (from the summary), one row each, R-hat ≥ 1.01 in red.
  forest(node, s) {
    const lb = s.columns.find((c) => c.endsWith("_lb")), ub = s.columns.find((c) => c.endsWith("_ub"));
    const rows = s.rows;
    const range = extent([rows.map((r) => r[lb]), rows.map((r) => r[ub])]);
    if (!range) return;
    if (range[0] === range[1]) { range[0] -= 0.5; range[1] += 0.5; }
    this.latest.forest = s;
    this.latest.forestX = range;
    const names = rows.map((r) => r.param);
    const height = Math.min(1400, 60 + 18 * rows.length);
    const drawRows = (u) => {
      const { rows } = this.latest.forest;
      const ctx = u.ctx;
      ctx.save();
      rows.forEach((r, i) => {
        if (r[lb] === null || r[ub] === null) return;
        const y = u.valToPos(rows.length - 1 - i, "y", true);
        const bad = r.r_hat !== null && r.r_hat >= 1.01;
        ctx.strokeStyle = ctx.fillStyle = bad ? "#b3261e" : "#1d4fa8";
        ctx.lineWidth = 2 * devicePixelRatio;
        ctx.beginPath();
        ctx.moveTo(u.valToPos(r[lb], "x", true), y);
        ctx.lineTo(u.valToPos(r[ub], "x", true), y);
        ctx.stroke();
        if (r.mean !== null) {
          ctx.beginPath();
          ctx.arc(u.valToPos(r.mean, "x", true), y, 3.5 * devicePixelRatio, 0, 2 * Math.PI);
          ctx.fill();
        }
      });
      ctx.restore();
    };
    const n = rows.length;
    let longest = 0;
    for (const name of names) longest = Math.max(longest, name.length + 8);
    const stride = Math.ceil(n / 70);  // at most 70 names on the axis; every row is still drawn
    const every = [];
    for (let i = n - 1; i >= 0; i -= stride) every.push(i);
    const labelSize = Math.round(Math.min(Math.max(80, 6.6 * longest + 12), 0.45 * (node.clientWidth || 600)));
    this.draw("forest", node, `${names.join("|")}|${lb}`, false, {
      height,
      series: [{ label: "value" }, { label: "rows", stroke: "transparent", width: 0, points: { show: false } }],
      scales: { x: { time: false, range: () => this.latest.forestX }, y: { range: [-0.5, n - 0.5] } },
      axes: [{ label: `value (mean and ${lb.replace("_lb", "").replace("hdi", "")}% HDI)` },
             { label: "parameter (R-hat)", size: labelSize, splits: () => every,
               values: (_, ticks) => ticks.map((i) => {
                 const r = this.latest.forest.rows[n - 1 - i];
                 return r === undefined ? "" : `${r.param} (${r.r_hat === null ? "–" : r.r_hat.toFixed(3)})`;
               }) }],
      hooks: { draw: [drawRows] },
      cursor: { show: false },
    }, [range, [-0.5, n - 0.5]]);
  }

  // Pair: the draws of two parameters against each other, one colour per chain (same thinned draw indices).
  pair(node, a, b) {
    this.latest.pair = { a, b };
    const n = Math.min(a.values.length, b.values.length);
    const xr = extent(a.values), yr = extent(b.values);
    if (!xr || !yr) return;
    const pad = (r) => (r[0] === r[1] ? [r[0] - 0.5, r[1] + 0.5] : r);
    this.latest.pairX = pad(xr);
    this.latest.pairY = pad(yr);
    const dots = (u) => {
      const { a, b } = this.latest.pair;
      const n = Math.min(a.values.length, b.values.length);
      const ctx = u.ctx;
      ctx.save();
      const s = 2 * devicePixelRatio;
      for (let c = 0; c < n; c++) {
        if (this.shown[c] === false) continue;
        ctx.globalAlpha = this.highlight === null || this.highlight === c ? 0.7 : 0.1;
        ctx.fillStyle = chainColour(c, n);
        const xs = a.values[c], ys = b.values[c], m = Math.min(xs.length, ys.length);
        for (let i = 0; i < m; i++) {
          if (xs[i] === null || ys[i] === null) continue;
          ctx.fillRect(u.valToPos(xs[i], "x", true) - s / 2, u.valToPos(ys[i], "y", true) - s / 2, s, s);
        }
      }
      ctx.restore();
    };
    const plot = this.draw("pair", node, `${a.name}|${b.name}|${n}`, false, {
      series: [{ label: a.name }, { label: b.name, stroke: "transparent", width: 0, points: { show: false } }],
      scales: { x: { time: false, range: () => this.latest.pairX }, y: { range: () => this.latest.pairY } },
      axes: [{ label: a.name }, { label: b.name }],
      hooks: { draw: [dots] },
    }, [pad(xr), pad(yr)]);
    plot.redraw(false);
  }

  // A posterior predictive check (GET /ppc): the replicated data sets light, the observed y dark (as bayesplot).
  // dens: every curve's density on the grid; hist: every curve's counts per bin, stepped; stat: a histogram of
  // T(y_rep) with T(y) marked by a vertical line.
  ppc(node, c) {
    const light = { stroke: "#6497b1", width: 1, points: { show: false } };
    const dark = { label: "y", stroke: "#011f4b", width: 2.5, points: { show: false } };
    const reps = (extra) => c.replicated.map((_, k) => Object.assign({ label: `y_rep ${k + 1}` }, light, extra));
    if (c.kind === "dens") {
      this.draw("ppc", node, `dens|${c.replicated.length}`, false, {
        series: [{ label: "y" }, ...reps({}), dark], scales: { x: { time: false } },
        axes: [{ label: "y" }, { label: "density" }],
      }, [c.grid, ...c.replicated, c.observed]);
      return;
    }
    if (c.kind === "hist") {
      const step = { paths: uPlot.paths.stepped({ align: 1 }) };
      const close = (counts) => [...counts, counts[counts.length - 1]];  // the last bin's right edge
      this.draw("ppc", node, `hist|${c.replicated.length}|${c.edges.length}`, false, {
        series: [{ label: "y" }, ...reps(step), Object.assign({}, dark, step)], scales: { x: { time: false } },
        axes: [{ label: "y" }, { label: "rows" }],
      }, [c.edges, ...c.replicated.map(close), close(c.observed)]);
      return;
    }
    const values = c.replicated.filter((v) => v !== null);
    const range = extent([values, [c.observed]]);
    if (!range) return;
    let [lo, hi] = range;
    if (hi === lo) { lo -= 0.5; hi += 0.5; }
    const bins = 30, width = (hi - lo) / bins;
    const edges = Array.from({ length: bins + 1 }, (_, i) => lo + i * width);
    const counts = new Array(bins + 1).fill(0);
    for (const v of values) counts[Math.min(bins - 1, Math.floor((v - lo) / width))]++;
    counts[bins] = counts[bins - 1];
    this.latest.ppcStat = c.observed;
    this.latest.ppcX = [lo - width, hi + width];
    const mark = (u) => {
      const x = u.valToPos(this.latest.ppcStat, "x", true);
      const ctx = u.ctx;
      ctx.save();
      ctx.strokeStyle = "#011f4b";
      ctx.lineWidth = 2.5 * devicePixelRatio;
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
      ctx.restore();
    };
    this.draw("ppc", node, `stat|${c.stat}`, false, {
      series: [{ label: c.stat }, Object.assign({ label: "T(y_rep)", fill: "rgba(100, 151, 177, 0.35)",
                                                paths: uPlot.paths.stepped({ align: 1 }) }, light)],
      scales: { x: { time: false, range: () => this.latest.ppcX } },
      axes: [{ label: `${c.stat} (line: the observed y's)` }, { label: "replicated data sets" }],
      hooks: { draw: [mark] },
    }, [edges, counts]).redraw(false);
  }

  // Workers over time: τ_i of every shard as this page saw it (one point per run-info answer), and the run's
  // worker events (lost, resumed) and status changes as vertical marks at their times.
  // A classifier's reliability curve: per bin, the mean confidence (x) against the accuracy (y), with the diagonal.
  reliability(node, bins) {
    const x = bins.map((b) => b.confidence);
    this.draw("reliability", node, `reliability|${bins.length}`, false, {
      height: 220, scales: { x: { time: false, range: [0, 1] }, y: { range: [0, 1] } },
      series: [{ label: "confidence" },
               { label: "accuracy", stroke: "#1f5f99", width: 2, points: { show: true, size: 6 } },
               { label: "perfect calibration", stroke: "#767676", dash: [4, 4], width: 1, points: { show: false } }],
      axes: [{ label: "confidence (predicted class)" }, { label: "accuracy" }],
    }, [x, bins.map((b) => b.accuracy), x]);
  }

  workers(node, w) {
    const shards = w.shards;
    const marks = w.marks;
    this.latest.workers = w;
    const range = extent([w.t, marks.map((m) => m.t)]);
    if (!range) return;
    this.latest.workersX = [range[0] - 1, range[1] + 1];
    const colour = { worker_lost: "#b3261e", resumed: "#1f7a3a", status: "#5a6472" };
    const drawMarks = (u) => {
      const { marks: ms } = this.latest.workers;
      const ctx = u.ctx;
      ctx.save();
      ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
      for (const m of ms) {
        const x = u.valToPos(m.t, "x", true);
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
        ctx.strokeStyle = ctx.fillStyle = colour[m.kind] || "#5a6472";
        ctx.lineWidth = 1.5 * devicePixelRatio;
        ctx.beginPath();
        ctx.moveTo(x, u.bbox.top);
        ctx.lineTo(x, u.bbox.top + u.bbox.height);
        ctx.stroke();
        ctx.fillText(m.label, x + 3 * devicePixelRatio, u.bbox.top + 12 * devicePixelRatio);
      }
      ctx.restore();
    };
    const series = [{ label: "time" }];
    for (let i = 0; i < shards.length; i++) {
      series.push({ label: `shard ${shards[i]}`, stroke: chainColour(i, shards.length), width: 1.5,
                    points: { show: true, size: 4 } });
    }
    this.draw("workers", node, `${shards.join(",")}`, false, {
      series, scales: { x: { time: true, range: () => this.latest.workersX } },
      axes: [{ label: "time (local)" }, { label: "τ_i (ms per local step)" }],
      hooks: { draw: [drawMarks] },
    }, [w.t, ...w.tau]);
  }
}
