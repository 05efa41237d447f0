"""/v1/models: the model families a run spec may name (built-in and registered by installed packages), each with the
JSON schema of its parameters. The list is fixed when the service starts: the service never accepts code."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from raysampler.service.schemas import ModelFamilyList, model_families

from ..deps import tenant
from ..errors import error_responses

router = APIRouter(prefix="/v1/models", tags=["models"], responses=error_responses(401))
Tenant = Annotated[str, Depends(tenant)]

_FAMILIES: ModelFamilyList | None = None


@router.get("", response_model=ModelFamilyList)
def list_models(who: Tenant) -> ModelFamilyList:
    """Every model family: name, description, built-in or from which distribution, and its parameters' schema."""
    global _FAMILIES
    if _FAMILIES is None:
        _FAMILIES = model_families()
    return _FAMILIES
