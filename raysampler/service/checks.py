"""Checks of a stored run over REST: predictions, held-out metrics, PSIS-LOO, comparison and the ArviZ export with
the pointwise groups. A run is read back as an engine `Result` with its model bound again (from the DataSpec stored at
setup) and its shards rebuilt from its spec; the per-shard work is the engine's (`raysampler.evaluation`), so site
shards are read only on their sites. Engine errors become FieldError naming the request's field."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .. import evaluation
from ..errors import ArgumentError, WorkerFailed
from ..evaluation import DrawsArg
from ..grants import DataGrants
from ..models.contract import Model
from ..predictive import PpcHistogram, PpcStat, PpcStatGrouped
from ..result import Result
from ..shards import DataTable, ShardSet, label_code, shard
from .drawfiles import DrawFiles
from .errors import FieldError, NotFound, StateConflict
from .records import RunRecord
from .results import stored_result
from .schemas import (
    BayesR2Info,
    Comparison,
    ComparisonRowInfo,
    DataRef,
    EffectsTable,
    EvaluateRequest,
    Evaluation,
    LooInfo,
    MatchedRowInfo,
    PpcDensityInfo,
    PpcHistogramInfo,
    PpcInfo,
    PpcStatGroupedInfo,
    PpcStatInfo,
    Prediction,
    PredictRequest,
    ReliabilityBinInfo,
    RowRefInfo,
    WarnedRowInfo,
)
from .specs import SpecError, build, load_data_ref, model_table, site_shards
from .store import RecordStore


@dataclasses.dataclass(frozen=True)
class Context:
    """What a check needs of the service: the store, the draw files, the tenant's grants and the executor."""

    store: RecordStore
    files: DrawFiles
    grants: DataGrants
    executor: str


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def bound_model(rec: RunRecord) -> Model:
    """The run's model bound to its data as at setup; StateConflict before the run has set up or stored a draw."""
    if rec.draws_stored < 1 or rec.data_spec is None:
        raise StateConflict(f"run {rec.id} has no draws yet ({rec.status.value}): checks need posterior draws")
    data_spec = rec.data_spec
    response = rec.spec.response_column()
    columns = data_spec.columns
    stored_before = rec.spec.model.formula is not None and rec.spec.data.shards is None
    if stored_before and response is not None and columns is not None and response not in columns:
        # a formula run stored before a data set's target rejoined its columns (`specs.model_table`) read its
        # response from the shards' y: that y is now the last column, as the shards are rebuilt
        data_spec = dataclasses.replace(data_spec, n_features=data_spec.n_features + 1, columns=(*columns, response))
    try:
        return rec.spec.model.engine_model().bind(data_spec)
    except ArgumentError as exc:
        raise StateConflict(f"run {rec.id}'s model cannot be bound to its data as stored: {exc.message}") from None


def fitted(rec: RunRecord, ctx: Context, with_data: bool = True) -> Result:
    """The run's stored draws as a Result carrying its bound model, spec and seed, and (`with_data`) its shards:
    rebuilt from its spec (site shards by path: never opened here). StateConflict if its data cannot be had now."""
    model = bound_model(rec)
    data: ShardSet | None = None
    if with_data:
        try:
            if rec.spec.data.shards is not None:
                data = shard(site_shards(rec.spec.data, rec.tenant, ctx.grants, rec.spec.model.formula is not None))
            else:
                data = build(rec.spec, rec.tenant, ctx.store, ctx.executor, ctx.grants).shards
        except FieldError as exc:
            raise StateConflict(f"run {rec.id}'s data cannot be used now: {exc}") from None
    res = stored_result(rec, ctx.files)
    return dataclasses.replace(
        res, model=model, data=data, spec=rec.spec.model_dump_json(), seed=rec.spec.seed, executor=ctx.executor
    )


def _field(exc: ArgumentError, rename: dict[Any, tuple[str | int, ...]]) -> FieldError | StateConflict:
    """An engine argument error as the request field it came from (`rename` maps the engine's first path part); one
    about the run itself as a StateConflict."""
    head = exc.path[0] if exc.path else None
    if head == "result":
        return StateConflict(exc.message)
    loc = rename.get(head, (head,) if head is not None else ())
    return FieldError((*loc, *exc.path[1:]), exc.message)


