"""Results of a run read back from its durable draws: an engine `Result`, the posterior summary, the ArviZ export."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np

from ..diagnostics import convergence_fraction
from ..models.contract import ParamBlock, natural_coordinate
from ..result import Result
from ..wire import RunStatus
from .drawfiles import DrawFiles
from .errors import NotFound, StateConflict
from .records import RunRecord
from .schemas import DiagnosticsInfo, Progress, RunSpec, RunSummary, Trace
from .summaries import SummaryCache, SummaryTable, summary_table

MIN_SUMMARY_DRAWS = 4  # per chain: R-hat and ESS need a few draws


def progress_fraction(
    spec: RunSpec, status: RunStatus, rounds_done: int, rounds_total: int, diagnostics: DiagnosticsInfo | None
) -> tuple[float, str]:
    """(fraction 0..1, basis): rounds against their total, or for num_rounds "auto" how close the last convergence
    check was to the targets (`convergence_fraction`); a SUCCEEDED run is 1."""
    auto = spec.num_rounds == "auto"
    basis = "convergence" if auto else "rounds"
    if status == RunStatus.SUCCEEDED:
        return 1.0, basis
    if not auto:
        return (min(1.0, rounds_done / rounds_total) if rounds_total else 0.0), basis
    if diagnostics is None or diagnostics.min_ess_bulk is None or diagnostics.rule_rhat is None:
        return 0.0, basis
    return convergence_fraction(diagnostics.min_ess_bulk, diagnostics.rule_rhat, spec.target_ess, spec.max_rhat), basis


def progress(rec: RunRecord) -> Progress:
    """The run's progress as GET /v1/runs/{id} shows it."""
    fraction, basis = progress_fraction(rec.spec, rec.status, rec.rounds_done, rec.rounds_total, rec.diagnostics)
    return Progress(
        rounds_done=rec.rounds_done,
        rounds_total=rec.rounds_total,
        draws_stored=rec.draws_stored,
        draws_total=rec.draws_total,
        fraction=fraction,
        basis=basis,  # type: ignore[arg-type]
    )


def summary_of(rec: RunRecord, files: DrawFiles, ci_prob: float, cache: SummaryCache | None = None) -> SummaryTable:
    """The summary table of the run's stored draws (through `cache` when given)."""

    def compute() -> SummaryTable:
        theta = files.read(rec.tenant, rec.id, 0, rec.draws_stored).transpose(1, 0, 2)
        return summary_table(theta, stored_result_blocks(rec), ci_prob)

    if cache is None:
        return compute()
    directory = files.directory(rec.tenant, rec.id)
    return cache.get(rec.tenant, rec.id, rec.draws_stored, ci_prob, directory, rec.status.is_terminal, compute)


def stored_result(rec: RunRecord, files: DrawFiles) -> Result:
    """The run's durable draws so far as an engine Result (summary, ArviZ export)."""
    n = rec.draws_stored
    theta = files.read(rec.tenant, rec.id, 0, n) if n else np.empty((0, rec.chains, rec.dim or 0))
    stats = {k: v.T for k, v in files.read_stats(rec.tenant, rec.id, n).items()} if n else {}
    return Result(
        np.ascontiguousarray(theta.transpose(1, 0, 2)),
        list(rec.param_names or []),
        stats,
        algorithm=rec.spec.algorithm.name,
        executor="service",
        layout=tuple(rec.param_blocks or ()),
    )


def summary(rec: RunRecord, files: DrawFiles, ci_prob: float, cache: SummaryCache | None = None) -> RunSummary:
    """mean, sd, HDI, ESS bulk/tail, R-hat and MCSE per coordinate of the stored draws (non-finite → None); with a
    `cache`, computed once per (run, stored draws, ci_prob) and, for a finished run, kept next to its draws; for a
    running run, the cache's latest table (`draws_per_chain` says how many draws it summarises)."""
    if rec.draws_stored < MIN_SUMMARY_DRAWS:
        raise StateConflict(
            f"run {rec.id} has {rec.draws_stored} draws per chain stored; a summary needs {MIN_SUMMARY_DRAWS}"
        )

    table = summary_of(rec, files, ci_prob, cache)
    rows: list[dict[str, str | float | None]] = [
        {"param": label} | {c: (float(v) if math.isfinite(v) else None) for c, v in zip(table.columns, row)}
        for label, row in zip(table.labels, table.values.tolist())
    ]
    return RunSummary(
        run_id=rec.id,
        status=rec.status,
        draws_per_chain=table.draws,
        chains=rec.chains,
        ci_prob=ci_prob,
        columns=list(table.columns),
        rows=rows,
    )


def stored_result_blocks(rec: RunRecord) -> tuple[ParamBlock, ...]:
    """The run's parameter blocks (one `theta` block of its named coordinates for a run without a layout)."""
    if rec.param_blocks:
        return tuple(rec.param_blocks)
    return Result(
        np.empty((rec.chains, 0, rec.dim or 0)), list(rec.param_names or []), {}, algorithm=rec.spec.algorithm.name
    ).param_blocks


def trace(rec: RunRecord, files: DrawFiles, param: int, max_points: int, last: int | None) -> Trace:
    """Coordinate `param` of the stored draws (the last `last` draws, or all), thinned evenly to at most
    `max_points` per chain, on its natural scale. A coordinate the run does not have (yet) is not found (404): the
    request is well formed, the run has no such parameter."""
    names = list(rec.param_names or [])
    if param >= len(names):
        raise NotFound(
            f"run {rec.id} has no parameter {param} (it has {len(names)}: param is a position in param_names)"
        )
    n = rec.draws_stored
    lo = 0 if last is None else max(0, n - last)
    step = max(1, math.ceil((n - lo) / max_points))
    column = natural_column(rec, files, lo, n, step, param) if n > lo else np.empty((0, rec.chains))
    values = [[float(v) if math.isfinite(v) else None for v in chain] for chain in column.T.tolist()]
    if not values:
        values = [[] for _ in range(rec.chains)]
    return Trace(
        run_id=rec.id,
        param=param,
        name=names[param],
        draws_stored=n,
        step=step,
        index=list(range(lo, lo + step * column.shape[0], step)),
        values=values,
    )


def natural_column(rec: RunRecord, files: DrawFiles, lo: int, hi: int, step: int, param: int) -> np.ndarray:
    """Stored draws lo:hi:step of θ's coordinate `param` on its natural scale, (m, chains): that column alone, or
    with the columns its reported value depends on (a correlation block's, a factor's scales for its effects)."""
    return natural_coordinate(
        rec.param_blocks or (), param, lambda j: files.read_column(rec.tenant, rec.id, lo, hi, step, j)
    )


def netcdf_export(rec: RunRecord, result: Result, directory: Path) -> Path:
    """The run's `result` (its stored draws) as an ArviZ DataTree in a NetCDF-4 file under `directory` (with the
    log_likelihood and observed_data groups when the result carries rows that may move); the caller removes it."""
    if rec.draws_stored < 1:
        raise StateConflict(f"run {rec.id} has no stored draws yet")
    fd, name = tempfile.mkstemp(suffix=".nc", dir=directory)
    os.close(fd)
    path = Path(name)
    try:
        result.to_arviz().to_netcdf(path, engine="h5netcdf")
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path
