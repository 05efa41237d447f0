// A resource loaded from the API at most once at a time, with merged asks, a minimum gap and back-off.

// One resource (the run, its trace, its summary, ...) loaded by `load`: at most one request in flight; asks while
// one is in flight are merged into one more load after it; at least `minGapMs` between loads; after an error the
// next try waits 1, 2, 4, ... 30 s, and after a slow answer as long as it took. `lost(e)` may stop it (404/403).
export class Resource {
  constructor(load, { minGapMs = 0, onError = () => {} } = {}) {
    Object.assign(this, { load, minGapMs, onError, busy: false, again: false, timer: null, failures: 0,
                          stopped: false });
  }

  poke() {
    if (this.stopped) return;
    if (this.busy || this.timer) { this.again = true; return; }
    this.run();
  }

  async run() {
    this.busy = true;
    this.again = false;
    const t0 = performance.now();
    let failed = false;
    try {
      await this.load();
      this.failures = 0;
    } catch (e) {
      failed = true;
      this.failures++;
      this.onError(e);
    } finally {
      this.busy = false;
    }
    if (this.stopped) return;
    const took = performance.now() - t0;
    const gap = failed ? Math.min(30000, 1000 * 2 ** (this.failures - 1)) : Math.max(this.minGapMs, took > 1000 ? took : 0);
    if (!failed && !this.again && gap === 0) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      if (failed || this.again) this.run();
    }, gap);
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}
