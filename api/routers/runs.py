"""/v1/runs: submit, list, inspect, stream draws (NDJSON) and events (SSE), summarise, export, cancel, delete."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from pydantic import Field
from starlette.background import BackgroundTask

from raysampler.names import ID
from raysampler.predictive import PpcStatName
from raysampler.service import checks, plotdata, results, streaming
from raysampler.service.errors import NotFound, StateConflict
from raysampler.service.records import RunRecord
from raysampler.service.schemas import (
    BayesR2Info,
    EffectsTable,
    EvaluateRequest,
    Evaluation,
    LooInfo,
    ParamDiagnostics,
    PpcInfo,
    Prediction,
    PredictRequest,
    RunInfo,
    RunLedger,
    RunList,
    RunSpec,
    RunSummary,
    Trace,
)
from raysampler.wire import EVENT_STREAM_MEDIA_TYPE, NDJSON_MEDIA_TYPE, EventKind, RunStatus

from ..deps import DRAWS_QUERY_PATTERN, Absent, Services, check_context, draws_arg, services, tenant
from ..errors import error_responses

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=error_responses(401))
Tenant = Annotated[str, Depends(tenant)]
Svc = Annotated[Services, Depends(services)]
RUN_ID_404 = error_responses(404)
TAG_QUERY_PATTERN = rf"^{ID}:.{{0,200}}$"  # key:value, the key as RunSpec's tags have it
Seq = Annotated[str, Field(pattern=r"^\d{1,18}$")]  # an event id or list cursor, as text
Offset = Annotated[int, Field(ge=0, lt=10**18)]
#: One event of the stream (keep-alive comments aside): its sequence number, kind, and JSON data.
SSE_EVENT_SCHEMA = {
    "type": "object",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": r"^[1-9]\d*$"},
        "event": {"type": "string", "enum": [k.value for k in EventKind]},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
}


def run_info(rec: RunRecord) -> RunInfo:
    return RunInfo(
        id=rec.id,
        name=rec.spec.name,
        tags=dict(rec.spec.tags),
        status=rec.status,
        created_at=rec.created_at,
        started_at=rec.started_at,
        finished_at=rec.finished_at,
        spec=rec.spec,
        progress=results.progress(rec),
        timings=rec.timings,
        workers=list(rec.workers),
        param_names=None if rec.param_names is None else list(rec.param_names),
        response=rec.spec.response_column(),
        error=rec.error,
        warnings=list(rec.warnings),
        plan=rec.plan,
        failure=rec.failure,
        diagnostics=rec.diagnostics,
        restarts=rec.restarts,
        checkpoint_round=rec.checkpoint_round,
        stop_reason=rec.stop_reason,
        replica=rec.lease_owner,
        chains=rec.chains,
        network=rec.network,
    )


@router.post(
    "",
    status_code=202,
    response_model=RunInfo,
    responses=error_responses(400, 403, 409, 413, 422, 429)
    | {202: {"headers": {"Location": {"schema": {"type": "string"}, "description": "the run's URL path"}}}},
)
def submit(
    spec: RunSpec,
    response: Response,
    who: Tenant,
    svc: Svc,
    idempotency_key: Annotated[Annotated[str, Field(max_length=200)] | Absent, Header()] = None,
) -> RunInfo:
    """Validate and queue a run. A retry with the same Idempotency-Key (or run_id) returns the same run."""
    rec, created = svc.manager.submit(who, spec, idempotency_key)
    response.headers["Location"] = f"/v1/runs/{rec.id}"
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return run_info(svc.manager.get(who, rec.id))


@router.get("", response_model=RunList)
def list_runs(
    who: Tenant,
    svc: Svc,
    status: RunStatus | Absent = None,
    cursor: Annotated[Seq | Absent, Query(description="next_cursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    name: Annotated[
        Annotated[str, Field(min_length=1, max_length=200)] | Absent, Query(description="only runs of this name")
    ] = None,
    tag: Annotated[
        list[Annotated[str, Field(pattern=TAG_QUERY_PATTERN)]] | Absent,
        Query(description="key:value; only runs with this tag (repeat for runs with all of them)"),
    ] = None,
) -> RunList:
    """The tenant's runs, newest first, `limit` per page; filtered by name and tags when asked."""
    tags = dict(t.split(":", 1) for t in tag or ())
    rows = svc.store.list_runs(who, status, int(cursor) if cursor else None, limit + 1, name=name, tags=tags)
    more = len(rows) > limit
    rows = rows[:limit]
    return RunList(runs=[run_info(r) for r in rows], next_cursor=str(rows[-1].key) if more else None)