# --- predictions -------------------------------------------------------------------------------------------------


def known_dataset(dataset_id: str, loc: tuple[str | int, ...], tenant: str, ctx: Context) -> None:
    """NotFound (404) naming the body field `loc` when the tenant has no uploaded data set `dataset_id` (another
    tenant's is never found), as an unknown id in a path is."""
    if ctx.store.get_dataset(tenant, dataset_id) is None:
        where = ".".join(str(p) for p in loc)
        raise NotFound(f"{where}: no data set {dataset_id!r} (upload it with POST /v1/datasets)")


def predict(rec: RunRecord, req: PredictRequest, ctx: Context) -> Prediction:
    """The posterior predictive at the request's rows (inline or an uploaded data set of the tenant), read by column
    name where they have names (`columns`, or the data set's own): the engine's `evaluation.predict`."""
    model = bound_model(rec)
    X: Any
    if req.rows is not None:
        widths = {len(r) for r in req.rows}
        if len(widths) != 1:
            raise FieldError(("rows",), "every row must have the same number of values")
        if req.columns is not None:
            (width,) = widths
            if len(req.columns) != width:
                raise FieldError(
                    ("columns",), f"columns names {len(req.columns)} columns but each row has {width} values"
                )
            twice = sorted({c for c in req.columns if req.columns.count(c) > 1})
            if twice:
                raise FieldError(("columns",), f"columns names {twice} more than once")
            X = {c: np.array([r[j] for r in req.rows], dtype=object) for j, c in enumerate(req.columns)}
        else:
            text = any(isinstance(v, str) for r in req.rows for v in r)  # group labels: read by the model's columns
            X = np.array(req.rows, dtype=object) if text else np.asarray(req.rows, dtype=np.float64)
        where: tuple[str | int, ...] = ("rows",)
        named_at: tuple[str | int, ...] = ("columns",) if req.columns is not None else ("rows",)
        n_rows = len(req.rows)
    else:
        assert req.dataset_id is not None
        known_dataset(req.dataset_id, ("dataset_id",), rec.tenant, ctx)
        try:
            table = load_data_ref(DataRef(dataset_id=req.dataset_id), rec.tenant, ctx.store)
        except SpecError as exc:
            raise FieldError(("dataset_id",), str(exc)) from None
        X = table.X if table.columns is None else table_columns(table)
        where = named_at = ("dataset_id",)
        n_rows = int(table.X.shape[0])
    res = dataclasses.replace(stored_result(rec, ctx.files), model=model)
    try:
        values = evaluation.predict(
            res,
            X,
            req.kind,
            draws=req.draws,
            prob=req.prob,
            seed=req.seed,
            re_formula=req.re_formula,
            allow_new_levels=req.allow_new_levels,
        )
    except ArgumentError as exc:
        if exc.path[:2] == ("X", "columns"):  # a column missing or named twice: the names are at fault
            raise FieldError(named_at, exc.message) from None
        raise _field(exc, {"X": where}) from None
    used = evaluation.thin_draws(res.draws, req.draws)
    return Prediction(
        run_id=rec.id,
        kind=req.kind,
        n_rows=n_rows,
        draws_used=int(used.shape[0] * used.shape[1]),
        values=_jsonable(values),
    )


def table_columns(table: DataTable) -> dict[str, np.ndarray]:
    """A data set's X by column name, its text columns as their labels (X holds their `label_code`s): new rows for
    a prediction, read by name like inline rows with `columns`."""
    assert table.columns is not None
    text = {col: {label_code(v): v for v in labels} for col, labels in (table.levels or {}).items()}
    out: dict[str, np.ndarray] = {}
    for j, col in enumerate(table.columns):
        values = table.X[:, j]
        if col in text:
            named = text[col]
            out[col] = np.array([named.get(v, v) for v in values.tolist()], dtype=object)
        else:
            out[col] = values
    return out


#: the kinds whose values are per draw and row: (draws, rows, ...)
_PER_DRAW = ("draws", "epred", "linpred", "predict")


