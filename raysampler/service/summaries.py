"""Posterior summaries of stored draws that scale: the arviz-stats summary table (mean, sd, HDI, ess_bulk, ess_tail,
r_hat, mcse_mean, mcse_sd) computed per coordinate on (chains, draws) float64 arrays with arviz-stats' array
functions, coordinates in parallel threads; and a cache of computed tables.

The rank normalisation behind the bulk ESS and the rank R-hat (Vehtari et al. 2021) is done once per coordinate and
shared by both, with a quicksort arg-sort (exact: ties fall back to scipy's average ranks, what arviz-stats uses);
everything else is arviz-stats' own array code, so the table equals `arviz_stats.summary` (tests compare them).

The cache keys a table by (tenant, run, stored draws per chain, ci_prob): a run's stored draws below `draws_stored`
never change, so a key's table never goes stale. Tables are kept in memory (least recently used first out, bounded)
and, for a finished run, written as JSON next to its draws, so they outlive a restart; a resume or a delete drops
them. Concurrent requests for one key wait for one computation (a lock per key). The manager computes a run's table
when the run ends, so the first request for a finished run reads it.

While a run samples, its stored draws grow by a chunk every few seconds, and every new count would be a new
computation of the whole table (rank normalisation sorts every draw). A running run's latest table is served
instead, its `draws` saying how many draws it summarises, until a newer one is due: more draws stored and at least
`predicted cpu_s / RUNNING_CPU_SHARE` seconds since the last one finished (the next table's CPU time predicted from
the last one's, in proportion to the draws), so however often pages poll, a running run's summaries cost at most
about that share of one core; the newer table is computed in the background while the request is answered from the
latest.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np

from ..checkpoints import RunDirectory, as_run_directory
from ..models.contract import ParamBlock, natural_values

log = logging.getLogger("raysampler.service")

COLUMNS_AFTER_HDI = ("ess_bulk", "ess_tail", "r_hat", "mcse_mean", "mcse_sd")
SUMMARY_FILE_PREFIX = "summary-"  # <run dir>/summary-<draws>-<ci_prob>.json
DEFAULT_CI_PROB = 0.94  # arviz-stats' default interval: the table the manager computes when a run ends
RUNNING_CPU_SHARE = 0.025  # of one core: the most a running run's summaries take, however often they are asked for


@dataclass(frozen=True)
class SummaryTable:
    """Row labels (`beta[age]`, `sigma`, …), column names, and one row of values per label (NaN where undefined)."""

    labels: tuple[str, ...]
    columns: tuple[str, ...]
    values: np.ndarray  # (rows, columns) float64
    draws: int = 0  # draws per chain summarised
    cpu_s: float = field(default=0.0, compare=False)  # CPU seconds of its computation in `summary_table`'s threads

    def to_json(self) -> dict[str, object]:
        return {
            "labels": list(self.labels),
            "columns": list(self.columns),
            "values": [[v if math.isfinite(v) else None for v in row] for row in self.values.tolist()],
        }

    @classmethod
    def from_json(cls, obj: dict, draws: int = 0) -> SummaryTable:
        vals = np.array([[np.nan if v is None else v for v in row] for row in obj["values"]], dtype=np.float64)
        shape = (len(obj["labels"]), len(obj["columns"]))
        return cls(tuple(obj["labels"]), tuple(obj["columns"]), vals.reshape(shape), draws)


def import_statistics() -> None:
    """Import what a table's computation needs (arviz-stats, scipy: about a second), so a service's first summary
    does not pay for it; the manager calls it on a background thread when it starts."""
    import arviz_base  # noqa: F401
    import scipy.special  # noqa: F401
    from arviz_stats.base import array_stats  # noqa: F401


def labels(blocks: Sequence[ParamBlock]) -> list[str]:
    """Row labels, the run's parameter names: `name`, `name[coord]` or `name[coord,inner]` (`ParamBlock.names`)."""
    return [n for b in blocks for n in b.names()]