@router.get("/{run_id}", response_model=RunInfo, responses=RUN_ID_404)
def get_run(run_id: str, who: Tenant, svc: Svc) -> RunInfo:
    return run_info(svc.manager.get(who, run_id))


@router.get(
    "/{run_id}/draws",
    response_class=StreamingResponse,
    responses=RUN_ID_404
    | {
        200: {
            "content": {NDJSON_MEDIA_TYPE: {"schema": {"type": "string"}}},
            "description": "a header line, then one line per stored draw (the format is raysampler.wire's)",
        }
    },
)
def draws(
    run_id: str,
    who: Tenant,
    svc: Svc,
    start: Annotated[Offset, Query(description="offset of the first draw line (index·chains + chain)")] = 0,
    follow: bool = False,
) -> StreamingResponse:
    """Stored draws as NDJSON from offset `start`; `follow=true` keeps the stream open until the run ends."""
    svc.manager.get(who, run_id)
    body = streaming.ndjson_draws(lambda: svc.store.get_run(who, run_id), svc.files, start, follow, svc.settings.poll_s)
    return StreamingResponse(body, media_type=NDJSON_MEDIA_TYPE, headers={"Cache-Control": "no-store"})


@router.get(
    "/{run_id}/events",
    response_class=StreamingResponse,
    responses=RUN_ID_404
    | {
        200: {
            "content": {EVENT_STREAM_MEDIA_TYPE: {"schema": SSE_EVENT_SCHEMA}},
            "description": "Server-Sent Events with ids 1, 2, ... (the format is raysampler.wire's)",
        }
    },
)
def events(
    run_id: str,
    who: Tenant,
    svc: Svc,
    last_event_id: Annotated[Seq | Absent, Header(description="resume after this event id")] = None,
    after: Annotated[Offset | Absent, Query(description="like Last-Event-ID")] = None,
    follow: bool = True,
) -> StreamingResponse:
    """Progress, status changes and warnings as Server-Sent Events; resumable with Last-Event-ID."""
    svc.manager.get(who, run_id)
    start = int(last_event_id) if last_event_id is not None else (after or 0)
    body = streaming.sse_events(
        svc.store, lambda: svc.store.get_run(who, run_id), start, follow, svc.settings.poll_s, svc.settings.keepalive_s
    )
    return StreamingResponse(
        body, media_type=EVENT_STREAM_MEDIA_TYPE, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    )


@router.get("/{run_id}/ledger", response_model=RunLedger, responses=error_responses(404, 409, 422))
def ledger(
    run_id: str,
    who: Tenant,
    svc: Svc,
    site: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            description='only the shards of this site (a site label, or "shard-<i>" for a shard without one)',
        ),
    ] = None,
) -> RunLedger:
    """The release ledger: every message each shard's site sent in the run so far, by kind (quantity, shape,
    messages, bytes, masked/sealed/plain). 404 for a site the run has no shard on; 409 before the run has started."""
    rec = svc.manager.get(who, run_id)
    shards = [w.ledger for w in rec.workers if w.ledger is not None]
    if not shards:
        raise StateConflict(f"run {rec.id} has no ledger yet: its set-up has not finished")
    if site is not None:
        mine = [s for s in shards if s.site == site or f"shard-{s.shard}" == site]
        if not mine:
            there = sorted({s.site for s in shards if s.site is not None})
            names = ", ".join(repr(n) for n in there) if there else "none (its shards are shard-0, shard-1, ...)"
            raise NotFound(f"site: run {rec.id} has no shard on site {site!r}; its sites: {names}")
        shards = mine
    return RunLedger(run_id=rec.id, site=site, shards=shards)


@router.get("/{run_id}/summary", response_model=RunSummary, responses=error_responses(404, 409))
def summary(run_id: str, who: Tenant, svc: Svc, ci_prob: Annotated[float, Query(gt=0, lt=1)] = 0.94) -> RunSummary:
    """mean, sd, HDI, ESS bulk/tail, R-hat and MCSE per coordinate, on the draws stored so far (arviz-stats)."""
    return results.summary(svc.manager.get(who, run_id), svc.files, ci_prob, svc.manager.summaries)