def _jsonable(values: np.ndarray) -> list[Any]:
    out: list[Any] = np.where(np.isfinite(values), values, np.nan).tolist()
    return out


def prediction_lines(pred: Prediction) -> Iterator[bytes]:
    """A prediction as NDJSON: a header line, then one line per row ({"row": i, "value": ...}; for the kinds per
    draw, `_PER_DRAW`, the row's draws)."""
    import json

    head = {"run_id": pred.run_id, "kind": pred.kind, "n_rows": pred.n_rows, "draws_used": pred.draws_used}
    yield (json.dumps(head) + "\n").encode()
    rows: Sequence[Any] = np.moveaxis(np.asarray(pred.values), 0, 1).tolist() if pred.kind in _PER_DRAW else pred.values
    for i, v in enumerate(rows):
        yield (json.dumps({"row": i, "value": v}) + "\n").encode()


# --- held-out metrics --------------------------------------------------------------------------------------------


def heldout_shards(data: DataRef, rec: RunRecord, ctx: Context) -> ShardSet:
    """The held-out rows a request names, as shards: a built-in or uploaded data set split like the run's data, or
    site shard files (read only on their sites)."""
    if data.shards is not None:
        if ctx.executor != "ray":
            raise FieldError(("data", "shards"), "shards on sites need the service to run on Ray (executor 'ray')")
        return shard(site_shards(data, rec.tenant, ctx.grants, rec.spec.model.formula is not None))
    if data.dataset_id is not None:
        known_dataset(data.dataset_id, ("data", "dataset_id"), rec.tenant, ctx)
    try:
        table = model_table(load_data_ref(data, rec.tenant, ctx.store), rec.spec.model.engine_model(), data)
    except SpecError as exc:
        raise FieldError(exc.loc, str(exc)) from None
    parts = max(1, min(rec.spec.num_shards, table.X.shape[0]))
    return shard(table.X, table.y, num_shards=parts, columns=table.columns, levels=table.levels)


def evaluate(rec: RunRecord, req: EvaluateRequest, ctx: Context) -> Evaluation:
    """Held-out metrics of the run's posterior predictive, computed where the rows are."""
    res = fitted(rec, ctx, with_data=False)
    shards = heldout_shards(req.data, rec, ctx)
    try:
        m = evaluation.evaluate(res, shards, draws=req.draws, bins=req.bins, seed=req.seed)
    except ArgumentError as exc:
        raise _field(exc, {"shards": ("data", "shards")}) from None
    except WorkerFailed as exc:
        f = exc.failure
        raise FieldError(("data", "shards", f.shard if f.shard is not None else 0), f.message) from None
    used = evaluation.thin_draws(res.draws, req.draws)
    n_used = int(used.shape[0] * used.shape[1])
    if isinstance(m, evaluation.ClassificationMetrics):
        return Evaluation(
            run_id=rec.id,
            kind="classification",
            n=m.n,
            draws_used=n_used,
            nll=m.nll,
            accuracy=m.accuracy,
            brier=m.brier,
            ece=m.ece,
            reliability=[ReliabilityBinInfo(**dataclasses.asdict(b)) for b in m.reliability],
        )
    return Evaluation(
        run_id=rec.id,
        kind="regression",
        n=m.n,
        draws_used=n_used,
        nll=m.nll,
        rmse=m.rmse,
        crps=m.crps,
        coverage_50=m.coverage_50,
        coverage_90=m.coverage_90,
    )


# --- PSIS-LOO and comparison ---------------------------------------------------------------------------------------


