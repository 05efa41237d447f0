"""/v1/datasets: upload (.npz, .csv, .parquet), list, delete — per tenant."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Depends, File, Form, HTTPException, Response, UploadFile
from fastapi.exceptions import RequestValidationError

from raysampler.service.runs import dataset_path, new_dataset_id
from raysampler.service.schemas import DatasetInfo, DatasetList
from raysampler.shards import SUFFIXES, read_data_file

from ..deps import Services, services, tenant

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])
Tenant = Annotated[str, Depends(tenant)]
Svc = Annotated[Services, Depends(services)]


def _info(rec: dict) -> DatasetInfo:
    return DatasetInfo(id=rec["id"], name=rec["name"], n=rec["n"], d=rec["d"], created_at=rec["created_at"],
                       bytes=rec["bytes"])


def _invalid(field: str, msg: str) -> RequestValidationError:
    return RequestValidationError([{"type": "value_error", "loc": ("body", field), "msg": msg, "input": None}])


@router.post("", status_code=201, response_model=DatasetInfo)
def upload(who: Tenant, svc: Svc, file: Annotated[UploadFile, File(description=".npz, .csv or .parquet")],
           y_column: Annotated[str, Form(description="target column (csv/parquet) or array name (npz)")] = "y",
           x_columns: Annotated[str | None, Form(description="comma-separated feature columns (csv/parquet; "
                                                             "default: all others) or the X array name (npz)")] = None,
           name: Annotated[str | None, Form(max_length=200)] = None) -> DatasetInfo:
    """Store a data set for runs to reference by id (data.dataset_id); over the size limit → 413."""
    suffix = Path(file.filename or "").suffix.lower()
    if suffix not in SUFFIXES:
        raise _invalid("file", f"file name must end in one of {', '.join(SUFFIXES)}, got {file.filename!r}")
    limit = svc.settings.max_upload_bytes
    with tempfile.NamedTemporaryFile(suffix=suffix, dir=svc.settings.datasets_dir, delete=False) as tmp:
        size = 0
        while chunk := file.file.read(1 << 20):
            size += len(chunk)
            if size > limit:
                break
            tmp.write(chunk)
    try:
        if size > limit:
            raise HTTPException(413, f"upload is over the limit of {limit} bytes (RAYSAMPLER_MAX_UPLOAD_BYTES)")
        cols = [c.strip() for c in x_columns.split(",") if c.strip()] if x_columns else None
        try:
            X, y = read_data_file(tmp.name, y=y_column, x=cols)
        except (ValueError, ImportError) as exc:
            raise _invalid("file", str(exc).replace(repr(tmp.name), repr(file.filename))) from None
        dataset_id = new_dataset_id()
        path = dataset_path(svc.settings, who, dataset_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, X=X, y=y)
        rec = svc.store.add_dataset(who, dataset_id, name or file.filename or dataset_id, int(X.shape[0]),
                                    int(X.shape[1]), os.path.getsize(path), str(path))
        return _info(rec)
    finally:
        os.unlink(tmp.name)


@router.get("", response_model=DatasetList)
def list_datasets(who: Tenant, svc: Svc) -> DatasetList:
    return DatasetList(datasets=[_info(r) for r in svc.store.list_datasets(who)])


@router.get("/{dataset_id}", response_model=DatasetInfo)
def get_dataset(dataset_id: str, who: Tenant, svc: Svc) -> DatasetInfo:
    rec = svc.store.get_dataset(who, dataset_id)
    if rec is None:
        raise HTTPException(404, f"no data set {dataset_id!r}")
    return _info(rec)


@router.delete("/{dataset_id}", status_code=204)
def delete_dataset(dataset_id: str, who: Tenant, svc: Svc) -> Response:
    rec = svc.store.get_dataset(who, dataset_id)
    if rec is None:
        raise HTTPException(404, f"no data set {dataset_id!r}")
    svc.store.delete_dataset(who, dataset_id)
    Path(rec["path"]).unlink(missing_ok=True)
    return Response(status_code=204)
