"""/v1/compare: rank runs fitted on the same rows by PSIS-LOO, computed where the rows are."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from raysampler.service import checks
from raysampler.service.errors import NotFound
from raysampler.service.schemas import CompareRequest, Comparison

from ..deps import Services, check_context, services, tenant
from ..errors import error_responses

router = APIRouter(prefix="/v1/compare", tags=["runs"], responses=error_responses(401))


@router.post("", response_model=Comparison, responses=error_responses(400, 403, 404, 409, 413, 422))
def compare(
    body: CompareRequest, who: Annotated[str, Depends(tenant)], svc: Annotated[Services, Depends(services)]
) -> Comparison:
    """Runs best first by elpd, with the SE of each difference from the paired per-row differences (summed at the
    shards) and pseudo-BMA or stacking weights (`method`). A run id that is not the tenant's is a 404 naming
    runs[i], as an unknown id in a path is."""
    recs = []
    for i, run_id in enumerate(body.runs):
        try:
            recs.append(svc.manager.get(who, run_id))
        except NotFound as exc:
            raise NotFound(f"runs[{i}]: {exc}") from None
    return checks.compare(recs, body.draws, check_context(svc), body.method)