def summary_table(theta: np.ndarray, blocks: Sequence[ParamBlock], ci_prob: float) -> SummaryTable:
    """The summary of draws `theta` (chains, draws, d; unconstrained) on the natural scale of `blocks`."""
    values = np.asarray(natural_values(blocks, np.asarray(theta, dtype=np.float64)), dtype=np.float64)
    d = values.shape[2]
    pct = int(ci_prob * 100)  # arviz-stats' label
    columns = ("mean", "sd", f"hdi{pct}_lb", f"hdi{pct}_ub", *COLUMNS_AFTER_HDI)
    workers = max(1, min(d, os.cpu_count() or 1, 16))
    cpu = [0.0] * d

    def row(j: int) -> list[float]:  # the column copy happens in the worker too
        t = time.thread_time()
        out = coordinate_summary(np.ascontiguousarray(values[:, :, j]), ci_prob)
        cpu[j] = time.thread_time() - t
        return out

    # numpy's sorts and FFTs release the GIL: coordinates in parallel (always in the pool, so `cpu` counts the
    # coordinates' CPU time apart from the caller's)
    with ThreadPoolExecutor(workers, thread_name_prefix="raysampler-summary") as pool:
        rows = list(pool.map(row, range(d)))
    vals = np.array(rows, dtype=np.float64).reshape(d, len(columns))
    return SummaryTable(tuple(labels(blocks)), columns, vals, values.shape[1], sum(cpu))