@router.get("/{run_id}/effects", response_model=EffectsTable, responses=error_responses(404, 409, 422))
def effects(
    run_id: str,
    who: Tenant,
    svc: Svc,
    kind: Annotated[Literal["fixef", "ranef", "coef", "prior"], Query(description="which summary")] = "fixef",
    lower: Annotated[float, Query(ge=0, lt=1, description="the interval's lower quantile")] = 0.025,
    upper: Annotated[float, Query(gt=0, le=1, description="the interval's upper quantile")] = 0.975,
) -> EffectsTable:
    """brms-style summaries of the stored draws: the coefficients (fixef), each group's effects (ranef), each group's
    coefficients, fixed plus its effect (coef), or the prior on every parameter (prior)."""
    return checks.effects(svc.manager.get(who, run_id), kind, (lower, upper), check_context(svc))


@router.get("/{run_id}/ppc", response_model=PpcInfo, responses=error_responses(404, 409, 422))
def ppc(
    run_id: str,
    who: Tenant,
    svc: Svc,
    kind: Annotated[
        Literal["dens", "hist", "stat"], Query(description="density overlay, histograms or a statistic")
    ] = "dens",
    stat: Annotated[PpcStatName, Query(description='the statistic of kind "stat"')] = "mean",
    draws: Annotated[
        str | None,
        Query(pattern=DRAWS_QUERY_PATTERN, description="replicated data sets (default: 10 for a plot, 1000 for stat)"),
    ] = None,
    bins: Annotated[int | None, Query(ge=1, le=1000, description='bins of kind "hist" (default 30)')] = None,
    seed: Annotated[int, Query(ge=0, le=2**63 - 1, description="seed of the replicated data")] = 0,
    group: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            description='kind "stat" per label of this column of the data (the answer\'s kind is "stat_grouped")',
        ),
    ] = None,
) -> PpcInfo:
    """A posterior predictive check on the rows the run was fitted on: each shard draws replicated data sets from
    the run's draws where its rows live and sends back only bin counts or sums; the bins are agreed from the shards'
    ranges first. No row leaves its shard."""
    return checks.ppc(
        svc.manager.get(who, run_id),
        kind,
        stat,
        None if draws is None else draws_arg(draws),
        bins,
        seed,
        check_context(svc),
        group,
    )


@router.get("/{run_id}/trace", response_model=Trace, responses=error_responses(404))
def trace(
    run_id: str,
    who: Tenant,
    svc: Svc,
    param: Annotated[int, Query(ge=0, lt=10**6, description="the coordinate (position in param_names)")] = 0,
    max_points: Annotated[int, Query(ge=2, le=20000, description="at most this many draws per chain")] = 2000,
    last: Annotated[int | None, Query(ge=1, lt=10**12, description="only the last `last` draws (default all)")] = None,
) -> Trace:
    """One parameter's stored draws, evenly thinned, per chain, on its natural scale: for trace plots and
    histograms of long runs without moving every draw (the dashboard uses it)."""
    return results.trace(svc.manager.get(who, run_id), svc.files, param, max_points, last)


@router.get("/{run_id}/diagnostics", response_model=ParamDiagnostics, responses=error_responses(404, 409))
def diagnostics(
    run_id: str,
    who: Tenant,
    svc: Svc,
    param: Annotated[int, Query(ge=0, lt=10**6, description="the coordinate (position in param_names)")] = 0,
    max_draws: Annotated[int, Query(ge=8, le=20000, description="at most this many draws per chain are used")] = 4000,
    max_lag: Annotated[int, Query(ge=1, le=1000, description="autocorrelation up to this lag")] = 100,
    rank_bins: Annotated[int, Query(ge=2, le=200, description="bins of the rank histograms")] = 20,
    ess_points: Annotated[int, Query(ge=2, le=100, description="points of the ESS evolution")] = 20,
) -> ParamDiagnostics:
    """One parameter's rank histograms and autocorrelation per chain, and its bulk and tail ESS as the draws grow
    (arviz-stats), on an evenly thinned window of the stored draws: the dashboard's diagnostic plots."""
    rec = svc.manager.get(who, run_id)
    return plotdata.param_diagnostics(rec, svc.files, param, max_draws, max_lag, rank_bins, ess_points)


@router.get(
    "/{run_id}/arviz",
    response_class=FileResponse,
    responses=error_responses(404, 409)
    | {200: {"content": {"application/x-netcdf": {"schema": {"type": "string", "format": "binary"}}}}},
)
def arviz(run_id: str, who: Tenant, svc: Svc) -> FileResponse:
    """The stored draws as an ArviZ DataTree in NetCDF-4: posterior and sample_stats groups, and log_likelihood and
    observed_data when the run's rows may move (built-in and uploaded data sets, never site shards: the posterior's
    `log_likelihood` attribute then says why); the run's spec and seed in the posterior's attributes."""
    rec = svc.manager.get(who, run_id)
    if rec.draws_stored < 1:
        raise StateConflict(f"run {rec.id} has no stored draws yet")
    path = results.netcdf_export(rec, checks.export_result(rec, check_context(svc)), svc.settings.data_dir)
    return FileResponse(
        path,
        media_type="application/x-netcdf",
        filename=f"{run_id}.nc",
        background=BackgroundTask(path.unlink, missing_ok=True),
    )


