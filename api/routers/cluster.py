"""/v1/cluster: the operator's view of the nodes, the queue and the caller's quota use."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from raysampler.service.cluster import cluster_view
from raysampler.service.schemas import ClusterView

from ..deps import Services, services, tenant
from ..errors import error_responses

router = APIRouter(prefix="/v1/cluster", tags=["cluster"], responses=error_responses(401))


@router.get("", response_model=ClusterView)
def cluster(who: Annotated[str, Depends(tenant)], svc: Annotated[Services, Depends(services)]) -> ClusterView:
    """Ray's nodes (site label, CPUs) with the caller's workers on them (other tenants' as counts), the queue of
    waiting runs with the caller's positions in it, the caller's quota use, and Ray's dashboard address if set."""
    return cluster_view(who, svc.manager, svc.store)