def loo(rec: RunRecord, draws: DrawsArg, ctx: Context, moment_match: bool = False) -> LooInfo:
    """PSIS-LOO of the run on the rows it was fitted on, computed where they are (moment matching of its rows with
    k ≥ 0.7 when asked)."""
    res = fitted(rec, ctx)
    try:
        lo = evaluation.loo(res, draws=draws, moment_match=moment_match)
    except ArgumentError as exc:
        raise _field(exc, {"draws": ("query", "draws"), "moment_match": ("query", "moment_match")}) from None
    except WorkerFailed as exc:
        raise StateConflict(f"run {rec.id}'s data could not be read: {exc.failure.message}") from None
    return LooInfo(
        run_id=rec.id,
        elpd=_finite(lo.elpd),
        se=_finite(lo.se),
        p_loo=_finite(lo.p),
        n_data_points=int(lo.n_data_points),
        n_samples=int(lo.n_samples),
        good_k=float(lo.good_k),
        warning=bool(lo.warning),
        k_flat=int(lo.k_flat),
        k_ok=int(lo.k_ok),
        k_high=int(lo.k_high),
        flat_span=float(lo.flat_span),
        high_k_rows=[RowRefInfo(**dataclasses.asdict(r)) for r in lo.high_k_rows],
        moment_matched=None if lo.moment_matched is None else [_matched(m) for m in lo.moment_matched],
        warning_rows=[
            WarnedRowInfo(row=RowRefInfo(**dataclasses.asdict(h.ref)), k=_finite(h.k)) for h in lo.warning_rows
        ],
    )


def bayes_r2(rec: RunRecord, draws: DrawsArg, ctx: Context) -> BayesR2Info:
    """The run's Bayesian R², computed where its rows are (`raysampler.evaluation.r2`)."""
    from ..evaluation.r2 import bayes_r2_draws

    res = fitted(rec, ctx)
    try:
        values = bayes_r2_draws(res, draws=draws)
    except ArgumentError as exc:
        raise _field(exc, {"draws": ("query", "draws")}) from None
    except WorkerFailed as exc:
        raise StateConflict(f"run {rec.id}'s data could not be read: {exc.failure.message}") from None
    except ValueError as exc:  # a model without one real expected response per row
        raise StateConflict(f"run {rec.id}: {exc}") from None
    lo, hi = np.quantile(values, (0.025, 0.975))
    return BayesR2Info(
        run_id=rec.id,
        n_samples=int(values.size),
        estimate=_finite(float(values.mean())),
        est_error=_finite(float(values.std(ddof=1))) if values.size > 1 else None,
        lower=_finite(float(lo)),
        upper=_finite(float(hi)),
    )


def _matched(m: evaluation.MatchedRow) -> MatchedRowInfo:
    return MatchedRowInfo(
        row=RowRefInfo(**dataclasses.asdict(m.ref)),
        k_psis=_finite(m.k_psis),
        k_after=_finite(m.k_after),
        elpd_psis=_finite(m.elpd_psis),
        elpd_after=_finite(m.elpd_after),
        mcse_after=_finite(m.mcse_after),
        maps=m.maps,
        used=m.used,
    )


def ppc(
    rec: RunRecord,
    kind: str,
    stat: str,
    draws: DrawsArg | None,
    bins: int | None,
    seed: int,
    ctx: Context,
    group: str | None = None,
) -> PpcInfo:
    """A posterior predictive check on the rows the run was fitted on: replicated data drawn at the shards, only
    bin counts and sums back (`evaluation.pp_check`)."""
    res = fitted(rec, ctx)
    try:
        check = evaluation.pp_check(res, kind, stat, draws=draws, bins=bins, seed=seed, group=group)  # type: ignore[arg-type]
    except ArgumentError as exc:
        raise _field(exc, {k: ("query", k) for k in ("kind", "stat", "draws", "bins", "seed", "group")}) from None
    except WorkerFailed as exc:
        raise StateConflict(f"run {rec.id}'s data could not be read: {exc.failure.message}") from None
    if isinstance(check, PpcStatGrouped):
        return PpcStatGroupedInfo(
            run_id=rec.id,
            kind="stat_grouped",
            response=check.response,
            stat=check.stat,  # type: ignore[arg-type]
            group=check.group,
            labels=list(check.labels),
            n=[int(v) for v in check.n],
            observed=[_finite(float(v)) for v in check.observed],
            replicated=[[_finite(float(v)) for v in row] for row in check.replicated],
            p_values=[float(v) for v in check.p_values],
        )
    if isinstance(check, PpcStat):
        return PpcStatInfo(
            run_id=rec.id,
            kind="stat",
            n=check.n,
            response=check.response,
            stat=check.stat,  # type: ignore[arg-type]
            observed=_finite(check.observed),
            replicated=[_finite(float(v)) for v in check.replicated],
            p_value=check.p_value,
        )
    if isinstance(check, PpcHistogram):
        return PpcHistogramInfo(
            run_id=rec.id,
            kind="hist",
            n=check.n,
            response=check.response,
            edges=check.edges.tolist(),
            observed=check.observed.tolist(),
            replicated=check.replicated.tolist(),
        )
    return PpcDensityInfo(
        run_id=rec.id,
        kind="dens",
        n=check.n,
        response=check.response,
        grid=check.grid.tolist(),
        bandwidth=check.bandwidth.tolist(),
        observed=check.observed.tolist(),
        replicated=check.replicated.tolist(),
    )