@router.post(
    "/{run_id}/predict",
    response_model=Prediction,
    responses=error_responses(400, 404, 409, 413, 422)
    | {
        200: {
            "content": {NDJSON_MEDIA_TYPE: {"schema": {"type": "string"}}},
            "description": "JSON (a Prediction), or with format=ndjson a header line then one line per row",
        }
    },
)
def predict(
    run_id: str,
    body: PredictRequest,
    who: Tenant,
    svc: Svc,
    format: Annotated[Literal["json", "ndjson"], Query(description="json, or ndjson: one line per row")] = "json",
) -> Response:
    """The posterior predictive at new rows: given inline (at most MAX_INLINE_ROWS) or as an uploaded data set."""
    pred = checks.predict(svc.manager.get(who, run_id), body, check_context(svc))
    if format == "ndjson":
        return StreamingResponse(checks.prediction_lines(pred), media_type=NDJSON_MEDIA_TYPE)
    return JSONResponse(pred.model_dump(mode="json"))


@router.post("/{run_id}/evaluate", response_model=Evaluation, responses=error_responses(400, 403, 404, 409, 413, 422))
def evaluate(run_id: str, body: EvaluateRequest, who: Tenant, svc: Svc) -> Evaluation:
    """Held-out metrics (classification: accuracy, NLL, Brier, ECE and the reliability curve; regression and counts:
    RMSE, NLL, CRPS, 50%/90% interval coverage), each computed where the rows are: only per-shard sums travel."""
    return checks.evaluate(svc.manager.get(who, run_id), body, check_context(svc))


@router.get("/{run_id}/loo", response_model=LooInfo, responses=error_responses(404, 409, 422))
def loo(
    run_id: str,
    who: Tenant,
    svc: Svc,
    draws: Annotated[str, Query(pattern=DRAWS_QUERY_PATTERN, description="at most this many draws, or 'all'")] = "1000",
    moment_match: Annotated[
        bool, Query(description="improve the rows with Pareto k ≥ 0.7 by moment matching at the shards")
    ] = False,
) -> LooInfo:
    """PSIS-LOO on the rows the run was fitted on, each shard smoothing its own observations where they live:
    elpd, SE, p_loo, Pareto-k counts by band (flat rows apart) and the row positions (never the rows) with k ≥ 0.7;
    with moment_match=true, what moment matching did to each of those rows."""
    return checks.loo(svc.manager.get(who, run_id), draws_arg(draws), check_context(svc), moment_match)


@router.get("/{run_id}/r2", response_model=BayesR2Info, responses=error_responses(404, 409, 422))
def bayes_r2(
    run_id: str,
    who: Tenant,
    svc: Svc,
    draws: Annotated[str, Query(pattern=DRAWS_QUERY_PATTERN, description="at most this many draws, or 'all'")] = "1000",
) -> BayesR2Info:
    """The residual-based Bayesian R² (brms' bayes_R2): var(ŷ) / (var(ŷ) + var(y − ŷ)) over the rows, per draw, each
    shard sending only per-draw sums of its own rows; 409 for a model with no real-valued expected response."""
    return checks.bayes_r2(svc.manager.get(who, run_id), draws_arg(draws), check_context(svc))


@router.post("/{run_id}/cancel", status_code=202, response_model=RunInfo, responses=error_responses(404, 409))
def cancel(run_id: str, who: Tenant, svc: Svc) -> RunInfo:
    """Stop sampling; stored draws are kept and the run ends CANCELLED."""
    return run_info(svc.manager.cancel(who, run_id))


@router.post("/{run_id}/resume", status_code=202, response_model=RunInfo, responses=error_responses(404, 409))
def resume(run_id: str, who: Tenant, svc: Svc) -> RunInfo:
    """Continue a FAILED or CANCELLED run from its checkpoint (e.g. once a lost site is back): it queues again and
    its draws continue exactly where the stored ones end."""
    return run_info(svc.manager.resume(who, run_id))


@router.delete("/{run_id}", status_code=204, responses=error_responses(404, 409))
def delete(run_id: str, who: Tenant, svc: Svc) -> Response:
    """Purge a finished run: its record, events and draw files."""
    svc.manager.delete(who, run_id)
    return Response(status_code=204)
