"""/v1/datasets: upload (.npz, .csv, .parquet), list, delete — per tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, Response, UploadFile
from pydantic import Field

from raysampler.service import datasets
from raysampler.service.records import DatasetRecord
from raysampler.service.schemas import DatasetInfo, DatasetList

from ..deps import Absent, Services, services, tenant
from ..errors import error_responses

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], responses=error_responses(401))
Tenant = Annotated[str, Depends(tenant)]
Svc = Annotated[Services, Depends(services)]


def dataset_info(rec: DatasetRecord) -> DatasetInfo:
    return DatasetInfo(id=rec.id, name=rec.name, n=rec.n, d=rec.d, created_at=rec.created_at, bytes=rec.nbytes)


@router.post("", status_code=201, response_model=DatasetInfo, responses=error_responses(400, 413, 422, 429))
def upload(
    who: Tenant,
    svc: Svc,
    file: Annotated[
        UploadFile,
        File(
            description=".npz, .csv or .parquet (told apart by content)",
            examples=["y,age,dose\n1,54,0.5\n0,61,0.2\n1,47,0.9\n"],
        ),
    ],
    y_column: Annotated[
        str,
        Form(
            description="target column (csv/parquet) or array name (npz); left at 'y', a csv/parquet table without "
            "a column 'y' is kept whole (for a formula, which names its response among the columns)"
        ),
    ] = "y",
    x_columns: Annotated[
        str | Absent,
        Form(
            description="comma-separated feature columns (csv/parquet; default: all others) or the X array name (npz)"
        ),
    ] = None,
    name: Annotated[Annotated[str, Field(max_length=200)] | Absent, Form()] = None,
) -> DatasetInfo:
    """Store a data set for runs to reference by id (data.dataset_id); over the size limit → 413."""
    cols = [c.strip() for c in x_columns.split(",") if c.strip()] if x_columns else None
    rec = datasets.store_upload(
        svc.settings,
        svc.store,
        who,
        file.file,
        file.filename,
        y_column,
        cols,
        name,
        admit=lambda nbytes: svc.manager.check_stored_bytes(who, nbytes),
    )
    return dataset_info(rec)


@router.get("", response_model=DatasetList)
def list_datasets(who: Tenant, svc: Svc) -> DatasetList:
    return DatasetList(datasets=[dataset_info(r) for r in svc.store.list_datasets(who)])


@router.get("/{dataset_id}", response_model=DatasetInfo, responses=error_responses(404))
def get_dataset(dataset_id: str, who: Tenant, svc: Svc) -> DatasetInfo:
    return dataset_info(datasets.get_dataset(svc.store, who, dataset_id))


@router.delete("/{dataset_id}", status_code=204, responses=error_responses(404))
def delete_dataset(dataset_id: str, who: Tenant, svc: Svc) -> Response:
    datasets.delete_dataset(svc.store, who, dataset_id)
    return Response(status_code=204)
