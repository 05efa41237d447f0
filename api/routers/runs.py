"""/v1/runs: submit, list, inspect, stream draws (NDJSON) and events (SSE), summarise, export, cancel, delete."""
from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, StreamingResponse
from starlette.background import BackgroundTask

from raysampler.service import streaming
from raysampler.service.runs import NotFound, SpecError, StateConflict, stored_result
from raysampler.service.schemas import Progress, RunInfo, RunList, RunSpec, Status, WorkerStats

from ..deps import Services, services, tenant

router = APIRouter(prefix="/v1/runs", tags=["runs"])
Tenant = Annotated[str, Depends(tenant)]
Svc = Annotated[Services, Depends(services)]


def run_info(rec: dict) -> RunInfo:
    return RunInfo(
        id=rec["id"], status=rec["status"], created_at=rec["created_at"], started_at=rec["started_at"],
        finished_at=rec["finished_at"], spec=RunSpec.model_validate(rec["spec"]),
        progress=Progress(rounds_done=rec["rounds_done"], rounds_total=rec["rounds_total"],
                          draws_stored=rec["draws_stored"], draws_total=rec["draws_total"]),
        timings=rec["timings"] or {}, workers=[WorkerStats(**w) for w in rec["workers"] or []],
        param_names=rec["param_names"], error=rec["error"], warnings=rec["warnings"] or [])


def _get(svc: Services, who: str, run_id: str) -> dict:
    rec = svc.store.get_run(who, run_id)
    if rec is None:
        raise HTTPException(404, f"no run {run_id!r}")
    return rec


@router.post("", status_code=202, response_model=RunInfo)
def submit(spec: RunSpec, response: Response, who: Tenant, svc: Svc,
           idempotency_key: Annotated[str | None, Header(max_length=200)] = None) -> RunInfo:
    """Validate and queue a run. A retry with the same Idempotency-Key (or run_id) returns the same run."""
    try:
        rec, created = svc.manager.submit(who, spec, idempotency_key)
    except SpecError as exc:
        raise RequestValidationError([{"type": "value_error", "loc": ("body", *exc.loc), "msg": str(exc),
                                       "input": None}]) from None
    except StateConflict as exc:
        raise HTTPException(409, str(exc)) from None
    response.headers["Location"] = f"/v1/runs/{rec['id']}"
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return run_info(svc.store.get_run(who, rec["id"]))


@router.get("", response_model=RunList)
def list_runs(who: Tenant, svc: Svc, status: Status | None = None,
              cursor: Annotated[str | None, Query(pattern=r"^\d{1,18}$", description="next_cursor of the previous page")]
              = None, limit: Annotated[int, Query(ge=1, le=200)] = 50) -> RunList:
    """The tenant's runs, newest first, `limit` per page."""
    rows = svc.store.list_runs(who, status, int(cursor) if cursor else None, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return RunList(runs=[run_info(r) for r in rows], next_cursor=str(rows[-1]["key"]) if more else None)


@router.get("/{run_id}", response_model=RunInfo)
def get_run(run_id: str, who: Tenant, svc: Svc) -> RunInfo:
    return run_info(_get(svc, who, run_id))


@router.get("/{run_id}/draws", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {}},
                             "description": "header line, then one line per stored draw (see raysampler.service.streaming)"}})
def draws(run_id: str, who: Tenant, svc: Svc,
          start: Annotated[int, Query(ge=0, lt=10**18, description="offset of the first draw line (index·chains + chain)")] = 0,
          follow: bool = False) -> StreamingResponse:
    """Stored draws as NDJSON from offset `start`; `follow=true` keeps the stream open until the run ends."""
    _get(svc, who, run_id)
    body = streaming.ndjson_draws(lambda: svc.store.get_run(who, run_id), svc.files, start, follow,
                                  svc.settings.poll_s)
    return StreamingResponse(body, media_type="application/x-ndjson", headers={"Cache-Control": "no-store"})


@router.get("/{run_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
def events(run_id: str, who: Tenant, svc: Svc,
           last_event_id: Annotated[str | None, Header(pattern=r"^\d{1,18}$")] = None,
           after: Annotated[int | None, Query(ge=0, lt=10**18, description="like Last-Event-ID")] = None,
           follow: bool = True) -> StreamingResponse:
    """Progress, status changes and warnings as Server-Sent Events; resumable with Last-Event-ID."""
    _get(svc, who, run_id)
    start = int(last_event_id) if last_event_id is not None else (after or 0)
    body = streaming.sse_events(svc.store, lambda: svc.store.get_run(who, run_id), start, follow,
                                svc.settings.poll_s, svc.settings.keepalive_s)
    return StreamingResponse(body, media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.get("/{run_id}/summary")
def summary(run_id: str, who: Tenant, svc: Svc,
            ci_prob: Annotated[float, Query(gt=0, lt=1)] = 0.94) -> dict:
    """mean, sd, HDI, ESS bulk/tail, R-hat and MCSE per coordinate, on the draws stored so far (arviz-stats)."""
    rec = _get(svc, who, run_id)
    if rec["draws_stored"] < 4:
        raise HTTPException(409, f"run {run_id} has {rec['draws_stored']} draws per chain stored; a summary needs 4")
    table = stored_result(rec, svc.files).summary(ci_prob=ci_prob)
    rows = [{"param": str(idx)} | {str(k): (None if not math.isfinite(float(v)) else float(v))
                                    for k, v in row.items()} for idx, row in table.iterrows()]
    return {"run_id": run_id, "status": rec["status"], "draws_per_chain": rec["draws_stored"],
            "chains": rec["chains"], "ci_prob": ci_prob, "columns": [str(c) for c in table.columns], "rows": rows}


@router.get("/{run_id}/arviz", response_class=FileResponse,
            responses={200: {"content": {"application/x-netcdf": {}}}})
def arviz(run_id: str, who: Tenant, svc: Svc) -> FileResponse:
    """The stored draws as an ArviZ DataTree in NetCDF-4 (posterior and sample_stats groups)."""
    rec = _get(svc, who, run_id)
    if rec["draws_stored"] < 1:
        raise HTTPException(409, f"run {run_id} has no stored draws yet")
    fd, name = tempfile.mkstemp(suffix=".nc", dir=svc.settings.data_dir)
    os.close(fd)
    tmp = Path(name)
    try:
        stored_result(rec, svc.files).to_arviz().to_netcdf(tmp, engine="h5netcdf")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return FileResponse(tmp, media_type="application/x-netcdf", filename=f"{run_id}.nc",
                        background=BackgroundTask(tmp.unlink, missing_ok=True))


@router.post("/{run_id}/cancel", status_code=202, response_model=RunInfo)
def cancel(run_id: str, who: Tenant, svc: Svc) -> RunInfo:
    """Stop sampling; stored draws are kept and the run ends CANCELLED."""
    try:
        return run_info(svc.manager.cancel(who, run_id))
    except NotFound:
        raise HTTPException(404, f"no run {run_id!r}") from None
    except StateConflict as exc:
        raise HTTPException(409, str(exc)) from None


@router.delete("/{run_id}", status_code=204)
def delete(run_id: str, who: Tenant, svc: Svc) -> Response:
    """Purge a finished run: its record, events and draw files."""
    try:
        svc.manager.delete(who, run_id)
    except NotFound:
        raise HTTPException(404, f"no run {run_id!r}") from None
    except StateConflict as exc:
        raise HTTPException(409, str(exc)) from None
    return Response(status_code=204)