def compare(
    recs: Sequence[RunRecord], draws: DrawsArg, ctx: Context, method: evaluation.WeightMethod = "pseudo-bma"
) -> Comparison:
    """Rank runs fitted on the same rows by PSIS-LOO elpd (paired SE of the differences, computed at the shards),
    weighed by pseudo-BMA or stacking."""
    results = {}
    for i, rec in enumerate(recs):
        try:
            results[rec.id] = fitted(rec, ctx)
        except StateConflict as exc:
            raise FieldError(("runs", i), str(exc)) from None
    try:
        comp = evaluation.compare(results, draws=draws, method=method)
    except ArgumentError as exc:
        if exc.path[:1] == ("results",) and len(exc.path) > 1:
            which = exc.path[1]
            index = which if isinstance(which, int) else [r.id for r in recs].index(str(which))
            raise FieldError(("runs", index), exc.message) from None
        raise _field(exc, {}) from None
    return Comparison(
        rows=[
            ComparisonRowInfo(
                run_id=r.name,
                rank=r.rank,
                elpd=_finite(r.elpd),
                se=_finite(r.se),
                p_loo=_finite(r.p),
                elpd_diff=_finite(r.elpd_diff),
                dse=_finite(r.dse),
                weight=_finite(r.weight),
                warning=r.warning,
            )
            for r in comp.rows
        ],
        method=comp.method,
    )


def export_result(rec: RunRecord, ctx: Context) -> Result:
    """The run as the NetCDF export writes it: with its model and shards when set up (the pointwise groups then come
    with it where the rows may move), else its draws alone; spec and seed in the attributes."""
    if rec.data_spec is None:
        res = stored_result(rec, ctx.files)
        return dataclasses.replace(res, spec=rec.spec.model_dump_json(), seed=rec.spec.seed)
    try:
        return fitted(rec, ctx)
    except StateConflict:
        res = stored_result(rec, ctx.files)
        return dataclasses.replace(res, spec=rec.spec.model_dump_json(), seed=rec.spec.seed)


# --- brms-style summaries ----------------------------------------------------------------------------------------


def effects(rec: RunRecord, kind: str, probs: tuple[float, float], ctx: Context) -> EffectsTable:
    """fixef, ranef, coef or the prior summary of the run's stored draws (no data needed: draws and the spec)."""
    from .. import effects as fx

    res = fitted(rec, ctx, with_data=False)
    try:
        if kind == "prior":
            tables = {"": fx.prior_summary(res.model)}
        elif kind == "fixef":
            tables = {"": fx.fixef(res, probs)}
        else:
            tables = dict((fx.ranef if kind == "ranef" else fx.coef)(res, True, probs))
    except ArgumentError as exc:
        raise _field(exc, {"probs": ("query", "probs")}) from None
    except ValueError as exc:
        raise StateConflict(f"run {rec.id}: {exc}") from None
    rows: list[dict[str, str | float | list[str] | None]] = []
    columns: list[str] = []
    for group, table in tables.items():
        columns = [str(c) for c in table.columns]
        for idx, row in table.iterrows():
            out: dict[str, Any] = {"index": [str(i) for i in idx] if isinstance(idx, tuple) else [str(idx)]}
            if group:
                out["group"] = group
            for c in columns:
                v = row[c]
                out[c] = v if isinstance(v, str) else _finite(float(v))
            rows.append(out)
    return EffectsTable(run_id=rec.id, kind=kind, columns=columns, rows=rows)  # type: ignore[arg-type]
