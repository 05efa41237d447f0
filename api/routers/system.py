"""Health, version and Prometheus metrics (no API key needed)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from raysampler import __version__
from raysampler.service.schemas import ALGORITHM_NAMES, BUILTIN_DATASETS, MODEL_FAMILIES, Health, VersionInfo

from ..deps import Services, services

router = APIRouter(tags=["system"])
Svc = Annotated[Services, Depends(services)]


@router.get("/v1/health", response_model=Health)
def health(svc: Svc) -> Health:
    """Liveness and what the service runs on."""
    import ray

    svc.store.count_runs_by_status()  # the database answers
    return Health(status="ok", executor=svc.settings.executor, ray_connected=ray.is_initialized())


@router.get("/v1/version", response_model=VersionInfo)
def version() -> VersionInfo:
    """The service's version and the names a run spec may use."""
    return VersionInfo(
        version=__version__,
        algorithms=list(ALGORITHM_NAMES),
        model_families=list(MODEL_FAMILIES),
        builtin_datasets=list(BUILTIN_DATASETS),
    )


@router.get("/metrics", include_in_schema=False)
def metrics(svc: Svc) -> Response:
    return Response(generate_latest(svc.metrics.registry), media_type=CONTENT_TYPE_LATEST)
