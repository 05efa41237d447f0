"""Health, version and Prometheus metrics (no API key needed)."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from raysampler import __version__, datasets
from raysampler.algorithms import ALGORITHMS
from raysampler.models import FAMILIES

from ..deps import Services, services

router = APIRouter(tags=["system"])
Svc = Annotated[Services, Depends(services)]


@router.get("/v1/health")
def health(svc: Svc) -> dict:
    """Liveness and what the service runs on."""
    import ray

    svc.store.count_runs_by_status()  # the database answers
    return {"status": "ok", "executor": svc.settings.executor, "ray_connected": ray.is_initialized()}


@router.get("/v1/version")
def version() -> dict:
    return {"version": __version__, "algorithms": sorted(ALGORITHMS), "model_families": sorted(FAMILIES),
            "builtin_datasets": ["builtin:" + n for n in datasets.available()]}


@router.get("/metrics", include_in_schema=False)
def metrics(svc: Svc) -> Response:
    return Response(generate_latest(svc.metrics.registry), media_type=CONTENT_TYPE_LATEST)
