"""Posterior summaries of stored draws that scale: the arviz-stats summary table (mean, sd, HDI, ess_bulk, ess_tail,
r_hat, mcse_mean, mcse_sd) computed per coordinate on (chains, draws) float64 arrays with arviz-stats' array
functions, coordinates in parallel threads; and a cache of computed tables.

The rank normalisation behind the bulk ESS and the rank R-hat (Vehtari et al. 2021) is done once per coordinate and
shared by both, with a quicksort arg-sort (exact: ties fall back to scipy's average ranks, what arviz-stats uses);
everything else is arviz-stats' own array code, so the table equals `arviz_stats.summary` (tests compare them).

The cache keys a table by (tenant, run, stored draws per chain, ci_prob): a run's stored draws below `draws_stored`
never change, so a key's table never goes stale. Tables are kept in memory (least recently used first out, bounded)
and, for a finished run, written as JSON next to its draws, so they outlive a restart; a resume or a delete drops
them. Concurrent requests for one key wait for one computation (a lock per key).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..models.base import ParamBlock, natural_values

log = logging.getLogger("raysampler.service")

COLUMNS_AFTER_HDI = ("ess_bulk", "ess_tail", "r_hat", "mcse_mean", "mcse_sd")
SUMMARY_FILE_PREFIX = "summary-"  # <run dir>/summary-<draws>-<ci_prob>.json


@dataclass(frozen=True)
class SummaryTable:
    """Row labels (`beta[age]`, `sigma`, …), column names, and one row of values per label (NaN where undefined)."""

    labels: tuple[str, ...]
    columns: tuple[str, ...]
    values: np.ndarray  # (rows, columns) float64

    def to_json(self) -> dict[str, object]:
        return {
            "labels": list(self.labels),
            "columns": list(self.columns),
            "values": [[v if math.isfinite(v) else None for v in row] for row in self.values.tolist()],
        }

    @classmethod
    def from_json(cls, obj: dict) -> SummaryTable:
        vals = np.array([[np.nan if v is None else v for v in row] for row in obj["values"]], dtype=np.float64)
        return cls(tuple(obj["labels"]), tuple(obj["columns"]), vals.reshape(len(obj["labels"]), len(obj["columns"])))


def labels(blocks: Sequence[ParamBlock]) -> list[str]:
    """Row labels as arviz-stats names them: `name` for a scalar block, `name[coord]` per coordinate otherwise."""
    out: list[str] = []
    for b in blocks:
        out += [b.name] if b.dim is None else [f"{b.name}[{c}]" for c in b.coords()]
    return out


def summary_table(theta: np.ndarray, blocks: Sequence[ParamBlock], ci_prob: float) -> SummaryTable:
    """The summary of draws `theta` (chains, draws, d; unconstrained) on the natural scale of `blocks`."""
    values = np.asarray(natural_values(blocks, np.asarray(theta, dtype=np.float64)), dtype=np.float64)
    d = values.shape[2]
    pct = int(ci_prob * 100)  # arviz-stats' label
    columns = ("mean", "sd", f"hdi{pct}_lb", f"hdi{pct}_ub", *COLUMNS_AFTER_HDI)
    workers = max(1, min(d, os.cpu_count() or 1, 16))
    columns_of = [np.ascontiguousarray(values[:, :, j]) for j in range(d)]
    del values
    if workers == 1:
        rows = [coordinate_summary(x, ci_prob) for x in columns_of]
    else:  # numpy's sorts and FFTs release the GIL: coordinates in parallel
        with ThreadPoolExecutor(workers, thread_name_prefix="raysampler-summary") as pool:
            rows = list(pool.map(lambda x: coordinate_summary(x, ci_prob), columns_of))
    return SummaryTable(tuple(labels(blocks)), columns, np.array(rows, dtype=np.float64).reshape(d, len(columns)))


def coordinate_summary(x: np.ndarray, ci_prob: float) -> list[float]:
    """mean, sd, interval bounds, ess_bulk, ess_tail, r_hat, mcse_mean, mcse_sd of one coordinate's (chains, draws),
    as `arviz_stats.summary(ci_kind="hdi")` computes them: arviz-stats 0.8 takes the interval as the equal-tailed
    one (under the hdi label) and the tail ESS at its default `stats.ci_prob` quantiles; the table keeps them so."""
    from arviz_base import rcParams
    from arviz_stats.base import array_stats as azs

    chains, draws = x.shape
    lo, hi = (float(v) for v in np.asarray(azs.eti(x.ravel(), ci_prob)))
    ess_tail = float(azs.ess(x, method="tail", prob=rcParams["stats.ci_prob"]))
    mcse_mean = float(azs.mcse(x, method="mean"))
    mcse_sd = float(azs.mcse(x, method="sd"))
    if np.isfinite(x).all() and draws >= 4:
        split = np.vstack((x[:, : draws // 2], x[:, -(draws // 2) :]))  # arviz-stats' split chains
        z = _z_scale(split)
        ess_bulk = float(azs.ess(z, method="identity"))
        if chains < 2:
            r_hat = math.nan  # what arviz-stats reports for one chain
        else:
            folded = _z_scale(np.abs(split - np.median(split)))
            r_hat = max(float(azs.rhat(z, method="identity")), float(azs.rhat(folded, method="identity")))
    else:  # non-finite draws or too few: arviz-stats' own path (NaN where undefined)
        ess_bulk = float(azs.ess(x, method="bulk"))
        r_hat = float(azs.rhat(x, method="rank"))
    return [float(x.mean()), float(x.std()), lo, hi, ess_bulk, ess_tail, r_hat, mcse_mean, mcse_sd]


def _z_scale(ary: np.ndarray) -> np.ndarray:
    """arviz-stats' rank normalisation (average ranks, Blom's offset 3/8, the normal quantile), in one arg-sort."""
    from scipy import special, stats

    flat = ary.ravel()
    n = flat.size
    order = np.argsort(flat)  # quicksort: 4× faster than the stable sort scipy's rankdata uses
    ordered = flat[order]
    if np.any(ordered[1:] == ordered[:-1]):
        ranks = stats.rankdata(flat, method="average")  # ties get their average rank
    else:
        ranks = np.empty(n, dtype=np.float64)
        ranks[order] = np.arange(1, n + 1, dtype=np.float64)
    c = 3 / 8
    return special.ndtri((ranks - c) / (n - 2 * c + 1)).reshape(ary.shape)


class SummaryCache:
    """Computed summary tables by (tenant, run, stored draws, ci_prob): in memory (at most `max_entries`, least
    recently used out) and, for finished runs, as JSON files in the run's directory."""

    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self._tables: OrderedDict[tuple[str, str, int, float], SummaryTable] = OrderedDict()
        self._locks: dict[tuple[str, str, int, float], threading.Lock] = {}
        self._lock = threading.Lock()
        self.computed = 0  # tables computed (not found in memory or on disk): what tests and benchmarks count

    def get(
        self,
        tenant: str,
        run_id: str,
        draws: int,
        ci_prob: float,
        run_dir: Path,
        finished: bool,
        compute: Callable[[], SummaryTable],
    ) -> SummaryTable:
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
            path = run_dir / f"{SUMMARY_FILE_PREFIX}{draws}-{ci_prob!r}.json"
            table = _load(path) if finished else None
            if table is None:
                table = compute()
                self.computed += 1
                if finished:
                    _save(path, table)
            with self._lock:
                self._tables[key] = table
                while len(self._tables) > self.max_entries:
                    self._tables.popitem(last=False)
                self._locks.pop(key, None)
            return table

    def _hit(self, key: tuple[str, str, int, float]) -> SummaryTable | None:
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
        return table

    def invalidate(self, tenant: str, run_id: str, run_dir: Path | None = None) -> None:
        """Forget a run's tables (resume, delete), in memory and on disk."""
        with self._lock:
            for key in [k for k in self._tables if k[0] == tenant and k[1] == run_id]:
                del self._tables[key]
        if run_dir is not None and run_dir.is_dir():
            for path in run_dir.glob(f"{SUMMARY_FILE_PREFIX}*.json"):
                path.unlink(missing_ok=True)


def _load(path: Path) -> SummaryTable | None:
    try:
        return SummaryTable.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a torn or foreign file: compute again
        log.warning("ignoring summary file %s: %s", path, exc)
        return None


def _save(path: Path, table: SummaryTable) -> None:
    """Write atomically (temporary file, then rename), so a reader never sees half a table."""
    if not path.parent.is_dir():
        return
    tmp = path.with_name(path.name + f".tmp{os.getpid()}.{threading.get_ident()}")
    try:
        tmp.write_text(json.dumps(table.to_json()))
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot store summary %s: %s", path, exc)
        tmp.unlink(missing_ok=True)