def coordinate_summary(x: np.ndarray, ci_prob: float) -> list[float]:
    """mean, sd, interval bounds, ess_bulk, ess_tail, r_hat, mcse_mean, mcse_sd of one coordinate's (chains, draws),
    as `arviz_stats.summary(ci_kind="hdi")` computes them: arviz-stats 0.8 takes the interval as the equal-tailed
    one (under the hdi label) and the tail ESS at its default `stats.ci_prob` quantiles; the table keeps them so.

    Work arviz-stats would repeat is done once: the mean ESS behind both MCSEs (its `_mcse_mean` and `_mcse_sd`
    formulas, applied to one `ess(method="mean")`), and for finite draws one arg-sort per rank normalisation."""
    from arviz_base import rcParams
    from arviz_stats.base import array_stats as azs

    chains, draws = x.shape
    lo, hi = (float(v) for v in np.asarray(azs.eti(x.ravel(), ci_prob)))
    ess_tail = float(azs.ess(x, method="tail", prob=rcParams["stats.ci_prob"]))
    ess_mean = float(azs.ess(x, method="mean"))
    mcse_mean = float(np.std(x, ddof=1) / np.sqrt(ess_mean))
    sims_c2 = (x - x.mean()) ** 2
    evar = sims_c2.mean()
    mcse_sd = float(np.sqrt(((sims_c2**2).mean() - evar**2) / ess_mean / evar / 4))
    if np.isfinite(x).all() and draws >= 4:
        split = np.vstack((x[:, : draws // 2], x[:, -(draws // 2) :]))  # arviz-stats' split chains
        z, ordered = _z_scale(split)
        ess_bulk = float(azs.ess(z, method="identity"))
        if chains < 2:
            r_hat = math.nan  # what arviz-stats reports for one chain
        else:
            h = ordered.size // 2  # split chains hold an even number of draws: the median is the middle pair's mean
            median = (ordered[h - 1] + ordered[h]) / 2
            folded, _ = _z_scale(np.abs(split - median))
            r_hat = max(float(azs.rhat(z, method="identity")), float(azs.rhat(folded, method="identity")))
    else:  # non-finite draws or too few: arviz-stats' own path (NaN where undefined)
        ess_bulk = float(azs.ess(x, method="bulk"))
        r_hat = float(azs.rhat(x, method="rank"))
    return [float(x.mean()), float(x.std()), lo, hi, ess_bulk, ess_tail, r_hat, mcse_mean, mcse_sd]


def _z_scale(ary: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """arviz-stats' rank normalisation (average ranks, Blom's offset 3/8, the normal quantile) in one quicksort
    arg-sort (faster than the stable sort scipy's rankdata uses: docs/performance.md, "Measurements behind choices
    in the code"), and the sorted values. Ties get their average
    rank, as scipy's `rankdata(method="average")` gives it: a run of equal values from 0-based position s, c long,
    ranks s + (c + 1) / 2 (a half-integer, exact in float64). Without ties the ranks are 1..n, whose normal scores
    depend on n alone: computed once per n (`_normal_scores`), the same numbers."""
    from scipy import special

    flat = ary.ravel()
    n = flat.size
    order = np.argsort(flat)
    ordered = flat[order]
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    z = np.empty(n, dtype=np.float64)
    if first.all():
        z[order] = _normal_scores(n)
    else:
        starts = np.flatnonzero(first)
        counts = np.diff(np.append(starts, n))
        ranks = np.repeat(starts + (counts + 1) / 2, counts)  # in sorted order
        z[order] = special.ndtri((ranks - _BLOM) / (n - 2 * _BLOM + 1))
    return z.reshape(ary.shape), ordered


_BLOM = 3 / 8


@functools.lru_cache(maxsize=16)
def _normal_scores(n: int) -> np.ndarray:
    """ndtri((r − 3/8) / (n + 1/4)) for ranks r = 1..n (read-only: shared by threads)."""
    from scipy import special

    scores = special.ndtri((np.arange(1, n + 1, dtype=np.float64) - _BLOM) / (n - 2 * _BLOM + 1))
    scores.flags.writeable = False
    return scores


@dataclass
class _Latest:
    """A running run's newest table for one ci_prob, when its computation ended and what it cost."""

    table: SummaryTable
    done_at: float  # the cache's clock
    cpu_s: float
    refreshing: bool = False


class SummaryCache:
    """Computed summary tables by (tenant, run, stored draws, ci_prob): in memory (at most `max_entries`, least
    recently used out) and, for finished runs, as JSON files in the run's directory; a running run's latest table
    per ci_prob, served until a newer one is due (see the module's docstring). `on_computed(cpu_s)` is told the CPU
    time of every computation (the service's metrics count it)."""

    def __init__(
        self,
        max_entries: int = 64,
        on_computed: Callable[[float], None] | None = None,
        cpu_share: float = RUNNING_CPU_SHARE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries, self.on_computed, self.cpu_share, self.clock = max_entries, on_computed, cpu_share, clock
        self._tables: OrderedDict[tuple[str, str, int, float], SummaryTable] = OrderedDict()
        self._locks: dict[tuple[str, str, int, float], threading.Lock] = {}
        self._latest: dict[tuple[str, str, float], _Latest] = {}
        self._lock = threading.Lock()
        self.computed = 0  # tables computed (not found in memory or on disk): what tests and benchmarks count
        self.cpu_seconds = 0.0  # their CPU time, all threads

    def get(
        self,
        tenant: str,
        run_id: str,
        draws: int,
        ci_prob: float,
        run_dir: str | os.PathLike | RunDirectory,
        finished: bool,
        compute: Callable[[], SummaryTable],
    ) -> SummaryTable:
        """The table of the first `draws` draws per chain; for a running run (`finished` False) possibly the latest
        table of fewer draws (its `draws` says how many) while a newer one is not yet due or is being computed."""
        if not finished:
            latest = self._running(tenant, run_id, draws, ci_prob, compute)
            if latest is not None:
                return latest
        key = (tenant, run_id, draws, ci_prob)
        with self._lock:
            table = self._hit(key)
            if table is not None:
                return table
            key_lock = self._locks.setdefault(key, threading.Lock())
        with key_lock:  # one computation per key; the others wait for it, then find it
            with self._lock:
                table = self._hit(key)
            if table is not None:
                return table
            directory, name = as_run_directory(run_dir), f"{SUMMARY_FILE_PREFIX}{draws}-{ci_prob!r}.json"
            table = _load(directory, name, draws) if finished else None
            if table is None:
                table = self._compute(compute, draws)
                if finished:
                    _save(directory, name, table)
            with self._lock:
                if not finished:
                    self._latest[(tenant, run_id, ci_prob)] = _Latest(table, self.clock(), table.cpu_s)
                self._tables[key] = table
                while len(self._tables) > self.max_entries:
                    self._tables.popitem(last=False)
                self._locks.pop(key, None)
            return table

    def _compute(self, compute: Callable[[], SummaryTable], draws: int) -> SummaryTable:
        t = time.thread_time()
        table = compute()
        cpu = time.thread_time() - t + table.cpu_s
        table = replace(table, draws=draws, cpu_s=cpu)
        with self._lock:
            self.computed += 1
            self.cpu_seconds += cpu
        if self.on_computed is not None:
            self.on_computed(cpu)
        return table

    def _running(
        self, tenant: str, run_id: str, draws: int, ci_prob: float, compute: Callable[[], SummaryTable]
    ) -> SummaryTable | None:
        """A running run's latest table unless there is none yet or it summarises more draws than asked for (a
        resumed run's stored draws may have been cut back); starts the next one in the background when due."""
        with self._lock:
            latest = self._latest.get((tenant, run_id, ci_prob))
            if latest is None or latest.table.draws > draws:
                return None
            predicted_cpu_s = latest.cpu_s * draws / max(latest.table.draws, 1)  # the cost grows with the draws
            due = latest.table.draws < draws and self.clock() - latest.done_at >= predicted_cpu_s / self.cpu_share
            if due and not latest.refreshing:
                latest.refreshing = True
                threading.Thread(
                    target=self._refresh,
                    args=(tenant, run_id, draws, ci_prob, compute),
                    name="raysampler-summary-refresh",
                    daemon=True,
                ).start()
            return latest.table

    def _refresh(
        self, tenant: str, run_id: str, draws: int, ci_prob: float, compute: Callable[[], SummaryTable]
    ) -> None:
        try:
            table = self._compute(compute, draws)
        except Exception:  # the run was deleted or resumed meanwhile: the next request computes again
            log.exception("summary of %s/%s failed", tenant, run_id)
            with self._lock:
                self._latest.pop((tenant, run_id, ci_prob), None)
            return
        with self._lock:
            if (tenant, run_id, ci_prob) in self._latest:  # not invalidated meanwhile
                self._latest[(tenant, run_id, ci_prob)] = _Latest(table, self.clock(), table.cpu_s)

    def _hit(self, key: tuple[str, str, int, float]) -> SummaryTable | None:
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
        return table

    def invalidate(self, tenant: str, run_id: str, run_dir: str | os.PathLike | RunDirectory | None = None) -> None:
        """Forget a run's tables (resume, delete), in memory and on disk."""
        with self._lock:
            for key in [k for k in self._tables if k[0] == tenant and k[1] == run_id]:
                del self._tables[key]
            for lkey in [k for k in self._latest if k[0] == tenant and k[1] == run_id]:
                del self._latest[lkey]
        if run_dir is not None:
            as_run_directory(run_dir).remove_files(SUMMARY_FILE_PREFIX)

    def forget_running(self, tenant: str, run_id: str) -> None:
        """Drop a run's latest running tables (it has ended: its tables are keyed by its final draws from now)."""
        with self._lock:
            for lkey in [k for k in self._latest if k[0] == tenant and k[1] == run_id]:
                del self._latest[lkey]


def _load(directory: RunDirectory, name: str, draws: int) -> SummaryTable | None:
    try:
        return SummaryTable.from_json(json.loads(directory.read_file(name)), draws)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a torn or foreign file: compute again
        log.warning("ignoring summary file %s in %s: %s", name, directory.location, exc)
        return None


def _save(directory: RunDirectory, name: str, table: SummaryTable) -> None:
    """Store the table beside the run's draws (written whole: a reader never sees half a table); not for a run
    whose directory is gone (deleted meanwhile)."""
    try:
        if directory.storage.present():
            directory.write_file(name, json.dumps(table.to_json()).encode())
    except OSError as exc:
        log.warning("cannot store summary %s in %s: %s", name, directory.location, exc)
